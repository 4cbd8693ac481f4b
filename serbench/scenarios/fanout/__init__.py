"""fanout: the second hop, one engine core broadcasting every step to N worker processes.

The case's process is the engine core; it forks ``case.workers`` workers (``fanout.workgroup``)
and broadcasts each step over ``case.transport`` (``fanout.broadcast``: zmq-each, zmq-pub,
shm-ring, torch-dist). A step is what a core sends its tensor-parallel workers (``fanout_steps``:
vLLM's ``SchedulerOutput`` cut to what has bytes): a prefill step with the workload's request and
its multimodal tensors, then ``--fanout-decode-steps`` decode steps of the running batch; or the
form the workload's library broadcasts (``Workload.broadcast``: SGLang's, only new requests).

Every worker decodes each step, stamps the moment it holds it, then checks it against the core's
checksum: a step that does not match fails the case; one untimed round warms everything up.

Metrics (docs/fanout.md): the time from the core's encode start to the last worker holding the
verified step, the spread first → last worker, the core's CPU time and bytes copied per step,
``encode_calls`` per step (a core that re-serializes per worker reads N), and each worker's and
the whole group's memory above baseline in payload copies.

With ``--cache lru|shm`` (docs/cache.md) the core and its workers keep the first hop's caches
(``fanout_cache``): prefill step k carries the workload's request k, each tensor the workers hold
as a reference, which each worker resolves and checks by digest before it stamps the step.
"""

from __future__ import annotations

import contextlib
import functools
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import msgspec
import numpy as np

from serbench.links import cache, shm, transport
from serbench.model.errors import BroadcastError
from serbench.model.metrics import measured, statistic
from serbench.model.profiles import Profile
from serbench.model.results import FanoutInfo, Results, Verification
from serbench.model.specs import parse_spec
from serbench.model.stats import Measurement
from serbench.model.views import MEDIAN, Figure, Table
from serbench.probes import instructions
from serbench.probes.heap import fresh_memory
from serbench.probes.rss import live_memory
from serbench.runtime import lazy
from serbench.scenarios import caching
from serbench.scenarios.base import (
    Case,
    Dimension,
    Option,
    Outcome,
    Scenario,
    counting,
    positive_int,
)
from serbench.scenarios.fanout import broadcast, workgroup
from serbench.scenarios.fanout import cached as fanout_cache
from serbench.scenarios.fanout import counted as fanout_counted
from serbench.scenarios.fanout import remote as remote_workers
from serbench.scenarios.fanout.steps import (
    BLOCK_SIZE,
    Prefills,
    Schedule,
    case_steps,
    check_step,
    step_checksum,
)
from serbench.serializers import conformance, frames_consumed, get_serializer, is_safe
from serbench.workloads.tree import arrays, miniature, payload_bytes

torch = lazy.torch(__name__)  # imported on first use (serbench.runtime.lazy)

DEFAULT_BATCH = 32
DEFAULT_DECODE_STEPS = 3

WORKERS = Dimension(
    "workers",
    "--workers",
    positive_int,
    (1, 2),
    "fanout: worker processes the engine core broadcasts each step to (tensor-parallel ranks)",
)
BROADCAST = Dimension(
    "transport",
    "--transport",
    str,
    ("shm-ring",),
    "fanout: how the core broadcasts (zmq-each: one send per worker; zmq-pub: PUB/SUB; "
    "shm-ring: one write, N readers in shared memory; torch-dist: gloo broadcast)",
    choices=broadcast.KINDS,
)


def _storage(leaf: Any) -> tuple[int, int]:
    """(address, bytes) of the memory an array views."""
    if isinstance(leaf, torch.Tensor):
        storage = leaf.untyped_storage()
        return storage.data_ptr(), storage.nbytes()
    base = leaf.base if isinstance(leaf.base, np.ndarray) else leaf
    return base.__array_interface__["data"][0], base.nbytes


