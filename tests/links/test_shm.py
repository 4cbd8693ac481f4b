"""The shared-memory transport: the ring, the region's safety, ipc and memory over shm, integrity.

The end-to-end cases fork a real engine; ``shm_sandbox`` checks that no
segment this test made is left under /dev/shm and no process is left alive.
"""

from __future__ import annotations

import math
import os
import random
import stat
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from segments import left_named

from serbench.links import shm
from serbench.model.errors import EngineError, ShmError
from serbench.model.profiles import PROFILES
from serbench.scenarios.base import Case
from serbench.scenarios.ipc import Ipc, Settings, measure
from serbench.scenarios.memory import Memory
from serbench.serializers import get_serializer
from serbench.workloads import get_workload

IMAGES = "images-4"  # four 9.6 MB tensors


def settings(**changes) -> Settings:
    base = {"num_prompts": 3, "rates": (math.inf,), "max_concurrency": 1, "floor": 3, "step_s": 0.001}
    return Settings(**{**base, "transport": "shm", **changes})


@pytest.fixture
def shm_sandbox(ipc_sandbox: Path) -> Iterator[None]:
    before = set(shm.leftovers())
    yield
    assert not left_named(before), "shared-memory segment left behind"


# ---- the ring -------------------------------------------------------------------


def test_aligned_rounds_up_to_a_whole_cache_line() -> None:
    assert [shm.aligned(n) for n in (0, 1, shm.ALIGN - 1, shm.ALIGN, shm.ALIGN + 1)] == [
        0,
        shm.ALIGN,
        shm.ALIGN,
        shm.ALIGN,
        2 * shm.ALIGN,
    ]


def test_ring_never_hands_out_held_bytes_and_reclaims_in_order() -> None:
    ring, rng = shm.Ring(160 * shm.ALIGN), random.Random(0)
    held: dict[int, shm.Block] = {}
    for _ in range(5000):
        if held and (rng.random() < 0.5 or len(held) > 8):
            ring.release(held.pop(rng.choice(list(held))).id)  # out of order
            continue
        block = ring.allocate(rng.randrange(1, 3000))
        if block is None:
            assert held, "an empty ring refused a block that fits"
            continue
        assert block.offset % shm.ALIGN == 0 and block.offset + block.length <= ring.size
        for other in held.values():
            assert block.offset + block.length <= other.offset or other.offset + other.length <= block.offset
        held[block.id] = block
    for block_id in list(held):
        ring.release(block_id)
    assert not ring.blocks and ring.allocate(ring.size) is not None


def test_ring_waits_when_full_and_refuses_what_can_never_fit() -> None:
    ring = shm.Ring(1024)
    first = ring.allocate(600)
    assert ring.allocate(600) is None  # full: the caller waits for a release
    ring.release(first.id)
    assert ring.allocate(600) is not None
    with pytest.raises(ShmError, match="cannot fit"):
        ring.allocate(2000)
    with pytest.raises(ShmError, match="not held"):
        ring.release(first.id)


# ---- the region -------------------------------------------------------------------


def test_region_is_private_unguessable_and_read_only_for_the_engine(shm_sandbox: None) -> None:
    with shm.Region.create(1 << 20) as region:
        path = shm.SHM_DIR / region.name
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert shm.NAME.fullmatch(region.name) and region.name.startswith(f"{shm.PREFIX}{os.getpid()}-")
        placer = shm.Placer(region)
        payload = np.arange(100_000, dtype=np.uint8)
        placement = placer.place([b"header", payload])
        assert placement.inline == [b"header"] and len(placement.refs) == 1
        engine = shm.Region.attach(region.name, region.size)
        frames = shm.gather(engine.view, placement.refs, placement.inline)
        assert bytes(frames[0]) == b"header" and bytes(frames[1]) == payload.tobytes()
        with pytest.raises(TypeError):
            frames[1][0] = 1  # the engine cannot write into the frontend's memory
        del frames
        engine.close()
        with pytest.raises(ShmError, match="expected 1048577"):
            shm.Region.attach(region.name, region.size + 1)
    assert not path.exists()
    with pytest.raises(ShmError, match="not a serbench"):
        shm.Region.attach("../../etc/passwd", 1)


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_every_copy_thread_writes_its_slice_and_only_that(shm_sandbox: None, threads: int) -> None:
    # Frames above and below SPLIT_FROM, one of a length no thread count divides, one from bytes
    # (read-only): what the engine gathers is each frame's bytes, whatever the thread count.
    rng = np.random.default_rng(threads)
    big = rng.integers(0, 256, shm.SPLIT_FROM * 3 + 7, dtype=np.uint8)
    small = rng.integers(0, 256, shm.INLINE_BELOW + 1, dtype=np.uint8)
    also_big = rng.integers(0, 256, shm.SPLIT_FROM + 1, dtype=np.uint8).tobytes()
    frames = [b"header", big, small, also_big]
    with shm.Region.create(8 * shm.SPLIT_FROM) as region, shm.Placer(region, threads=threads) as placer:
        assert placer.threads == threads
        region.view[:] = b"\xff" * region.size
        placement = placer.place(frames)
        got = shm.gather(region.view, placement.refs, placement.inline)
        assert [bytes(f) for f in got] == [b"header", big.tobytes(), small.tobytes(), also_big]
        untouched = bytearray(region.view)
        for _, offset, length in placement.refs:
            untouched[offset : offset + length] = b"\xff" * length
        assert untouched == b"\xff" * region.size  # nothing written outside the frames' places


