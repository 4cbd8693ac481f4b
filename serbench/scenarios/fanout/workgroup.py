"""The fan-out's processes: the core forks N workers, each receives, decodes, checks and acks every step.

A worker (``_worker_main``) holds one receiving end of a ``serbench.scenarios.fanout.broadcast``
transport; what it does with each step is the scenario's ``Work``. The core's
view of its workers is a ``Group``: their processes and pipes, the sending end
and the ack channel, started by ``start`` and ended by ``finish`` whatever
happens. ``serbench.scenarios.fanout.remote`` forks its workers with the same
``_worker_main`` on another host.

The core is the calling process. It forks its N workers before it builds any message (so no worker
inherits the payload), each worker runs on the CPU ``broadcast.placement`` gave it (the core on the
first), sets glibc's heap to map large blocks afresh, opens its end, warms up its decode on a
miniature message, resets its RSS high-water mark and says ready. Workers die with the core
(``PR_SET_PDEATHSIG``) and leave no shared-memory name behind: the core unlinks every name as soon
as all workers mapped it; a crash before that leaves names whose creator is gone, which
``shm.reclaim_orphans`` removes (the next case does).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any

import msgspec
import zmq

from serbench.model.errors import BroadcastError
from serbench.probes.heap import fresh_memory, release_free_memory
from serbench.probes.rss import live_memory, peak_above, proportional, reset_peak
from serbench.runtime import lazy
from serbench.runtime.isolation import end_trees
from serbench.runtime.processes import FORK, die_with_parent, exit_reason
from serbench.scenarios.fanout.broadcast import (
    RECEIVERS,
    SENDERS,
    Ack,
    Acks,
    Resolution,
    Route,
    Sender,
    clock,
    pin,
)

torch = lazy.torch(__name__)  # imported on first use (serbench.runtime.lazy)

READY_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Work:
    """What a worker does with each step: ``open_decoder()`` (in the worker, after fork) gives a
    function frames → decoded step; ``check(decoded, checksum)`` raises ValueError when the
    step is not what was sent; ``warm()`` runs the decode path once before the baseline;
    ``hook``, for tests only, sees each decoded step (``(worker, step, decoded)``);
    ``resolve``, with a cache, swaps a decoded step's references for the tensors they name (part of
    receiving it: before the stamp) and says what the cache did; an error it raises ends the
    worker, and the case, in one line."""

    open_decoder: Callable[[], Callable[[list[Any]], Any]]
    check: Callable[[Any, int], None]
    warm: Callable[[Callable[[list[Any]], Any]], None]
    hold: int = 0  # the step at which a worker reads its PSS and USS while it holds it
    hook: Callable[[int, int, Any], None] | None = None
    resolve: Callable[[Any], tuple[Any, Resolution]] | None = None


def _worker_main(conn: Connection, route: Route, index: int, work: Work, parent: int) -> None:
    """One worker: open its end, warm up, baseline, then receive → decode (→ resolve) → check → ack
    until stop."""
    die_with_parent(parent, signal.SIGKILL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    torch.set_num_threads(1)
    if route.cpus:
        pin(route.cpus[index + 1])
    try:
        fresh_memory()
        ctx = zmq.Context()
        decode = work.open_decoder()
        receiver = RECEIVERS[route.kind](route, ctx, index)
        ack = ctx.socket(zmq.PUSH)
        ack.setsockopt(zmq.LINGER, 1000)
        ack.connect(route.acks)
        work.warm(decode)
        release_free_memory()  # before any worker reads a baseline (rss._side_main says why)
        baseline = reset_peak()
        conn.send(("ready", baseline))
        conn.recv()  # start: every worker exists, so PSS shares are final
        base_pss, base_uss = proportional()
        held = (0, 0)
        while True:
            envelope, frames = receiver.receive()
            if envelope.kind == "stop":
                break
            if envelope.kind == "hello":
                ack.send(msgspec.msgpack.encode(Ack(index, envelope.step, clock())))
                receiver.release()
                continue
            decoded = decode(frames)
            resolution = None
            if work.resolve is not None:
                decoded, resolution = work.resolve(decoded)
            held_at = clock()
            if route.remote:  # the core stamps this word's arrival: its clock is not this host's
                ack.send(msgspec.msgpack.encode(Ack(index, envelope.step, held_at, notice=True)))
            error = ""
            try:
                if work.hook is not None:
                    work.hook(index, envelope.step, decoded)
                work.check(decoded, envelope.checksum)
            except ValueError as exc:
                error = str(exc)[:300]
            if envelope.step == work.hold:  # still holding it: what receiving it cost in memory
                pss, uss = live_memory()
                held = (pss - base_pss, uss - base_uss)
            ack.send(msgspec.msgpack.encode(Ack(index, envelope.step, held_at, error, resolution)))
            del decoded, frames
            receiver.release()
        conn.send(("done", peak_above(baseline), held))
        receiver.close()
        ack.close()
    except BaseException as exc:
        with contextlib.suppress(Exception):
            conn.send(("error", f"{type(exc).__name__}: {exc}"[:300]))
    with contextlib.suppress(Exception):
        wait([conn], 5)  # until the core has read the report, or has gone
    os._exit(0)


@dataclass
class WorkerReport:
    baseline_bytes: int
    peak_bytes: int = 0  # RSS high-water mark above the baseline, over the whole run
    pss_bytes: int = 0  # above its baseline, while holding the ``hold`` step
    uss_bytes: int = 0
    finished: bool = False
    host: str = ""  # a remote worker: its host's name (a forked one: none)


def fork_worker(route: Route, index: int, work: Work) -> tuple[Any, Connection]:
    """Worker ``index`` forked from this process (``_worker_main``) and this end of its pipe."""
    receiver, sender = FORK.Pipe()
    proc = FORK.Process(target=_worker_main, args=(sender, route, index, work, os.getpid()), daemon=False)
    proc.start()
    sender.close()
    return proc, receiver


@dataclass
class Group:
    """The core's view of its workers: their processes and pipes, reports, the transport ends."""

    route: Route
    procs: list[Any] = field(default_factory=list)
    conns: list[Connection] = field(default_factory=list)
    reports: list[WorkerReport] = field(default_factory=list)
    sender: Sender | None = None
    acks: Acks | None = None

    def alive(self) -> None:
        """BroadcastError naming the first worker that died or reported an error."""
        for index, (proc, conn, report) in enumerate(zip(self.procs, self.conns, self.reports, strict=False)):
            if report.finished:
                continue
            if conn.poll(0):
                with contextlib.suppress(EOFError, OSError):
                    file_message(index, report, conn.recv())
                if report.finished:
                    continue
            if not proc.is_alive():
                proc.join(0.1)
                raise BroadcastError(f"worker {index} died ({exit_reason(proc.exitcode)})")

    def release(self) -> None:
        """Every worker may take its PSS baseline (every worker exists) and start."""
        for conn in self.conns:
            conn.send("start")

    def end(self) -> None:
        """End every worker process, finished or not."""
        for conn in self.conns:
            with contextlib.suppress(OSError):
                conn.close()
        end_trees([p.pid for p in self.procs if p.pid is not None], grace_s=1.0)
        for proc in self.procs:
            proc.join(1)