def encoder_copied(frames: list[Any], message: Any) -> int:
    """Bytes of ``frames`` the encoder built rather than viewed: a frame inside an array of
    ``message`` is zero-copy, every other byte was written by the encode."""
    spans = [_storage(leaf) for leaf in arrays(message)]
    copied = 0
    for frame in frames:
        view = memoryview(frame).cast("B")
        if not view.nbytes:
            continue
        address = np.frombuffer(view, np.uint8).__array_interface__["data"][0]
        inside = any(start <= address and address + view.nbytes <= start + size for start, size in spans)
        copied += 0 if inside else view.nbytes
    return copied


class Counted:
    """A serializer's encode of one message, counting calls (``encode_calls``)."""

    def __init__(self, serializer: Any, message: Any) -> None:
        self.serializer, self.message = serializer, message
        self.calls = 0
        self.frames: list[Any] = []

    def __call__(self) -> list[Any]:
        self.calls += 1
        self.frames = self.serializer.encode(self.message)
        return self.frames


@dataclass
class StepReading:
    step: int
    to_last_s: float
    spread_s: float
    cpu_s: float
    copied: int  # by the transport
    encoded_copied: int  # by the encoder
    encode_calls: int
    wire_bytes: int
    lookups: int = 0  # a cached prefill step: its cacheable tensors, and how many the workers hit
    hits: int = 0

    @property
    def cached(self) -> str:
        """Of a cached prefill step: ``hit`` (every cacheable tensor), ``partial`` or ``miss``."""
        return "hit" if self.hits == self.lookups else "partial" if self.hits else "miss"


@dataclass(frozen=True)
class FanoutRun:
    """One timed fan-out case as ``measure`` ran it: the timed steps' readings, the workers'
    reports, what the case ran with, and what the core held while the workers held the ``hold``
    step (PSS, USS, above its baseline)."""

    readings: list[StepReading]
    reports: list[workgroup.WorkerReport]
    schedule: Schedule
    route: broadcast.Route
    rounds: int
    verification: Verification  # of the steps, before any was timed
    payload_bytes: int  # the first prefill step's tensors
    core_held: tuple[int, int]
    core_cache: fanout_cache.CoreCache | None


def _settings(profile: Profile) -> tuple[int, int, int]:
    options = profile.options
    rounds = profile.share(options.get("fanout_rounds") or profile.samples)  # an interleaved visit's share
    return (
        rounds,
        options.get("fanout_batch") or DEFAULT_BATCH,
        options.get("fanout_decode_steps", DEFAULT_DECODE_STEPS),
    )


def _work(
    backend: str,
    schedule: Schedule,
    warmup: Any,
    hold: int,
    hook: Any = None,
    worker_cache: fanout_cache.WorkerCache | None = None,
) -> workgroup.Work:
    """A worker's work: decode each step as the type of ``warmup`` (the case's steps' type), check
    it, and with a cache resolve its new requests' references first (read through ``schedule``)."""
    kind = type(warmup)

    def open_decoder() -> Any:
        serializer = get_serializer(backend)
        return lambda frames: serializer.decode(frames, kind)

    def warm(decode: Any) -> None:
        frames = [bytes(memoryview(f).cast("B")) for f in get_serializer(backend).encode(warmup)]
        check_step(decode(frames), step_checksum(warmup), kind)

    if worker_cache is None:
        return workgroup.Work(open_decoder, functools.partial(check_step, kind=kind), warm, hold, hook)

    def resolve(decoded: Any) -> tuple[Any, broadcast.Resolution]:
        requests, resolution = worker_cache.resolve(schedule.requests(decoded))
        return schedule.with_requests(decoded, requests), resolution

    check = functools.partial(worker_cache.check, kind=kind)
    return workgroup.Work(open_decoder, check, warm, hold, hook, resolve)


# A test may set this (in the process that runs the case) to see every decoded step in every
# worker: ``hook(worker, step, decoded)``; raising ValueError there is a wrong step, anything
# else a crash. Never set by serbench itself.
WORKER_HOOK = None


class WorkerCase(msgspec.Struct, frozen=True):
    """What a remote worker (``serbench fanout-worker``) is told of a case: all it needs to build
    the work a forked worker inherits, every step being deterministic from the specs."""

    backend: str
    workload: str
    batch: int
    decode_steps: int
    hold: int
    cache: str = "none"
    capacity: int = 0


