"""Peak RSS of the measured part of a process, from the kernel; a timeline beside it.

Each *side* (e.g. a frontend and an engine) runs in a fresh process forked from the caller.
After its setup (imports are inherited; workload construction, sockets) it resets its
high-water mark (``echo 5 > /proc/self/clear_refs`` sets ``VmHWM`` to the current RSS, the
side's baseline); after the measured part, ``VmHWM`` minus the baseline is what that part cost
at its peak. The kernel raises the mark before it unmaps anything, so a temporary freed before
the reading still counts — which sampling alone would miss.

Before its setup each side has glibc map every large block afresh (``heap.fresh_memory``): a
caller whose history had raised glibc's mmap threshold had the side grow large buffers in its
heap, where an outgrown copy stays resident until the peak is read. Settings cannot undo the
heap itself, so ``serbench run`` forks every case from a zygote with no such past
(``serbench.runtime.isolation``). docs/memory.md says more.

RSS counts a shared page in every process that maps it; ``proportional`` reads the kernel's PSS
and USS instead (``smaps_rollup``), so summed over the sides shared memory counts once. Its PSS
is of anonymous and shared memory only, where payloads live: shared libraries' share moves as
other processes come and go. Each side's PSS baseline is read when every side exists. While the
sides run, the caller samples their RSS with psutil from outside, for plots only.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

import psutil

from serbench.model.errors import MeasurementFailed
from serbench.probes.heap import fresh_memory, release_free_memory
from serbench.runtime.isolation import kill_tree
from serbench.runtime.processes import FORK

SAMPLE_INTERVAL_S = 0.005
MAX_TIMELINE_POINTS = 400
EXIT_GRACE_S = 1.0  # for a released side to exit by itself before it is killed


def status_bytes(field: str, pid: int | str = "self") -> int:
    """A ``kB`` field of ``/proc/<pid>/status`` (``VmRSS``, ``VmHWM``) in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name == field:
            return int(value.split()[0]) * 1024
    raise KeyError(f"{field} not in /proc/{pid}/status")


def proportional(pid: int | None = None) -> tuple[int, int]:
    """(PSS of anonymous and shared memory, USS) of a process (this one by default), in bytes,
    from ``smaps_rollup``; the whole PSS on a kernel that does not split it (before Linux 5.10)."""
    return from_rollup(Path(f"/proc/{pid or 'self'}/smaps_rollup").read_text())


def from_rollup(text: str) -> tuple[int, int]:
    """``proportional``'s (PSS, USS) in bytes from the text of a ``smaps_rollup`` file."""
    rollup = text.splitlines()[1:]  # the first line names the address range
    kb = {name: int(value.split()[0]) for name, value in (line.split(":", 1) for line in rollup)}
    pss = kb["Pss_Anon"] + kb["Pss_Shmem"] if "Pss_Anon" in kb else kb["Pss"]
    return pss * 1024, (kb["Private_Clean"] + kb["Private_Dirty"]) * 1024


def live_memory() -> tuple[int, int]:
    """(PSS, USS) of this process as live memory: free heap memory handed back first.

    A large block freed during the measured part stays resident when glibc served it from a
    free block the side inherited, and is unmapped when glibc mapped it afresh; which one
    happened follows the parent's heap, not the code measured: pickle's frontend with an lru
    cache held one image more or less run by run by that alone. Trimmed first, every run reads
    what is still in use. (A side's baseline needs no trim: ``_side_main`` hands back what setup
    freed before any side reads one.)"""
    release_free_memory()
    return proportional()


def reset_peak() -> int:
    """Reset this process's RSS high-water mark to its current RSS; return that baseline."""
    Path("/proc/self/clear_refs").write_text("5")
    return status_bytes("VmHWM")


def peak_above(baseline: int) -> int:
    """Bytes by which this process's RSS high-water mark rose above ``baseline``."""
    return status_bytes("VmHWM") - baseline


@dataclass(frozen=True)
class Side:
    """One process of a measurement.

    ``setup()`` runs before the baseline is taken, its result goes to
    ``run(state)``, which is measured and returns a small picklable dict.
    """

    name: str
    setup: Callable[[], Any]
    run: Callable[[Any], dict[str, Any]]


@dataclass(frozen=True)
class SideResult:
    baseline_bytes: int
    peak_bytes: int  # high-water mark above the baseline during run()
    result: dict[str, Any]
    baseline_pss_bytes: int = 0  # PSS and USS once every side existed, just before run()
    baseline_uss_bytes: int = 0


@dataclass(frozen=True)
class Reading:
    """What ``measure`` read of its sides: each side's baseline and peak, and the RSS timeline."""

    sides: dict[str, SideResult]
    timeline: dict[str, list[float | None]]  # "t_s"; per side, RSS above baseline (None: unreadable)
    started: float  # time.monotonic() when the sides were released; t_s counts from it