def test_gather_refuses_references_outside_the_region() -> None:
    view = memoryview(bytearray(1000))
    for refs in ([[1, 900, 200]], [[5, 0, 10]], [[0, -1, 10]], [["0", 0, 1]], "x"):
        with pytest.raises(ValueError):
            shm.gather(view, refs, [b"h"])


def test_segments_of_a_crashed_run_are_reclaimed_and_live_ones_kept(shm_sandbox: None) -> None:
    dead = shm.SHM_DIR / f"{shm.PREFIX}{2**22 + 12345}-{'0' * 32}"  # above pid_max's default
    live = shm.SHM_DIR / f"{shm.PREFIX}{os.getpid()}-{'1' * 32}"
    for path in (dead, live):
        path.touch(mode=0o600)
    try:
        assert shm.reclaim_orphans() == [dead.name]
        assert not dead.exists() and live.exists()
    finally:
        dead.unlink(missing_ok=True)
        live.unlink(missing_ok=True)


# ---- ipc over shm -------------------------------------------------------------------


@pytest.mark.usefixtures("shm_sandbox")
@pytest.mark.parametrize("backend", ["msgspec-frombuffer", "pickle"])
def test_ipc_over_shm_measures_against_both_references(backend: str) -> None:
    out = measure(backend, IMAGES, settings())
    metrics, info = out.metrics, out.info
    for name in ("payload_gb_per_s", "unix_gb_per_s", "memcpy_gb_per_s", "ttft_s"):
        assert len(metrics[name].values) == 3, name
    assert info.payload_vs_memcpy > 0 and info.payload_vs_unix > 0
    assert info.shm_region_bytes >= 2 * info.payload_bytes
    assert info.settings["transport"] == "shm"


@pytest.mark.usefixtures("shm_sandbox")
@pytest.mark.parametrize("workload", ["text-sonnet", "outputs-8"])
def test_a_workload_without_large_frames_runs_over_shm(workload: str) -> None:
    """Nothing to place, nothing to release: a text request sent over shm travels inline (it once
    failed the case with the engine releasing block -1)."""
    out = Ipc().run(
        Case("ipc", "msgspec-frombuffer", workload, "shm"),
        PROFILES["quick"].with_options(ipc_num_prompts=3, ipc_step_ms=1.0),
    )
    assert out.metrics["ttft_s" if workload == "text-sonnet" else "step_decode_s"].n >= 3


@pytest.mark.usefixtures("shm_sandbox")
def test_a_full_region_makes_the_frontend_wait_not_overwrite() -> None:
    # Room for one request at a time, three sent at once: each waits for the previous release.
    workload = get_workload(IMAGES)
    one = shm.placed_bytes(get_serializer("msgspec-frombuffer").encode(workload.request(0)))
    out = measure("msgspec-frombuffer", IMAGES, settings(max_concurrency=None, shm_mb=one / 1e6))
    assert out.info.output_tokens == 3 * workload.output_len


class EarlyReleasingPlacer(shm.Placer):
    """The regression shm invites: the frontend reuses a block before the engine released it."""

    def place(self, frames):
        placement = super().place(frames)
        if placement is not None and placement.block >= 0:
            self.ring.release(placement.block)
        return placement


@pytest.mark.usefixtures("shm_sandbox")
def test_reuse_of_the_region_before_release_fails_the_case(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shm, "Placer", EarlyReleasingPlacer)
    with pytest.raises(EngineError, match=r"decoded differs from the one sent.*bytes changed in flight"):
        measure("msgspec-frombuffer", IMAGES, settings(max_concurrency=None, step_s=0.01))


@pytest.mark.usefixtures("shm_sandbox")
def test_shm_is_refused_for_an_engine_on_another_host() -> None:
    with pytest.raises(EngineError, match="on this host"):
        measure("msgspec-frombuffer", IMAGES, settings(engine="tcp://192.0.2.1:5555"))


# ---- memory over shm -------------------------------------------------------------------


@pytest.mark.usefixtures("shm_sandbox")
def test_memory_over_shm_counts_the_shared_payload_once() -> None:
    profile = PROFILES["quick"].with_options(memory_repetitions=1)
    out = Memory().run(Case("memory", "msgspec-frombuffer", IMAGES, transport="shm"), profile)
    metrics = out.metrics
    # RSS shows the region in both processes; PSS splits it between them.
    assert metrics["copies"].median > 0.9 and metrics["copies_frontend"].median > 0.9
    assert 0.9 < metrics["copies_total"].median < 1.2
    assert metrics["pss_engine_bytes"].median < 0.7 * out.info.payload_bytes