def remote_work(settings: dict[str, Any], allow_unsafe: bool, loopback: bool) -> workgroup.Work:
    """A remote worker's work for the case a core sent (``WorkerCase``). ValueError refuses a
    case, as ``serbench engine`` refuses a session: a backend named by dotted path (building it
    imports and calls what the core names), or one that runs code from its input (pickle) on a
    non-loopback rendezvous, unless ``allow_unsafe``."""
    spec = msgspec.convert(settings, WorkerCase)
    flag = "start serbench fanout-worker with --allow-unsafe-deserialization to accept it"
    if parse_spec(spec.backend).is_dotted_path and not allow_unsafe:
        raise ValueError(f"refusing backend {spec.backend!r} given by dotted path; {flag}")
    if not (allow_unsafe or loopback or is_safe(get_serializer(spec.backend))):
        raise ValueError(f"refusing unsafe backend {spec.backend!r} on a non-loopback rendezvous; {flag}")
    prefills, schedule = case_steps(spec.workload, spec.batch, spec.decode_steps, spec.cache)
    held = (
        fanout_cache.WorkerCache(spec.cache, spec.capacity, None, own=False) if spec.cache != "none" else None
    )
    return _work(spec.backend, schedule, miniature(schedule.step(0, prefills)), spec.hold, None, held)


