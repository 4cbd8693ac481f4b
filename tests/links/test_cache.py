"""Repeated images and the multimodal caches (docs/cache.md): the workload's repeats, the two
caches on both sides, the references inside every backend's message, and the faults: an evicted
hash, a wrong hit, an engine killed with a populated store."""

from __future__ import annotations

import hashlib
import math
import signal
from pathlib import Path

import pytest
from segments import left_named

from serbench.links import cache, shm
from serbench.model.errors import CacheError, EngineError
from serbench.model.profiles import PROFILES
from serbench.model.results import Case
from serbench.runner.matrix import Plan, execute
from serbench.scenarios import SCENARIOS, dimensions
from serbench.scenarios.engine import server
from serbench.scenarios.engine.client import open_link
from serbench.scenarios.ipc import Settings, measure
from serbench.serializers import BUILTINS, conformance, get_serializer
from serbench.workloads import get_workload
from serbench.workloads.tree import payload_checksum

SMALL = "profile=llava"  # 1.35 MB an image


# ---------------------------------------------------------------- the workload


def test_turns_resend_the_conversation_and_define_their_hit_ratio() -> None:
    w = get_workload("images-8:turns=4")
    assert [len(w.image_keys(i)) for i in range(8)] == [2, 4, 6, 8, 2, 4, 6, 8]
    assert [w.repeats(i) for i in range(8)] == [0, 2, 4, 6, 0, 2, 4, 6]
    assert w.defined_hit_ratio(8) == pytest.approx(12 / 20)
    third, fourth = w.request(2), w.request(3)
    assert fourth.mm_hashes[:6] == third.mm_hashes  # the earlier turns again, in order
    assert len(set(fourth.mm_hashes)) == 8
    assert w.request(4).mm_hashes[0] not in fourth.mm_hashes  # a new conversation


def test_repeat_resends_a_seeded_share_of_the_previous_request() -> None:
    w = get_workload(f"images-4:repeat=0.5,{SMALL}")
    again = get_workload(f"images-4:repeat=0.5,{SMALL}")
    assert [w.image_keys(i) for i in range(5)] == [again.image_keys(i) for i in range(5)]
    first, second = w.request(0), w.request(1)
    shared = set(first.mm_hashes) & set(second.mm_hashes)
    assert len(shared) == 2 == w.repeats(1)
    assert w.defined_hit_ratio(3) == pytest.approx(4 / 12)
    # the same image is the same bytes under the same hash wherever it is sent
    images = {}
    for request in (first, second):
        for h, item in zip(request.mm_hashes, request.mm_inputs.items_by_modality["image"], strict=True):
            data = item.fields["pixel_values"].data
            assert images.setdefault(h, payload_checksum(data)) == payload_checksum(data)
    other_seed = get_workload(f"images-4:repeat=0.5,{SMALL},seed=1")
    assert other_seed.image_keys(1) != w.image_keys(1) or other_seed.request(0).mm_hashes != first.mm_hashes


def test_a_plain_workload_is_what_it_was() -> None:
    """No option: every image new, and the hashes and bytes of before the keys existed."""
    w = get_workload(f"images-2:{SMALL}")
    assert not w.repeating and w.defined_hit_ratio(4) == 0.0
    request = w.request(3)

    assert request.mm_hashes == [
        hashlib.sha256(f"{w.request_id(3)}/{i}".encode()).hexdigest() for i in (0, 1)
    ]


@pytest.mark.parametrize("spec", ["images-4:turns=5", "images-4:repeat=1.5", "images-4:turns=2,repeat=0.5"])
def test_bad_repetition_options_are_refused(spec: str) -> None:
    with pytest.raises(ValueError):
        get_workload(spec)


# ---------------------------------------------------------------- the caches, in one process


def _through(front: cache.FrontendCache, engine: cache.EngineCache, requests: list) -> list[tuple[int, int]]:
    """Each request through both halves, as the message would go; (frontend hits, engine hits)."""
    known: dict[str, int] = {}
    counts = []
    for request in requests:
        message, prepared = front.prepare(request, cache.digests(request, known))
        resolved, done = engine.resolve(message)
        assert payload_checksum(resolved) == payload_checksum(request)
        assert cache.verify_hits(request.request_id, done.hits) is None
        front.done(request.request_id)
        counts.append((prepared.hits, done.found))
    return counts


@pytest.mark.parametrize("mode", ["lru", "shm"])
def test_both_halves_agree_and_hit_what_the_workload_repeats(mode: str) -> None:
    w = get_workload(f"images-4:turns=4,{SMALL}")
    requests = [w.request(i) for i in range(8)]
    capacity = 2 * w.payload_bytes()
    with shm.Region.create(capacity) as region:
        store = cache.Store(region) if mode == "shm" else None
        front = cache.FrontendCache(mode, capacity, store)
        engine = cache.EngineCache(mode, capacity, region if mode == "shm" else None)
        counts = _through(front, engine, requests)
    assert [f for f, _ in counts] == [e for _, e in counts] == [w.repeats(i) for i in range(8)]


