"""ipc: a frontend and an engine process over real ZeroMQ, under load (DESIGN §4).

The case's own process is the frontend: it forks an engine (``serbench.engine``)
bound on a private ipc:// folder (or loopback tcp://), or drives one started
with ``serbench engine`` (``--engine tcp://HOST:PORT``). In one run it measures

1. the transport floor: round trips of the empty message through the same
   sockets and the engine's receive thread;
2. the load: the workload's requests with Poisson/gamma arrivals at a rate
   (or all at once), optionally capped in concurrency, while the engine
   steps and streams one token per running request per step. TTFT runs from
   just before a request's encode to the decode of its first output. For
   payload workloads the engine also acknowledges each request as soon as it
   is decoded: payload bytes / (ack - created) is the payload GB/s;
3. for payload workloads, the same payload bytes streamed over a plain unix
   socket between two processes: the reference for that GB/s.

Payload workloads default to one request at a time, so their TTFT and GB/s
are those of one request, not of a queue.

Integrity is not sampled, it is total: the engine checks every request
against a checksum computed outside the timed path, and the frontend checks
every output token (value, position, finish) — a corrupted, lost or
duplicated message fails the case with a message saying which.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import multiprocessing as mp
import os
import statistics
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import zmq

from serbench import transport
from serbench.engine import Control, control, parse_control, request_checksum, run_local
from serbench.isolation import kill_tree
from serbench.profiles import Profile
from serbench.scenarios.base import Case, Column, Scenario, positive_int
from serbench.stats import summarize
from serializers import Serializer, get_serializer
from workloads import Workload, get_workload, output_token
from workloads.messages import EngineCoreOutputs, EngineCoreRequest
from workloads.tree import array_bytes, is_array, iter_leaves

clock = time.perf_counter
Sender = Callable[[zmq.Socket, list], Any]

STARTUP_TIMEOUT_S = 10.0  # engine bound and answering `start`
STALL_TIMEOUT_S = 10.0  # no output at all while requests are unfinished: lost
POOL_BYTES = 1 << 29  # distinct payload requests kept in memory; beyond, they repeat

# Per profile and workload kind: what a run measures unless options say otherwise.
DEFAULTS: dict[tuple[str, str], dict[str, Any]] = {
    ("quick", "text"): {"num_prompts": 10, "rate": 40.0, "max_concurrency": None, "floor": 50},
    ("full", "text"): {"num_prompts": 1000, "rate": 40.0, "max_concurrency": None, "floor": 200},
    ("quick", "payload"): {"num_prompts": 1, "rate": math.inf, "max_concurrency": 1, "floor": 50},
    ("full", "payload"): {"num_prompts": 10, "rate": math.inf, "max_concurrency": 1, "floor": 200},
}


class EngineError(RuntimeError):
    """The engine reported an error, refused the session, died or went silent."""


class IntegrityError(RuntimeError):
    """An output was wrong, duplicated, unexpected or never came."""


@dataclass(frozen=True)
class Settings:
    """How one ipc case runs; ``engine`` set means a separately started engine."""

    num_prompts: int
    rate: float
    max_concurrency: int | None
    floor: int
    burstiness: float = 1.0
    step_s: float = 0.005
    transport: str = "ipc"
    engine: str | None = None
    seed: int = 0


def settings_for(profile: Profile, workload: Workload) -> Settings:
    """The profile's defaults for this kind of workload, overridden by scenario options."""
    kind = "payload" if workload.payload_bytes() else "text"
    values = dict(DEFAULTS[(profile.name if profile.name == "full" else "quick", kind)])
    opts = profile.options
    for key in ("num_prompts", "rate", "max_concurrency", "burstiness", "transport", "engine"):
        if opts.get(f"ipc_{key}") is not None:
            values[key] = opts[f"ipc_{key}"]
    if opts.get("ipc_step_ms") is not None:
        values["step_s"] = opts["ipc_step_ms"] / 1e3
    return Settings(**values)