def measure(case: Case, profile: Profile) -> FanoutRun:
    """Run the case's steps, timing all but the warm-up round's. With ``--fanout-rendezvous`` the
    workers are remote (``serbench fanout-worker``), sent the case as a ``WorkerCase``."""
    fresh_memory()  # the core's PSS counts what it holds, not free heap that glibc kept
    rounds, batch, decode_steps = _settings(profile)
    serializer = get_serializer(case.backend)
    mode = caching.mode(case)
    remote = profile.options.get("fanout_rendezvous") or ""
    if remote and mode == "shm":
        raise BroadcastError("--cache shm: remote workers cannot map this host's shared memory")
    prefills, schedule = case_steps(case.workload, batch, decode_steps, mode)
    workload = schedule.workload
    per_round = 1 + decode_steps
    total = (1 + rounds) * per_round  # the first round warms up
    verification = _verified(case, serializer, schedule, prefills, mode)
    largest = prefills.largest(1 + rounds)
    arena = max(
        shm.placed_bytes(serializer.encode(schedule.step(i * per_round, prefills)))
        for i in sorted({0, 1, largest})
    )
    capacity = caching.capacity(profile, max(2 * workload.payload_bytes(), 1 << 20))
    core_cache, worker_cache = fanout_cache.core_and_worker_caches(mode, capacity, case.transport or "")
    hold = rounds * per_round  # the last round's prefill step: workers read PSS while holding it
    warmup = miniature(schedule.step(0, prefills))
    timeout_s = profile.options.get("fanout_timeout_s") or min(60.0, profile.case_timeout_s / 2)
    readings: list[StepReading] = []
    shm.reclaim_orphans()
    with transport.ipc_dir() as folder, contextlib.ExitStack() as regions:
        if core_cache is not None and core_cache.region is not None:
            regions.callback(core_cache.region.close)
        route = broadcast.make_route(case.transport, case.workers, folder, arena, timeout_s, remote)
        worker_case = WorkerCase(case.backend, case.workload, batch, decode_steps, hold, mode, capacity)
        group = None
        clean = False
        try:
            if remote:
                group = remote_workers.start(route, msgspec.to_builtins(worker_case))
            else:
                work = _work(case.backend, schedule, warmup, hold, WORKER_HOOK, worker_cache)
                group = workgroup.start(route, work)
            core_base = live_memory()
            workgroup.release(group)
            transport.remove_ipc_dir(folder)  # every worker connected: a core killed now leaves no socket
            core_held = (0, 0)
            for index in range(total):
                step = schedule.step(index, prefills)
                payload_crc = prefills.crc(index // per_round) if schedule.prefill(index) else 0
                envelope = broadcast.Envelope(index, step_checksum(step, payload_crc))
                requests = schedule.requests(step)
                if core_cache is not None:
                    core_cache.digests(requests)
                cpu0, start = time.process_time(), broadcast.clock()
                sent, prepared = step, None
                if core_cache is not None:
                    references, prepared = core_cache.prepare(requests)
                    sent = schedule.with_requests(step, references)
                encode = Counted(serializer, sent)
                copied = group.sender.publish(envelope, encode, group.alive)
                acks = group.acks.collect(index, group.alive)
                cpu = time.process_time() - cpu0
                resolved = broadcast.Resolution()
                if core_cache is not None:
                    ids = [workload.about(request).request_id for request in requests]
                    core_cache.account(index, ids, acks, prepared)
                    copied += prepared.stored_bytes  # shm: the core's write into the store
                    resolved = acks[0].cache  # every worker's: account checked they agree
                held = [a.held_at for a in acks]
                if index == hold:
                    pss, uss = live_memory()
                    core_held = (pss - core_base[0], uss - core_base[1])
                if index >= per_round:
                    readings.append(
                        StepReading(
                            index,
                            max(held) - start,
                            max(held) - min(held),
                            cpu,
                            copied,
                            encoder_copied(encode.frames, sent),
                            encode.calls,
                            sum(memoryview(f).nbytes for f in encode.frames),
                            resolved.lookups,
                            resolved.hits,
                        )
                    )
                del encode, step, sent, requests
            if core_cache is not None:
                core_cache.mirrored()
            clean = True
        finally:
            reports = workgroup.finish(group, clean) if group is not None else []
    return FanoutRun(
        readings,
        reports,
        schedule,
        route,
        rounds,
        verification,
        payload_bytes(prefills.request(0)),
        core_held,
        core_cache,
    )


def measure_counted(case: Case, profile: Profile) -> Outcome:
    """The case's path counted (``fanout_counted``): its first prefill step, and a decode step
    where the schedule has them, each verified first as the timed path's are."""
    _, batch, decode_steps = _settings(profile)
    prefills, schedule = case_steps(case.workload, batch, decode_steps, "none")
    serializer = get_serializer(case.backend)
    verification = _verified(case, serializer, schedule, prefills, "none")
    first = schedule.step(0, prefills)
    messages = {"prefill": (first, step_checksum(first, prefills.crc(0)))}
    if not schedule.prefill(1):
        step = schedule.step(1, prefills)
        messages["decode"] = (step, step_checksum(step, 0))

    kind = type(first)  # the workload's step type

    def decode(frames: list[Any]) -> Any:
        return serializer.decode(frames, kind)

    return fanout_counted.measure(
        case.transport or "",
        case.workers or 1,
        messages,
        serializer.encode,
        decode,
        functools.partial(check_step, kind=kind),
        verification,
    )


def _verified(case: Case, serializer: Any, schedule: Schedule, prefills: Prefills, mode: str) -> Verification:
    """Round-trip the case's steps in-process before any is timed (``conformance.verify``): two
    prefill steps and a decode step, and with a cache the first prefill step in its all-hit form
    (every cached tensor a reference)."""
    per_round = 1 + schedule.decode_steps
    key = (case.backend, case.workload, f"batch={schedule.batch}")
    steps = [schedule.step(0, prefills), schedule.step(per_round, prefills), schedule.step(1, prefills)]
    verification = conformance.verify(serializer, steps, "fanout-step", key)
    if mode != "none":
        first = steps[0]
        hits = schedule.with_requests(first, [cache.all_refs(r, mode) for r in schedule.requests(first)])
        verified = conformance.verify(serializer, [hits], f"fanout-step-{mode}", key)
        verification.messages += verified.messages
        verification.of += verified.of
        verification.seconds += verified.seconds
        verification.earlier += verified.earlier
        if verified.keys:
            verification.keys = [*(verification.keys or []), *verified.keys]
    return verification


def _values(readings: list[StepReading], prefill: bool, schedule: Schedule) -> list[StepReading]:
    return [r for r in readings if schedule.prefill(r.step) == prefill]


def run_metrics(run: FanoutRun) -> dict[str, Measurement]:
    """The case's metrics from its readings and the workers' reports."""
    readings, reports, payload = run.readings, run.reports, run.payload_bytes
    pre, dec = _values(readings, True, run.schedule), _values(readings, False, run.schedule)
    metrics: dict[str, Measurement] = {
        "fanout_s": measured("fanout_s", [r.to_last_s for r in pre]),
        **_statistic("fanout_p99_s", [r.to_last_s for r in pre]),
        "fanout_spread_s": measured("fanout_spread_s", [r.spread_s for r in pre]),
        "core_cpu_s": measured("core_cpu_s", [r.cpu_s for r in pre]),
        "core_copied_bytes": measured("core_copied_bytes", [r.copied + r.encoded_copied for r in pre]),
        "encode_calls": measured("encode_calls", [r.encode_calls for r in readings]),
        "wire_bytes": measured("wire_bytes", [r.wire_bytes for r in pre]),
    }
    if dec:
        metrics["fanout_decode_s"] = measured("fanout_decode_s", [r.to_last_s for r in dec])
        metrics["decode_wire_bytes"] = measured("decode_wire_bytes", [r.wire_bytes for r in dec])
    core_pss = run.core_held[0]
    group_pss = core_pss + sum(w.pss_bytes for w in reports)
    metrics["worker_pss_bytes"] = measured("worker_pss_bytes", [max(w.pss_bytes for w in reports)])
    metrics["group_pss_bytes"] = measured("group_pss_bytes", [group_pss])
    if payload:
        worst = {
            "worker_rss_copies": max(w.peak_bytes for w in reports),
            "worker_pss_copies": max(w.pss_bytes for w in reports),
            "worker_uss_copies": max(w.uss_bytes for w in reports),
            "group_pss_copies": group_pss,
        }
        metrics.update({name: measured(name, [value / payload]) for name, value in worst.items()})
    if run.core_cache is not None:
        metrics.update(cache_metrics(run.core_cache))
        for kind in ("hit", "partial", "miss"):
            times = [r.to_last_s for r in pre if r.lookups and r.cached == kind]
            if times:
                metrics[f"fanout_{kind}_s"] = measured(f"fanout_{kind}_s", times)
    return metrics


def _statistic(name: str, samples: list[float]) -> dict[str, Measurement]:
    """``{name: its value}`` for a statistic of ``samples`` (``metrics.statistic``), or nothing
    where they are too few for one."""
    value = statistic(name, samples)
    return {} if value is None else {name: value}


def cache_metrics(core: fanout_cache.CoreCache) -> dict[str, Measurement]:
    """A cached case's cache: the hit ratio the workers measured over every prefill step (tensors
    resolved from a reference / cacheable tensors), what the core's and the fullest worker's cache
    hold at the end, and the evictions (the core's; every worker's lru evicted as many)."""
    found: dict[str, Measurement] = {}
    if core.lookups:
        found["hit_ratio"] = measured("hit_ratio", [core.hits / core.lookups])
    found["cache_frontend_bytes"] = measured("cache_frontend_bytes", [core.front.held_bytes])
    found["cache_engine_bytes"] = measured("cache_engine_bytes", [max(w.held_bytes for w in core.workers)])
    found["cache_evictions"] = measured("cache_evictions", [core.front.evictions])
    return found


def cpus() -> int:
    return os.cpu_count() or 1


def oversubscribed(workers: int, cpu_count: int) -> bool:
    return workers + 1 > cpu_count


class Fanout(Scenario):
    name = "fanout"
    default = False  # run only when named (``--scenarios fanout``): N processes per case
    description = (
        "the second hop: an engine core broadcasts every step (prefill with its tensors, then the "
        "running batch) to N worker processes; time until the last worker holds the verified step, "
        "the core's CPU and copies, encode calls, each worker's memory"
    )
    dimensions = (WORKERS, BROADCAST, caching.CACHE)
    interleaved = True
    figures = (
        Figure(
            "workers",
            "Time from the core's encode to the last worker holding the prefill step, against workers",
            (
                ("fanout_s", MEDIAN),
                ("fanout_p99_s", MEDIAN),
                ("core_cpu_s", MEDIAN),
                ("core_copied_bytes", MEDIAN),
            ),
        ),
        Figure("bars", "Encode calls per step (1: encoded once, whatever N)", (("encode_calls", MEDIAN),)),
        Figure(
            "bars",
            "Each worker's memory above its baseline, in payload copies (the worst worker)",
            (("worker_rss_copies", MEDIAN), ("worker_pss_copies", MEDIAN), ("worker_uss_copies", MEDIAN)),
        ),
    )
    options = (
        Option(
            "--fanout-batch",
            "fanout_batch",
            positive_int,
            f"fanout: running requests in every step's scheduler output (default {DEFAULT_BATCH})",
            metavar="B",
        ),
        Option(
            "--fanout-decode-steps",
            "fanout_decode_steps",
            int,
            f"fanout: decode steps after each prefill step (default {DEFAULT_DECODE_STEPS})",
            metavar="K",
        ),
        Option(
            "--fanout-rounds",
            "fanout_rounds",
            positive_int,
            "fanout: timed rounds (a prefill step, its decode steps) per case (default: profile's samples)",
            metavar="R",
        ),
        caching.CACHE_MB,
        Option(
            "--fanout-rendezvous",
            "fanout_rendezvous",
            broadcast.rendezvous_address,
            "fanout, --transport torch-dist: listen at tcp://HOST:PORT (this host's address as the "
            "workers reach it; PORT..PORT+2) for `serbench fanout-worker`s on other hosts instead of "
            "forking the workers",
            metavar="tcp://HOST:PORT",
            applies=("transport", "torch-dist"),
        ),
    )

    def cases(
        self, backends: list[str], workloads: list[str], chosen: Mapping[str, tuple[Any, ...]] | None = None
    ) -> list[Case]:
        """Every backend × workers × transport × cache × workload; ``none`` is an uncached case's key."""
        return caching.with_cache(super().cases(backends, workloads, chosen))

    def rounds(self, case: Case, profile: Profile) -> int:
        """A cached case is measured whole, in one visit: its hit ratio follows the whole sequence
        of requests (as the ipc scenario's cached cases); a counted case is one count."""
        return super().rounds(case, profile) if caching.mode(case) == "none" and not counting(profile) else 1

    def unsupported(self, case: Case, profile: Profile) -> str | None:
        """A transport this torch lacks (torch-dist without gloo); a backend whose frame its first
        decode consumes (``frames_consumed``: SGLang's shm features, unlinked as taken), which the
        first of several workers would take from the rest; counting instructions, the cases whose
        path is not counted (``fanout_counted.not_counted``)."""
        reason = broadcast.unavailable(case.transport or "")
        if reason is not None:
            return f"{case.transport}: {reason}"
        if frames_consumed(get_serializer(case.backend)):
            return "its frames are taken by their first decode, and every fan-out worker decodes the step"
        if counting(profile) and instructions.launched():
            remote = profile.options.get("fanout_rendezvous") or ""
            return fanout_counted.not_counted(case.transport or "", caching.mode(case), remote)
        return None

    def run(self, case: Case, profile: Profile) -> Outcome:
        # counted under valgrind (where a clock would measure valgrind), else timed
        if counting(profile) and instructions.unavailable() is None:
            return measure_counted(case, profile)
        measured_run = measure(case, profile)
        readings, reports = measured_run.readings, measured_run.reports
        count = cpus()
        route, schedule = measured_run.route, measured_run.schedule
        over = not route.remote and oversubscribed(case.workers or 1, count)  # remote: the core alone here
        info = FanoutInfo(
            payload_bytes=measured_run.payload_bytes,
            verification=measured_run.verification,
            cpu_count=count,
            oversubscribed=over,
            warning=f"{case.workers} workers + the core on {count} CPUs: more processes than CPUs"
            if over
            else None,
            rounds=measured_run.rounds,
            decode_steps=schedule.decode_steps,
            batch=schedule.running_sent,
            block_size=BLOCK_SIZE,
            ring_bytes=route.data_bytes if route.kind == "shm-ring" else None,
            cpus=list(route.cpus) or None,
            worker_peak_bytes=[w.peak_bytes for w in reports],
            worker_pss_bytes=[w.pss_bytes for w in reports],
            worker_uss_bytes=[w.uss_bytes for w in reports],
            core_pss_bytes=measured_run.core_held[0],
            encoder_copied_bytes=int(np.median([r.encoded_copied for r in readings])) if readings else 0,
            worker_hosts=[w.host for w in reports] if route.remote else None,
        )
        core = measured_run.core_cache
        if core is not None:  # over every prefill step sent, the warm-up round's too
            info.cache = {
                "mode": core.front.mode,
                "capacity_bytes": core.front.capacity,
                "lookups": core.lookups,
                "hits": core.hits,
            }
        return Outcome(run_metrics(measured_run), info)

    def tables(self, data: Results) -> list[Table]:
        return scaling_tables(data)


def _cell(record: Any, name: str, scale: float = 1.0, digits: int = 3) -> str:
    metric = record.metrics.get(name)
    return "—" if metric is None else f"{metric.median / scale:.{digits}g}"


def _line(record: Any) -> str:
    """A row of the scaling tables: backend@transport, and the cache where there is one."""
    return f"{record.backend}@{record.transport}" + (f" cache={record.cache}" if record.cache else "")


def scaling_tables(data: Results) -> list[Table]:
    """The copies/CPU table and which combination scales from the fewest workers to the most."""
    records = [r for r in data.records if r.scenario == "fanout"]
    ok = [r for r in records if r.ok and r.workers]
    if not ok:
        return []
    rows = []
    for r in sorted(ok, key=lambda r: (r.workload, r.backend, r.transport or "", r.workers)):
        over = isinstance(r.info, FanoutInfo) and r.info.oversubscribed
        rows.append(
            [
                _line(r),
                r.workload,
                f"{r.workers}" + (" *" if over else ""),
                _cell(r, "fanout_s", 1e-3),
                _cell(r, "core_cpu_s", 1e-3),
                _cell(r, "core_copied_bytes", 1e6),
                _cell(r, "encode_calls"),
                _cell(r, "worker_uss_copies"),
                _cell(r, "worker_pss_copies"),
            ]
        )
    note = "* more processes (workers + core) than CPUs: the workers share cores, the times are the machine's"
    copies = Table(
        "time to the last worker, the core's CPU and copies per prefill step",
        ["backend@transport", "workload", "workers", "to last ms", "core CPU ms", "core copied MB", "encodes",
         "worker USS copies", "worker PSS copies"],
        rows,
        note if any(r[2].endswith("*") for r in rows) else "",
    )  # fmt: skip
    return [copies, _scales(ok)]


def _scales(records: list[Any]) -> Table:
    """Per workload: each backend@transport's growth of time-to-last and of the core's copies from its
    fewest workers to its most, the best first."""
    groups: dict[tuple[str, str], list[Any]] = {}
    for r in records:
        groups.setdefault((r.workload, _line(r)), []).append(r)
    rows = []
    for (workload, line), group in groups.items():
        low, high = min(group, key=lambda r: r.workers), max(group, key=lambda r: r.workers)
        if low.workers == high.workers or "fanout_s" not in low.metrics or "fanout_s" not in high.metrics:
            continue
        time_growth = high.metrics["fanout_s"].median / low.metrics["fanout_s"].median
        copies = [x.metrics.get("core_copied_bytes") for x in (low, high)]
        copy_growth = (
            copies[1].median / copies[0].median if all(copies) and copies[0].median else float("nan")
        )
        rows.append(
            [workload, line, f"{low.workers} → {high.workers}", f"{time_growth:.2f}×", f"{copy_growth:.2f}×"]
        )
    rows.sort(key=lambda row: (row[0], float(row[3].rstrip("×"))))
    best = {}
    for row in rows:
        best.setdefault(row[0], row[1])
    note = "; ".join(f"{w}: {line} scales best" for w, line in best.items())
    return Table(
        "which combination scales (growth from the fewest workers to the most)",
        ["workload", "backend@transport", "workers", "time to last", "core copies"],
        rows,
        note,
    )
