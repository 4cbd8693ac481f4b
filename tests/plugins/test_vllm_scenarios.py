"""vLLM's own requests (``layout=vllm-native``) through the scenarios built on serbench's requests
(docs/vllm.md): fan-out carries them in its step as vLLM's own type, and the multimodal cache, on
either hop, keeps vLLM's features as vLLM's caches do (a hit sent as the feature with ``data=None``).

Cases run as the runner runs them (``run_case`` in a forked child), with few rounds and prompts;
vLLM is imported before the first test (the ``vllm`` fixture), so no child pays for it. Nothing
asserts a time: bytes, ratios, counts and types are exact.
"""

from __future__ import annotations

import math

import pytest
from conftest import NEEDS_VLLM

from serbench.links import cache
from serbench.model.errors import CaseFailed
from serbench.model.profiles import PROFILES
from serbench.model.results import Case
from serbench.plugins.vllm import adapter
from serbench.runner import matrix as runner
from serbench.runtime.isolation import run_isolated
from serbench.scenarios import fanout
from serbench.scenarios.base import Outcome
from serbench.scenarios.ipc import Settings, measure
from serbench.serializers import conformance
from serbench.workloads import get_workload

pytestmark = [NEEDS_VLLM, pytest.mark.usefixtures("vllm")]

NATIVE = "images-2:layout=vllm-native,profile=llava,repeat=1"  # 1.35 MB an image, the same two again
PROFILE = PROFILES["quick"].with_options(fanout_rounds=2, fanout_decode_steps=1, fanout_timeout_s=20.0)
FAST = Settings(num_prompts=4, rates=(math.inf,), max_concurrency=1, floor=2, step_s=0.001)


@pytest.fixture(scope="module")
def payload() -> int:
    return get_workload(NATIVE).payload_bytes()


def _vllms_own_requests(worker: int, step: int, decoded) -> None:
    """``fanout.WORKER_HOOK``: a step whose new requests are not vLLM's own is a wrong step."""
    kind = adapter.load().EngineCoreRequest
    if not all(type(r) is kind for r in decoded.new_requests):
        raise ValueError(f"worker {worker}, step {step}: decoded {type(decoded.new_requests[0])}")


def _run_checking_types(case: Case):
    fanout.WORKER_HOOK = _vllms_own_requests
    return runner.run_case(case, PROFILE)


@pytest.mark.parametrize(
    "transport, workers, mode",
    [("shm-ring", 1, None), ("shm-ring", 2, "lru"), ("zmq-each", 1, "shm"), ("zmq-each", 2, None)],
)
def test_fanout_carries_vllms_own_requests_to_every_worker(transport, workers, mode, payload, clean) -> None:
    case = Case("fanout", "vllm", NATIVE, transport=transport, workers=workers, cache=mode)
    outcome = run_isolated(_run_checking_types, (case,), 120)
    assert isinstance(outcome, Outcome), outcome
    m = outcome.metrics
    assert set(m["encode_calls"].values) == {1.0}
    assert outcome.info.verification.messages >= 3  # two prefill steps and a decode step, bit-exact
    assert outcome.info.payload_bytes == payload
    if mode is None:
        assert m["wire_bytes"].median > payload  # both images travel in every prefill step
    else:  # the warm-up round sent them; every timed prefill step is a hit, each feature data=None
        assert m["hit_ratio"].median == pytest.approx(2 / 3)
        assert m["wire_bytes"].median < payload / 100
        assert m["cache_engine_bytes"].median == pytest.approx(payload, rel=0.01)


def test_a_backend_without_vllms_types_is_unsupported_with_its_reason() -> None:
    case = Case("fanout", "msgspec-frombuffer", NATIVE, transport="shm-ring", workers=1)
    outcome = runner.run_case(case, PROFILE)
    assert isinstance(outcome, runner.Unsupported)
    assert "MultiModalKwargsItem" in outcome.reason


@pytest.mark.parametrize("mode", ["lru", "shm"])
def test_the_ipc_cache_sends_a_hit_as_vllm_does(mode: str, payload: int, clean) -> None:
    outcome = measure("vllm", NATIVE, Settings(**{**FAST.__dict__, "cache": mode}))
    m, info = outcome.metrics, outcome.info
    assert m["hit_ratio"].median == pytest.approx(info.cache["defined_hit_ratio"]) == pytest.approx(6 / 8)
    first, *rest = m["request_bytes"].values
    assert first > payload and all(b < payload / 100 for b in rest)
    assert len(m["ttft_hit_s"].values) == 3 and m["ttft_miss_s"].values
    assert m["cache_frontend_bytes"].median == pytest.approx(payload, rel=0.01)
    assert m["cache_engine_bytes"].median == pytest.approx(payload, rel=0.01)


def test_a_hit_sent_as_vllm_does_carries_no_data_and_comes_back_whole(payload: int) -> None:
    workload = get_workload(NATIVE)
    cache.register(workload)
    front, engine = cache.FrontendCache("lru", 4 * payload), cache.EngineCache("lru", 4 * payload)
    known: dict[str, int] = {}
    for index in range(2):
        request = workload.request(index)
        message, prepared = front.prepare(request, cache.digests(request, known))
        resolved, done = engine.resolve(message)
        features = message.mm_features
        assert [f.data is None for f in features] == [index == 1] * 2 == [prepared.hits == 2] * 2
        assert all(cache.is_ref(f.mm_hash) for f in features) == (index == 1)
        assert [f.mm_hash for f in resolved.mm_features] == [None, None]
        conformance.assert_same(request, resolved)  # bit-exact, or it raises
        assert cache.verify_hits(request.request_id, done.hits) is None


def _wrong_hits(spec: str, mode: str):
    """The engine's cache fills a feature with an item whose tensor is not the one referenced."""
    lookup = cache.EngineCache._lookup

    def wrong(self, ref):
        held = cache.owned(lookup(self, ref))
        for elem in held.values():
            elem.data.add_(1)
        return held

    cache.EngineCache._lookup = wrong
    return measure("vllm", spec, Settings(**{**FAST.__dict__, "cache": mode}))


def test_a_wrong_item_filled_from_the_cache_fails_the_case_in_one_line(clean) -> None:
    with pytest.raises(CaseFailed) as failed:
        run_isolated(_wrong_hits, (NATIVE, "lru"), 120)
    message = str(failed.value)
    assert "the cache resolved" in message and "to a different tensor" in message and "\n" not in message