def arrival_offsets(count: int, rate: float, burstiness: float, seed: int) -> list[float]:
    """Seconds from the start at which each request is due, as vLLM's serving benchmark draws them.

    Gaps are gamma-distributed with mean ``1/rate`` and shape ``burstiness``
    (1 = Poisson arrivals; lower = burstier); ``rate=inf`` sends all at once.
    """
    if math.isinf(rate):
        return [0.0] * count
    gaps = np.random.default_rng(seed).gamma(burstiness, 1.0 / (rate * burstiness), count)
    return [0.0, *np.cumsum(gaps[:-1]).tolist()]


class RequestPool:
    """The run's requests and their checksums, built before anything is timed.

    Payload requests repeat once ``POOL_BYTES`` of distinct ones exist (each
    repeat under its own request id), so memory stays bounded for long runs.
    """

    def __init__(self, workload: Workload, count: int) -> None:
        per_request = max(1, workload.payload_bytes())
        distinct = max(1, min(count, POOL_BYTES // per_request))
        self.requests = list(workload.requests(distinct))
        self.checksums = [request_checksum(r) for r in self.requests]

    def get(self, index: int) -> tuple[EngineCoreRequest, int]:
        """Request ``index`` (a repeat gets an id of its own) and its checksum."""
        slot = index % len(self.requests)
        base = self.requests[slot]
        if index == slot:
            return base, self.checksums[slot]
        rid = f"{base.request_id}#{index}"
        return msgspec.structs.replace(base, request_id=rid), self.checksums[slot]


class EngineLink:
    """The frontend's end of one session with an engine."""

    def __init__(self, push: zmq.Socket, pull: zmq.Socket, where: str, proc: mp.Process | None) -> None:
        self.push = push
        self.pull = pull
        self.where = where
        self.proc = proc
        self.session = uuid.uuid4().hex
        self.poller = zmq.Poller()
        self.poller.register(pull, zmq.POLLIN)
        if proc is not None:
            self.poller.register(proc.sentinel, zmq.POLLIN)

    def send(
        self, kind: str, frames: Sequence[Any] = (), sender: Sender = transport.send, **data: Any
    ) -> None:
        sender(self.push, [control(kind, self.session, **data), *frames])

    def recv(self, timeout_s: float) -> tuple[Control | None, list] | None:
        """The next message of this session (None header = the empty message), or None on timeout.

        Raises EngineError for an ``error`` from the engine or its death.
        """
        deadline = clock() + timeout_s
        while True:
            remaining = deadline - clock()
            ready = dict(self.poller.poll(max(0, int(remaining * 1000))))
            if self.pull in ready:
                frames = self.pull.recv_multipart(copy=False)
                if transport.is_ping(frames):
                    return None, frames
                ctrl = parse_control(frames[0])
                if ctrl.session != self.session:
                    continue  # left over from an earlier session on a shared engine
                if ctrl.kind == "error":
                    raise EngineError(str(ctrl.data.get("message")))
                return ctrl, frames[1:]
            if self.proc is not None and not self.proc.is_alive():
                self.proc.join(1)
                raise EngineError(f"engine process died ({_exit_reason(self.proc.exitcode)})")
            if remaining <= 0:
                return None

    def expect(self, kind: str, timeout_s: float) -> Control:
        """Wait for a message of ``kind``; anything else is an error."""
        got = self.recv(timeout_s)
        if got is None:
            raise EngineError(f"no {kind!r} from the engine at {self.where} within {timeout_s:g} s")
        ctrl, _ = got
        if ctrl is None or ctrl.kind != kind:
            raise IntegrityError(
                f"expected {kind!r} from the engine, got {ctrl.kind if ctrl else 'the empty message'!r}"
            )
        return ctrl


def _exit_reason(code: int | None) -> str:
    if code is not None and code < 0:
        return f"killed by signal {-code}"
    return f"exit code {code}"


@contextlib.contextmanager
def _local_engine(kind: str) -> Iterator[tuple[transport.Addresses, mp.Process, Path | None]]:
    """Fork an engine bound on a private ipc folder or loopback tcp; kill it and clean up after."""
    folder = transport.private_ipc_dir() if kind == "ipc" else None
    bind = (
        transport.ipc_addresses(folder)
        if folder
        else transport.Addresses("tcp://127.0.0.1:*", "tcp://127.0.0.1:*")
    )
    context = mp.get_context("fork")
    reader, writer = context.Pipe(duplex=False)
    proc = context.Process(target=run_local, args=(bind, folder, writer, os.getpid()), name="serbench-engine")
    proc.start()
    writer.close()
    try:
        if not reader.poll(STARTUP_TIMEOUT_S):
            raise EngineError(f"engine did not start within {STARTUP_TIMEOUT_S:g} s")
        try:
            status, payload = reader.recv()
        except EOFError:
            raise EngineError(f"engine process died at start ({_exit_reason(proc.exitcode)})") from None
        if status != "ok":
            raise EngineError(payload)
        yield payload, proc, folder
    finally:
        reader.close()
        # Even after `done` it is killed, not awaited: it has nothing left to send,
        # and its own exit (freeing what it decoded) would cost the case time.
        kill_tree(proc.pid)
        proc.join(1)
        if folder:
            transport.remove_ipc_dir(folder)


@contextlib.contextmanager
def open_link(cfg: Settings, backend: str) -> Iterator[tuple[EngineLink, bool]]:
    """A started session with a local or remote engine; yields (link, engine is local)."""
    with contextlib.ExitStack() as stack:
        proc, folder = None, None
        if cfg.engine:
            addrs = transport.tcp_addresses(cfg.engine)
        else:
            addrs, proc, folder = stack.enter_context(_local_engine(cfg.transport))
        ctx = zmq.Context()
        stack.callback(ctx.term)
        push, pull = transport.connect_frontend(ctx, addrs)
        stack.callback(pull.close)
        stack.callback(push.close)
        link = EngineLink(push, pull, addrs.requests, proc)
        link.send("start", backend=backend, step_s=cfg.step_s)
        link.expect("ready", STARTUP_TIMEOUT_S)
        if folder:
            transport.remove_ipc_dir(folder)  # both sides connected: the socket files are not needed
        yield link, proc is not None
        link.send("end")
        done = link.expect("done", STALL_TIMEOUT_S)
        if done.data.get("unfinished"):
            raise IntegrityError(f"engine ended with {done.data['unfinished']} request(s) still running")


@dataclass
class Tracked:
    """What the frontend knows of one request in flight."""

    created: float
    max_tokens: int
    times: list[float] = field(default_factory=list)
    acked: float | None = None

    @property
    def finished(self) -> bool:
        return len(self.times) >= self.max_tokens


def account(outputs: EngineCoreOutputs, tracked: dict[str, Tracked], at: float) -> int:
    """Check one outputs message token by token; returns how many requests it finished."""
    finished = 0
    for out in outputs.outputs:
        state = tracked.get(out.request_id)
        if state is None:
            raise IntegrityError(f"output for a request never sent: {out.request_id!r}")
        if state.finished:
            raise IntegrityError(f"output after the end of request {out.request_id!r} (duplicated message?)")
        position = len(state.times)
        expected = output_token(out.request_id, position)
        if out.new_token_ids != [expected]:
            raise IntegrityError(
                f"request {out.request_id!r} token {position}: got {out.new_token_ids}, expected [{expected}]"
            )
        state.times.append(at)
        last = state.finished
        if (out.finish_reason is not None) != last:
            raise IntegrityError(
                f"request {out.request_id!r}: finish_reason {out.finish_reason!r} at token {position}"
            )
        finished += last
    return finished


def acknowledge(ctrl: Control, tracked: dict[str, Tracked], at: float) -> None:
    """Note when the engine had decoded a request; once per request."""
    state = tracked.get(ctrl.data.get("request_id"))
    if state is None or state.acked is not None:
        raise IntegrityError(f"unexpected ack for {ctrl.data.get('request_id')!r}")
    state.acked = at


def run_load(
    link: EngineLink,
    serializer: Serializer,
    pool: RequestPool,
    cfg: Settings,
    sender: Sender,
    ack: bool,
    between: Callable[[], Any] | None = None,
) -> tuple[dict[str, Tracked], float]:
    """Send every request on schedule, take every output; (per-request record, duration).

    With ``ack`` the engine acknowledges each request once decoded;
    ``between`` runs before each request sent while none is in flight (an
    interleaved reference measurement that disturbs no request).
    """
    offsets = arrival_offsets(cfg.num_prompts, cfg.rate, cfg.burstiness, cfg.seed)
    waiting = deque(range(cfg.num_prompts))
    tracked: dict[str, Tracked] = {}
    active = 0
    start = last_progress = clock()
    while waiting or active:
        can_send = cfg.max_concurrency is None or active < cfg.max_concurrency
        while waiting and can_send and offsets[waiting[0]] <= clock() - start:
            if between is not None and not active:
                between()
            request, checksum = pool.get(waiting.popleft())
            created = clock()
            link.send("request", serializer.encode(request), sender, checksum=checksum, ack=ack)
            tracked[request.request_id] = Tracked(created, request.sampling_params.max_tokens)
            active += 1
            can_send = cfg.max_concurrency is None or active < cfg.max_concurrency
        due = offsets[waiting[0]] - (clock() - start) if waiting and can_send else STALL_TIMEOUT_S
        got = link.recv(min(max(due, 0.0), STALL_TIMEOUT_S))
        now = clock()
        if got is None:
            if active and now - last_progress > STALL_TIMEOUT_S:
                raise IntegrityError(_lost(tracked))
            continue
        ctrl, frames = got
        if ctrl is not None and ctrl.kind == "ack":
            acknowledge(ctrl, tracked, now)
            continue
        if ctrl is None or ctrl.kind != "outputs":
            raise IntegrityError(f"unexpected {ctrl.kind if ctrl else 'empty'!r} message during the load")
        try:
            outputs = serializer.decode(frames, EngineCoreOutputs)
        except Exception as exc:
            raise IntegrityError(
                f"frontend could not decode an outputs message: {type(exc).__name__}: {exc}"
            ) from exc
        active -= account(outputs, tracked, clock())
        last_progress = now
    return tracked, clock() - start


def _lost(tracked: dict[str, Tracked]) -> str:
    unfinished = {rid: t for rid, t in tracked.items() if not t.finished}
    missing = sum(t.max_tokens - len(t.times) for t in unfinished.values())
    first = ", ".join(list(unfinished)[:3])
    return (
        f"no output for {STALL_TIMEOUT_S:g} s with {len(unfinished)} request(s) unfinished "
        f"({missing} tokens missing; e.g. {first}): messages lost"
    )


def serving_summary(values: Sequence[float]) -> dict[str, float]:
    """Mean, median and p99 in milliseconds, as the serving benchmark prints them."""
    return {
        "mean_ms": statistics.fmean(values) * 1e3,
        "median_ms": statistics.median(values) * 1e3,
        "p99_ms": float(np.percentile(values, 99)) * 1e3,
    }


def load_metrics(tracked: dict[str, Tracked], duration: float, payload: int) -> tuple[dict, dict]:
    """TTFT, ITL, E2E and throughput metrics (and their serving summary) from a finished load."""
    ttft = [t.times[0] - t.created for t in tracked.values()]
    e2e = [t.times[-1] - t.created for t in tracked.values()]
    itl = [b - a for t in tracked.values() for a, b in zip(t.times, t.times[1:], strict=False)] or [0.0]
    tokens = sum(len(t.times) for t in tracked.values())
    metrics = {
        "ttft_s": summarize(ttft, "s"),
        "ttft_p99_s": summarize([np.percentile(ttft, 99)], "s"),
        "itl_s": summarize(itl, "s"),
        "e2e_s": summarize(e2e, "s"),
        "req_per_s": summarize([len(tracked) / duration], "req/s"),
        "output_tokens_per_s": summarize([tokens / duration], "tokens/s"),
    }
    if payload:
        transfers = [t.acked - t.created for t in tracked.values()]
        metrics["payload_gb_per_s"] = summarize([payload / s / 1e9 for s in transfers], "GB/s")
    serving = {"ttft": serving_summary(ttft), "itl": serving_summary(itl), "e2e": serving_summary(e2e)}
    return metrics, {"serving": serving, "duration_s": duration, "output_tokens": tokens}


@contextlib.contextmanager
def _unix_reference(request: EngineCoreRequest, enabled: bool) -> Iterator[transport.UnixStream | None]:
    """A unix-socket stream of the request's raw tensor bytes, or None when not wanted."""
    if not enabled:
        yield None
        return
    tensors = [array_bytes(leaf) for leaf in iter_leaves(request) if is_array(leaf)]
    with transport.UnixStream(tensors) as stream:
        yield stream


def measure(
    backend: str, workload_spec: str, cfg: Settings, sender: Sender = transport.send
) -> dict[str, Any]:
    """One ipc case: the floor, the load, and for payload workloads the unix-socket reference.

    Unix-socket samples are taken between requests when the load leaves gaps
    (one request at a time, the payload default), so both sides of the
    payload-vs-unix ratio see the same machine; the rest are taken after.
    ``sender`` sends the frontend's request frames; tests swap in a faulty one.
    """
    workload = get_workload(workload_spec)
    serializer = get_serializer(backend)
    pool = RequestPool(workload, cfg.num_prompts)
    payload = workload.payload_bytes()
    unix: list[float] = []
    reference = _unix_reference(pool.get(0)[0], bool(payload) and not cfg.engine)
    with reference as stream, open_link(cfg, backend) as (link, local):
        floor = transport.round_trip_floor(link.push, link.pull, cfg.floor)
        between = (lambda: unix.append(stream.sample())) if stream else None
        tracked, duration = run_load(link, serializer, pool, cfg, sender, bool(payload), between)
        while stream and len(unix) < cfg.num_prompts:
            unix.append(stream.sample())
    metrics, info = load_metrics(tracked, duration, payload)
    metrics["floor_rtt_s"] = summarize(floor, "s")
    info.update(settings=_settings_info(cfg), payload_bytes=payload, local_engine=local)
    info["ttft_over_floor"] = metrics["ttft_s"]["median"] / metrics["floor_rtt_s"]["median"]
    if unix:
        metrics["unix_gb_per_s"] = summarize([payload / s / 1e9 for s in unix], "GB/s")
        info["payload_vs_unix"] = metrics["payload_gb_per_s"]["median"] / metrics["unix_gb_per_s"]["median"]
    return {"metrics": metrics, "info": info}


def _settings_info(cfg: Settings) -> dict[str, Any]:
    info = dict(vars(cfg))
    info["rate"] = "inf" if math.isinf(cfg.rate) else cfg.rate  # JSON has no infinity
    return info


def _rate(text: str) -> float:
    rate = float(text)
    if not rate > 0:
        raise argparse.ArgumentTypeError(f"must be > 0 or 'inf', got {text!r}")
    return rate


def _burstiness(text: str) -> float:
    value = float(text)
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text!r}")
    return value


def _non_negative(text: str) -> float:
    value = float(text)
    if not 0 <= value <= 10_000:
        raise argparse.ArgumentTypeError(f"must be in [0, 10000], got {text!r}")
    return value


def _engine_url(text: str) -> str:
    try:
        transport.tcp_addresses(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


class Ipc(Scenario):
    name = "ipc"
    description = (
        "frontend and engine processes over real ZeroMQ under load: TTFT, ITL, E2E, floor, integrity"
    )
    summary = [
        Column("ttft_s", "TTFT ms", 1e3),
        Column("ttft_p99_s", "TTFT p99 ms", 1e3),
        Column("itl_s", "ITL ms", 1e3),
    ]

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--num-prompts", type=positive_int, help="requests per case (default by profile)")
        parser.add_argument("--rate", type=_rate, help="requests per second, 'inf' = all at once")
        parser.add_argument(
            "--burstiness", type=_burstiness, help="gamma shape of arrival gaps (1 = Poisson)"
        )
        parser.add_argument("--max-concurrency", type=positive_int, help="requests in flight at most")
        parser.add_argument("--step-ms", type=_non_negative, help="simulated model time per engine step (5)")
        parser.add_argument(
            "--transport", choices=("ipc", "tcp"), help="local link: ipc:// (default) or tcp://"
        )
        parser.add_argument(
            "--engine",
            type=_engine_url,
            help="drive a `serbench engine` at tcp://HOST:PORT instead of forking one",
        )

    def options(self, args: argparse.Namespace) -> dict[str, Any]:
        names = ("num_prompts", "rate", "burstiness", "max_concurrency", "step_ms", "transport", "engine")
        return {f"ipc_{name}": getattr(args, name, None) for name in names}

    def run(self, case: Case, profile: Profile) -> dict[str, Any]:
        return measure(case.backend, case.workload, settings_for(profile, get_workload(case.workload)))
