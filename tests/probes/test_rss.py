"""The peak-RSS measurement against allocations of known size."""

from __future__ import annotations

import os
import time

import numpy as np
import psutil
import pytest

from serbench.model.errors import MeasurementFailed
from serbench.probes import rss
from serbench.probes.rss import Side, measure

MiB = 1 << 20
# What a side's run costs beside the allocation it measures: pages of code it runs for the
# first time in its process (a fork does not carry the parent's file-backed page tables), the
# allocator's and interpreter's bookkeeping. Above a 48 MiB allocation: 1.1-1.2 MiB in a fresh
# process, 2.3 MiB after the rest of this suite, 4.7 MiB once in CI (the parent's history).
SLACK = 8 * MiB


def nothing() -> None:
    return None


def allocate(nbytes: int) -> np.ndarray:
    """``nbytes`` of fresh memory, every page written."""
    return np.ones(nbytes, np.uint8)


def measure_one(setup, run) -> tuple[int, int]:
    side = measure([Side("only", setup, run)], timeout_s=30).sides["only"]
    return side.baseline_bytes, side.peak_bytes


def test_a_touched_allocation_is_measured_within_tolerance():
    _, peak = measure_one(nothing, lambda _: {"sum": int(allocate(64 * MiB)[::4096].sum())})
    assert 64 * MiB - MiB <= peak <= 64 * MiB + SLACK


def test_an_allocation_freed_before_the_reading_still_counts():
    def run(_):
        del_me = allocate(48 * MiB)
        del del_me
        allocate(MiB)
        return {}

    _, peak = measure_one(nothing, run)
    assert 48 * MiB - MiB <= peak <= 48 * MiB + SLACK


def test_setup_memory_is_in_the_baseline_not_in_the_peak():
    kept = []
    base_small, _ = measure_one(nothing, lambda _: {})
    base_big, peak = measure_one(
        lambda: kept.append(allocate(96 * MiB)), lambda _: {"n": len(allocate(16 * MiB))}
    )
    assert 96 * MiB - MiB <= base_big - base_small <= 96 * MiB + SLACK
    assert 16 * MiB - MiB <= peak <= 16 * MiB + SLACK


def heap_blocks(nbytes: int) -> list[bytearray]:
    """``nbytes`` in 64 KiB blocks: below the mmap threshold, so on malloc's heap."""
    return [bytearray(64 * 1024) for _ in range(nbytes // (64 * 1024))]


def test_free_memory_the_parent_kept_resident_does_not_hide_a_sides_allocations():
    held = heap_blocks(64 * MiB)
    pin = bytearray(64 * 1024)  # allocated above them: free() alone cannot trim them away
    del held
    _, peak = measure_one(nothing, lambda _: {"n": len(heap_blocks(48 * MiB))})
    assert 48 * MiB - MiB <= peak <= 48 * MiB + SLACK
    del pin


def test_sides_are_measured_separately_and_return_their_results():
    m = measure(
        [
            Side("small", nothing, lambda _: {"pid": os.getpid()}),
            Side("big", nothing, lambda _: {"pid": os.getpid(), "n": len(allocate(32 * MiB))}),
        ],
        timeout_s=30,
    )
    assert m.sides["small"].peak_bytes < 2 * MiB
    assert 32 * MiB - MiB <= m.sides["big"].peak_bytes <= 32 * MiB + SLACK
    pids = {m.sides[name].result["pid"] for name in ("small", "big")}
    assert len(pids) == 2 and os.getpid() not in pids


def test_the_timeline_sees_memory_held_for_a_while():
    def run(_):
        held = allocate(64 * MiB)
        time.sleep(0.5)
        return {"n": len(held)}

    m = measure([Side("holder", nothing, run)], timeout_s=30)
    assert len(m.timeline["t_s"]) == len(m.timeline["holder"]) >= 2
    assert max(rss for rss in m.timeline["holder"] if rss is not None) >= 32 * MiB


def test_a_failing_side_fails_the_measurement_and_the_others_are_killed(tmp_path):
    pid_file = tmp_path / "pid"

    def setup_waiter():
        pid_file.write_text(str(os.getpid()))

    def fail(_):
        raise ValueError("broken decoder")

    with pytest.raises(MeasurementFailed, match="engine: ValueError: broken decoder"):
        measure([Side("waiter", setup_waiter, lambda _: time.sleep(60)), Side("engine", nothing, fail)], 30)
    assert not psutil.pid_exists(int(pid_file.read_text()))


def test_a_hanging_setup_times_out():
    with pytest.raises(MeasurementFailed, match="hang timed out"):
        measure([Side("hang", lambda: time.sleep(60), lambda _: {})], timeout_s=1)


SPLIT_ROLLUP = """55d0c0000000-7ffd00000000 ---p 00000000 00:00 0                          [rollup]
Rss:               10240 kB
Pss:                6000 kB
Pss_Anon:           3000 kB
Pss_File:           2500 kB
Pss_Shmem:           500 kB
Private_Clean:       100 kB
Private_Dirty:      2900 kB
"""


def test_pss_counts_anonymous_and_shared_memory_not_library_files() -> None:
    """Libraries' pages (Pss_File) are shared with whatever else maps them: left out where the
    kernel splits PSS (5.10+), the whole PSS where it does not; USS is the private pages."""
    assert rss.from_rollup(SPLIT_ROLLUP) == ((3000 + 500) * 1024, (100 + 2900) * 1024)
    unsplit = "\n".join(line for line in SPLIT_ROLLUP.splitlines() if not line.startswith("Pss_"))
    assert rss.from_rollup(unsplit) == (6000 * 1024, 3000 * 1024)
    pss, uss = rss.proportional()
    assert uss > 0 and 0 < pss <= rss.status_bytes("VmRSS")