def _side_main(conn: Connection, side: Side) -> None:
    """The forked process of one side: setup, baseline, wait for the start, run, report.

    After reporting it stays alive until the caller ends it, so that nothing
    it sent (a last ZeroMQ message) dies with it before the others are done.
    """
    try:
        fresh_memory()
        state = side.setup()
        # What setup freed, handed back before the baseline (and before any side reads one): a
        # trim after the start would drop pages another side still shares, moving its reading.
        release_free_memory()
        baseline = reset_peak()
        conn.send(("ready", baseline))
        conn.recv()  # start: every side has its baseline
        shared = proportional()
        result = side.run(state)
        conn.send(("done", peak_above(baseline), result, *shared))
    except BaseException as exc:
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
    wait([conn])  # until the caller says exit (or kills this process)


def _receive(conn: Connection, name: str, expected: str) -> tuple:
    try:
        message = conn.recv()
    except EOFError:
        raise MeasurementFailed(f"{name} died before it reported {expected!r}") from None
    if message[0] == "error":
        raise MeasurementFailed(f"{name}: {message[1]}")
    if message[0] != expected:
        raise MeasurementFailed(f"{name} sent {message[0]!r}, expected {expected!r}")
    return message[1:]


def _rss(proc: psutil.Process) -> int | None:
    try:
        return proc.memory_info().rss
    except psutil.Error:
        return None


def _thin(timeline: dict[str, list[float | None]]) -> dict[str, list[float | None]]:
    """At most MAX_TIMELINE_POINTS evenly spaced samples, the last one kept."""
    count = len(timeline["t_s"])
    if count <= MAX_TIMELINE_POINTS:
        return timeline
    picks = sorted({round(i * (count - 1) / (MAX_TIMELINE_POINTS - 1)) for i in range(MAX_TIMELINE_POINTS)})
    return {key: [values[i] for i in picks] for key, values in timeline.items()}


class _Run:
    """The started sides of one measurement: their pipes, processes and baselines."""

    def __init__(self, deadline: float) -> None:
        self.conns: dict[str, Connection] = {}
        self.procs: dict[str, Any] = {}
        self.baselines: dict[str, int] = {}
        self.deadline = deadline

    def start(self, side: Side) -> None:
        """Fork one side and wait until its setup is done and its baseline taken."""
        receiver, sender = FORK.Pipe()
        proc = FORK.Process(target=_side_main, args=(sender, side), daemon=False)
        proc.start()
        sender.close()
        self.conns[side.name], self.procs[side.name] = receiver, proc
        self._wait_for(side.name)
        (self.baselines[side.name],) = _receive(receiver, side.name, "ready")

    def _wait_for(self, name: str) -> None:
        if not wait([self.conns[name]], max(0.0, self.deadline - time.monotonic())):
            raise MeasurementFailed(f"{name} timed out")

    def release(self) -> Reading:
        """Release every side at once; sample RSS until all have reported."""
        watched = {name: psutil.Process(proc.pid) for name, proc in self.procs.items()}
        timeline: dict[str, list[float | None]] = {"t_s": [], **{name: [] for name in self.procs}}
        start = time.monotonic()
        for conn in self.conns.values():
            conn.send("start")
        results: dict[str, SideResult] = {}
        pending = dict(self.conns)
        while pending:
            if time.monotonic() > self.deadline:
                raise MeasurementFailed(f"timed out waiting for {', '.join(pending)}")
            self._sample(watched, timeline, start)
            for conn in wait(list(pending.values()), SAMPLE_INTERVAL_S):
                name = next(n for n, c in pending.items() if c is conn)
                peak, result, pss, uss = _receive(conn, name, "done")
                results[name] = SideResult(self.baselines[name], peak, result, pss, uss)
                del pending[name]
        return Reading(results, _thin(timeline), start)

    def _sample(
        self, watched: dict[str, psutil.Process], timeline: dict[str, list[float | None]], start: float
    ) -> None:
        timeline["t_s"].append(round(time.monotonic() - start, 4))
        for name, proc in watched.items():
            rss = _rss(proc)
            timeline[name].append(None if rss is None else rss - self.baselines[name])

    def close(self) -> None:
        """End every side (each exits when asked); kill what is still running."""
        for conn in self.conns.values():
            with contextlib.suppress(OSError):
                conn.send("exit")
            conn.close()
        for proc in self.procs.values():
            proc.join(EXIT_GRACE_S)
            kill_tree(proc.pid)
            proc.join(5)


def measure(sides: list[Side], timeout_s: float) -> Reading:
    """Run ``sides`` in fresh forked processes, together; their peaks above baseline.

    Sides start in order, each after the previous one's setup is done, from a
    heap with no free memory resident, and run their measured part together
    once all have their baseline.
    Raises MeasurementFailed if any side raises, dies or runs past ``timeout_s``;
    every side's process tree is killed either way.
    """
    release_free_memory()
    run = _Run(time.monotonic() + timeout_s)
    try:
        for side in sides:  # one at a time: a later side's setup may need an earlier's (bind, then connect)
            run.start(side)
        return run.release()
    finally:
        run.close()