def test_a_small_lru_evicts_the_same_on_both_sides() -> None:
    w = get_workload(f"images-4:repeat=1,{SMALL}")
    image = w.payload_bytes() // 4
    front = cache.FrontendCache("lru", 3 * image)  # one image short of a request
    engine = cache.EngineCache("lru", 3 * image)
    counts = _through(front, engine, [w.request(i) for i in range(4)])
    assert all(f == e for f, e in counts) and sum(f for f, _ in counts) < 12
    assert front.evictions == engine.evictions > 0
    assert front.lru.entries.keys() == engine.lru.entries.keys()


def test_a_tensor_sent_again_keeps_both_lrus_in_step() -> None:
    """A sender that sends a tensor its receiver holds (the #52040 fault): the receiver's entry is
    replaced, not counted twice, and becomes the newest, as the sender's lookup made it."""
    w = get_workload(f"images-2:repeat=1,{SMALL}")
    first, second = (
        w.request(0).mm_inputs.items_by_modality["image"][i].fields["pixel_values"].data for i in (0, 1)
    )
    lru = cache.Lru(2 * first.nbytes)
    lru.put("a", first)
    lru.put("b", second)
    lru.put("a", first.clone())
    assert lru.held_bytes == 2 * first.nbytes and lru.evictions == 0
    assert list(lru.entries) == ["b", "a"]
    front = cache.FrontendCache("lru", 1)
    assert cache.mirror_disagreement(front, 0, "worker 1", "core") is None
    front.lru.evictions = 2
    why = cache.mirror_disagreement(front, 1, "worker 1", "core")
    assert why == "the worker 1's lru evicted 1 tensors, the core's 2: the mirrored caches disagree"