def file_message(index: int, report: WorkerReport, message: Sequence[Any]) -> None:
    """A worker's message on its pipe: its error raises BroadcastError, its report is filed."""
    if message[0] == "error":
        raise BroadcastError(f"worker {index}: {message[1]}")
    if message[0] == "done":
        report.peak_bytes, (report.pss_bytes, report.uss_bytes) = message[1], message[2]
        report.finished = True


def start(route: Route, work: Work) -> Group:
    """Fork the workers and open the core's end; return once every worker is ready (baseline
    taken). The caller must ``finish`` the group, whatever happens; a start that fails
    finishes what it began itself (a worker that dies during setup leaves no segment)."""
    return set_up(Group(route), lambda group: _forked(group, work))


def set_up(group: Group, setup: Callable[[Group], Group]) -> Group:
    """``setup(group)``; on any failure ``group`` finished (every process it started ended) first."""
    try:
        return setup(group)
    except BaseException:
        finish(group, clean=False)
        raise


def _forked(group: Group, work: Work) -> Group:
    route = group.route
    if route.cpus:  # before the context: its I/O thread runs where the core does
        pin(route.cpus[0])
    ctx = zmq.Context()
    group.acks = Acks(route, ctx)
    group.sender = SENDERS[route.kind](route, ctx)
    for index in range(route.workers):
        proc, conn = fork_worker(route, index, work)
        group.procs.append(proc)
        group.conns.append(conn)
    group.sender.open()
    deadline = time.monotonic() + READY_TIMEOUT_S
    for index, conn in enumerate(group.conns):
        if not wait([conn, group.procs[index].sentinel], max(0.0, deadline - time.monotonic())):
            raise BroadcastError(f"worker {index} not ready within {READY_TIMEOUT_S:g} s")
        try:
            message = conn.recv()
        except EOFError:
            group.procs[index].join(1)
            raise BroadcastError(
                f"worker {index} died during setup ({exit_reason(group.procs[index].exitcode)})"
            ) from None
        if message[0] != "ready":
            raise BroadcastError(f"worker {index}: {message[1]}")
        group.reports.append(WorkerReport(message[1]))
    group.sender.attached()
    return group


def release(group: Group) -> None:
    """Release every worker at once (each reads its PSS baseline), then the handshake."""
    group.release()
    group.sender.handshake(group.acks, group.alive)


def finish(group: Group, clean: bool) -> list[WorkerReport]:
    """Stop the workers (a ``stop`` step when ``clean``), collect their reports, end every process
    and close the transport; the reports when every worker finished cleanly."""
    try:
        if clean and group.sender is not None:
            group.sender.stop(group.alive)
            deadline = time.monotonic() + group.route.timeout_s
            while not all(report.finished for report in group.reports):
                if time.monotonic() > deadline:
                    raise BroadcastError("worker(s) did not report after stop")
                group.alive()
                time.sleep(0.005)
    finally:
        group.end()
        if group.sender is not None:
            group.sender.close()
        if group.acks is not None:
            group.acks.close()
    return group.reports