def test_a_reference_to_an_evicted_hash_is_a_one_line_error() -> None:
    w = get_workload(f"images-2:repeat=1,{SMALL}")
    front = cache.FrontendCache("lru", 10 * w.payload_bytes())
    engine = cache.EngineCache("lru", w.payload_bytes() // 4)  # keeps nothing
    known: dict[str, int] = {}
    for i in range(2):
        request = w.request(i)
        message, _ = front.prepare(request, cache.digests(request, known))
        if i == 0:
            engine.resolve(message)
    with pytest.raises(CacheError) as caught:
        engine.resolve(message)
    assert "\n" not in str(caught.value)
    assert "no longer holds (evicted or never sent)" in str(caught.value)


def test_a_hit_resolved_to_the_wrong_tensor_fails_its_digest() -> None:
    w = get_workload(f"images-2:repeat=1,{SMALL}")
    front = cache.FrontendCache("lru", 10 * w.payload_bytes())
    engine = cache.EngineCache("lru", 10 * w.payload_bytes())
    known: dict[str, int] = {}
    first, second = w.request(0), w.request(1)
    engine.resolve(front.prepare(first, cache.digests(first, known))[0])
    for key, tensor in engine.lru.entries.items():  # a cache whose memory changed under it
        engine.lru.entries[key] = tensor + 1
    _, done = engine.resolve(front.prepare(second, cache.digests(second, known))[0])
    assert "resolved" in cache.verify_hits("r", done.hits)


def test_the_store_evicts_oldest_first_and_never_a_pinned_entry() -> None:
    w = get_workload(f"images-4:{SMALL}")
    request = w.request(0)
    image = w.payload_bytes() // 4
    with shm.Region.create(3 * image + 3 * shm.ALIGN) as region:
        front = cache.FrontendCache("shm", region.size, cache.Store(region))
        message, prepared = front.prepare(request, cache.digests(request))
        assert prepared.stored_bytes == 3 * image  # the fourth: no room not in use, so inline
        leaves = [i.fields["pixel_values"].data for i in message.mm_inputs.items_by_modality["image"]]
        assert [cache.is_ref(leaf) for leaf in leaves] == [True, True, True, False]
        front.done(request.request_id)
        later = w.request(1)
        _, prepared = front.prepare(later, cache.digests(later))
        assert front.store.evictions == 3 and prepared.stored_bytes == 3 * image


def test_every_backend_round_trips_the_references() -> None:
    request = get_workload(f"images-2:{SMALL}").request(0)
    for mode in ("lru", "shm"):
        message = cache.all_refs(request, mode)
        for backend in BUILTINS:
            conformance.verify(get_serializer(backend), [message], f"refs-{mode}")


# ---------------------------------------------------------------- through real processes

FAST = Settings(num_prompts=6, rates=(math.inf,), max_concurrency=1, floor=2, step_s=0.001)


@pytest.mark.parametrize("mode", ["lru", "shm"])
def test_a_cached_case_measures_hits_bytes_and_ttft_apart(mode: str) -> None:
    workload = f"images-4:repeat=1,{SMALL}"
    outcome = measure("msgspec-frombuffer", workload, Settings(**{**FAST.__dict__, "cache": mode}))
    m, info = outcome.metrics, outcome.info
    assert m["hit_ratio"].median == pytest.approx(info.cache["defined_hit_ratio"]) == pytest.approx(20 / 24)
    payload = get_workload(workload).payload_bytes()
    first, *rest = m["request_bytes"].values
    assert first > payload and all(b < payload / 100 for b in rest)
    assert m["ttft_miss_s"].values and len(m["ttft_hit_s"].values) == 5
    assert {"ingress_hit_s", "ingress_miss_s"} <= m.keys()
    assert m["cache_frontend_bytes"].median == m["cache_engine_bytes"].median == payload
    assert info.cache["hits"] == 20 and m["cache_evictions"].median == 0


def test_turns_with_an_lru_measure_the_hit_ratio_the_workload_defines() -> None:
    workload = f"images-4:turns=4,{SMALL}"
    outcome = measure("pickle", workload, Settings(**{**FAST.__dict__, "cache": "lru"}))
    assert outcome.info.cache["defined_hit_ratio"] == pytest.approx(7 / 13)  # turns of 1, 2, 3, 4, 1, 2
    assert outcome.metrics["hit_ratio"].median == pytest.approx(7 / 13)
    assert "ttft_hit_s" not in outcome.metrics  # every turn sends a new image: no request all hits
    # a conversation's first turn is a miss, its later turns (an image new, the rest sent before) partial
    assert len(outcome.metrics["ttft_miss_s"].values) == 2
    assert len(outcome.metrics["ttft_partial_s"].values) == 4
    assert "ingress_partial_s" in outcome.metrics


def test_an_engine_killed_with_a_populated_store_leaves_no_segment() -> None:
    w = get_workload(f"images-2:repeat=1,{SMALL}")
    serializer = get_serializer("msgspec-frombuffer")
    before = set(shm.leftovers())
    link_of = open_link("msgspec-frombuffer", 0.001, cache_mode="shm", cache_bytes=4 * w.payload_bytes())
    with pytest.raises(EngineError, match="engine process died"), link_of as (link, _):
        request = w.request(0)
        message, prepared = link.cache.prepare(request, cache.digests(request))
        assert prepared.stored_bytes == w.payload_bytes() and link.cache.store.held_bytes
        link.send("request", serializer.encode(message), ack=True)
        assert not left_named(before)  # named only until the engine mapped it
        link.proc.kill()
        while True:
            link.recv(1.0)
    assert not left_named(before)
    assert link.proc.exitcode == -signal.SIGKILL


def test_an_evicted_hash_fails_its_case_in_one_line_and_the_run_goes_on(monkeypatch, tmp_path: Path) -> None:
    """An engine whose lru keeps nothing (its frontend believes it keeps everything): the lru case
    fails with the engine's one-line reason, the shm case after it passes."""
    opened = server._cache

    def forgetful(*args):
        half = opened(*args)
        if half is not None and half.lru is not None:
            half.lru.capacity = 1
        return half

    monkeypatch.setattr(server, "_cache", forgetful)
    workload = f"images-2:repeat=1,{SMALL}"
    plan = Plan(["msgspec-frombuffer"], [workload], ["ipc"], dimensions={"cache": ("lru", "shm")})
    profile = PROFILES["quick"].with_options(ipc_num_prompts=3, ipc_step_ms=0.0)
    records = {r.cache: r for r in execute(plan, profile, tmp_path / "results.json", argv=[]).results.records}
    error = records["lru"].error or ""
    assert "no longer holds (evicted or never sent)" in error and "\n" not in error
    assert records["shm"].error is None and records["shm"].metrics["hit_ratio"].median > 0


# ---------------------------------------------------------------- the dimension


def test_cache_is_a_dimension_of_ipc_memory_and_fanout_and_none_keeps_the_old_key() -> None:
    assert dimensions()["cache"].choices == ("none", "lru", "shm")
    fanout = SCENARIOS["fanout"].cases(["pickle"], ["images-4"], {"cache": ("none", "lru"), "workers": (2,)})
    assert [(c.cache, c.row) for c in fanout] == [(None, "pickle@shm-ring workers=2"),
                                                  ("lru", "pickle@shm-ring workers=2 cache=lru")]  # fmt: skip
    for name in ("ipc", "memory"):
        cases = SCENARIOS[name].cases(["pickle"], ["images-4"], {"cache": ("none", "shm")})
        assert [c.cache for c in cases] == [None, "shm"]
        assert cases[0] == Case(name, "pickle", "images-4", transport="ipc")
        assert cases[0].row == "pickle" and cases[1].row == "pickle cache=shm"
    assert SCENARIOS["micro"].cases(["pickle"], ["images-4"], {"cache": ("shm",)})[0].cache is None
