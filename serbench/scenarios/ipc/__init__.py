"""ipc: a frontend and an engine process over real ZeroMQ, under load (docs/ipc.md).

The case's own process is the frontend: it forks an engine (``serbench.scenarios.engine.server``)
on a private ipc:// folder or loopback tcp://, or drives one started with ``serbench engine``
(``--engine``). In one run it measures the transport floor (empty round trips), the load
(``serbench.scenarios.ipc.load``: the workload's requests at a rate while the engine steps and
streams tokens; TTFT from encode to the first output's decode, split into its parts), and for
payload workloads two references for the payload rate: a plain unix socket and one memcpy.

The case's dimensions shape it: the link (``--transport``: ipc, tcp, or ``shm`` with the large
frames in shared memory, ``serbench.links.shm``), the cache (``--cache``,
``serbench.scenarios.caching``: a cached case sends a fixed number of requests, so its hit ratio
is the workload's), the device stage (``--engine-device``), and a list of rates (``--rate``: one
load per rate on the same session, ``info.sweep``). An output workload measures the way back
instead (``serbench.scenarios.ipc.stream``).

Integrity is total, not sampled: the engine checks every request against a checksum taken
outside the timed path, the frontend every output token; a corrupted, lost or duplicated message
fails the case with a message saying which.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import math
import os
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import psutil

from serbench.links import cache, shm, transport
from serbench.model import metrics
from serbench.model.errors import IntegrityError
from serbench.model.profiles import Profile
from serbench.model.results import DEFAULT_TRANSPORT, IpcInfo, Results, ipc_ratios
from serbench.model.views import MEDIAN, P99, Figure, Table
from serbench.probes import instructions
from serbench.scenarios import caching, device
from serbench.scenarios.base import (
    MEASURE,
    TRANSPORT,
    Case,
    Option,
    Outcome,
    Scenario,
    counting,
    positive_int,
)
from serbench.scenarios.engine.client import EngineLink, Sender, open_link
from serbench.scenarios.engine.protocol import MAX_STEP_S
from serbench.scenarios.engine.staging import Staging
from serbench.scenarios.ipc import counted as ipc_counted
from serbench.scenarios.ipc import stream
from serbench.scenarios.ipc.load import (
    RequestPool,
    arrival_offsets,
    load_metrics,
    run_load,
    saturation,
    sweep_point,
)
from serbench.serializers import (
    Serializer,
    conformance,
    get_serializer,
    has_channel,
    shared_channel,
)
from serbench.workloads import Workload, get_workload
from serbench.workloads.messages import EngineCoreRequest
from serbench.workloads.tree import array_bytes, arrays

# Per profile and workload kind, what a run measures unless options say otherwise: enough requests
# and floor round trips that between-backend TTFT ratios hold run to run, within a payload case's
# time budget (docs/measurements/2026-12-02-ipc.md, 2026-12-06-ipc-in-turns.md). Quick's payload:
# two a visit of ``MORE_VISITS``, so the profile's rounds reach ``stats.MIN_DISTRIBUTION`` samples.
DEFAULTS: dict[tuple[str, str], dict[str, Any]] = {
    ("quick", "text"): {"num_prompts": 50, "rates": (40.0,), "max_concurrency": None, "floor": 10},
    ("full", "text"): {"num_prompts": 1000, "rates": (40.0,), "max_concurrency": None, "floor": 100},
    ("quick", "payload"): {
        "num_prompts": 24,
        "rates": (math.inf,),
        "max_concurrency": 1,
        "floor": 10,
        "budget_s": 12.0,
        "max_prompts": 30,
    },
    ("full", "payload"): {"num_prompts": 20, "rates": (math.inf,), "max_concurrency": 1, "floor": 100},
}
FLOOR_TIMEOUT_S = 5.0
# Visits of a payload case: a visit sits at one of two machine levels, and more visits steady
# the TTFT ratios between runs (docs/measurements/2026-12-06-ipc-in-turns.md, 2026-12-07-visit-levels.md).
MORE_VISITS = 12
# The references measure a rate, which needs a stream well past the CPU caches, not the whole
# payload: larger payloads stream their first REFERENCE_BYTES (docs/measurements/2026-12-02-ipc.md).
REFERENCE_BYTES = 64 << 20
TTFT_SLO_MS = 100.0  # goodput counts requests whose TTFT is within this (vLLM's --goodput ttft:100)


@dataclass(frozen=True)
class Settings:
    """How one ipc case runs; ``engine`` set means a separately started engine.

    ``rates``: one load per rate, in order (more than one is a sweep).
    ``budget_s``: a single load sends more than ``num_prompts`` requests, one
    at a time, while each is expected to end within this many seconds of the
    load's start, up to ``max_prompts`` (None: exactly ``num_prompts``).
    """

    num_prompts: int
    rates: tuple[float, ...]
    max_concurrency: int | None
    floor: int
    ttft_slo_s: float = TTFT_SLO_MS / 1e3
    burstiness: float = 1.0
    step_s: float = 0.005
    transport: str = DEFAULT_TRANSPORT
    engine: str | None = None
    seed: int = 0
    staging: Staging | None = None
    shm_mb: float | None = None  # the shm region; None: two of the largest requests
    budget_s: float | None = None
    max_prompts: int | None = None
    cache: str = "none"  # the multimodal cache (docs/cache.md)
    cache_bytes: int | None = None  # each side's cache; None: two of the workload's largest requests
    one_cpu: bool = False  # the frontend and its forked engine share one CPU (``one_cpu``)

    def more(self, sent: int, elapsed_s: float) -> bool:
        """Whether the load sends one more request (``run_load``'s ``more``): room under
        ``max_prompts`` and time for one more of the same mean length within ``budget_s``."""
        if self.budget_s is None or self.max_prompts is None or sent >= self.max_prompts:
            return False
        return elapsed_s + elapsed_s / max(sent, 1) <= self.budget_s


CACHED_PROMPTS = 8  # a cached case's requests unless --num-prompts says: a fixed count, no time budget


def settings_for(
    profile: Profile, workload: Workload, link: str = DEFAULT_TRANSPORT, cache_mode: str = "none"
) -> Settings:
    """The profile's defaults for this kind of workload over ``link``, overridden by scenario options.

    A rate given on the command line also lifts the payload default of one
    request at a time: offered load is the point of it (``--max-concurrency``
    still caps it).
    """
    kind = "payload" if workload.payload_bytes() else "text"
    values = dict(DEFAULTS[(profile.name if profile.name == "full" else "quick", kind)], transport=link)
    opts = profile.options
    if opts.get("ipc_rates") is not None:
        values["max_concurrency"] = None
    if opts.get("ipc_rates") is not None or opts.get("ipc_num_prompts") is not None:
        values.pop("budget_s", None)  # a sweep, or a count asked for: exactly num_prompts each
    if cache_mode != "none":
        values.pop("budget_s", None)
        values.update(cache=cache_mode, num_prompts=max(values["num_prompts"], CACHED_PROMPTS))
        if opts.get("cache_mb"):
            values["cache_bytes"] = round(opts["cache_mb"] * 1e6)
    for key in ("num_prompts", "rates", "max_concurrency", "burstiness", "engine", "shm_mb"):
        if opts.get(f"ipc_{key}") is not None:
            values[key] = opts[f"ipc_{key}"]
    for key in ("step", "ttft_slo"):
        if opts.get(f"ipc_{key}_ms") is not None:
            values[f"{key}_s"] = opts[f"ipc_{key}_ms"] / 1e3
    values["one_cpu"] = shares_cpu(
        values["max_concurrency"], values.get("engine"), link, opts.get("ipc_engine_cpu")
    )
    # One of the case's interleaved visits (``Ipc.rounds``) takes its share of each count.
    for key in ("num_prompts", "floor", "max_prompts"):
        if values.get(key) is not None:
            values[key] = profile.share(values[key])
    if values.get("budget_s") is not None:
        values["budget_s"] /= profile.split
    return Settings(**values, staging=device.staging(profile))


# Where a forked engine runs (``--engine-cpu``): a request sent alone goes one step at a time, and
# a second CPU added a second, slower level more than overlap (docs/measurements/2026-12-07-one-cpu.md).
# ``shm`` keeps every CPU: its copy into the region runs on several threads at once.
ENGINE_CPUS = ("shared", "free")


def shares_cpu(max_concurrency: int | None, engine: str | None, link: str, asked: str | None) -> bool:
    """Whether the load runs the frontend and its forked engine on one CPU: requests one at a time
    over ZeroMQ, unless ``--engine-cpu free`` asks otherwise."""
    return asked != "free" and max_concurrency == 1 and engine is None and link != "shm"


@contextlib.contextmanager
def one_cpu(enabled: bool) -> Iterator[None]:
    """This thread, and every process and thread it starts meanwhile, on the CPU it is on now.

    Where the platform cannot pin (no ``sched_setaffinity``) it runs as it would without.
    """
    if not enabled or not hasattr(os, "sched_setaffinity"):
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {psutil.Process().cpu_num()})
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def floor_round_trips(link: EngineLink, count: int, idle_s: float) -> list[float]:
    """``count`` empty-message round trips, each after ``idle_s`` of a quiet link.

    A request meets a link that has rested at least since the engine's last
    step; on a VM the first message after a rest pays for waking every thread
    on its way, so the floor a request is read against is measured the same way.
    """
    samples = []
    for _ in range(count):
        time.sleep(idle_s)
        samples.append(transport.round_trip(link.push, link.pull, FLOOR_TIMEOUT_S))
    return samples


@contextlib.contextmanager
def _frozen_gc() -> Iterator[None]:
    """No cyclic-collector pauses from what exists before the load (as ``server.Engine.serve``)."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


@dataclass
class References:
    """The payload's two yardsticks, sampled side by side: a unix-socket stream and one memcpy
    of the bytes the stream sends.

    Made once the case has forked its engine (``beside``): a fork after the memcpy target is
    faulted in makes its pages copy-on-write again, and each visit's first copy ran at 0.4-1.7
    GB/s against 8-11 (docs/measurements/2026-12-07-one-cpu.md).
    """

    stream: transport.UnixStream
    memcpy: transport.Memcpy
    unix: list[float] = field(default_factory=list)
    copy: list[float] = field(default_factory=list)

    @classmethod
    def beside(cls, stream: transport.UnixStream) -> References:
        """Both yardsticks for the bytes ``stream`` sends."""
        return cls(stream, transport.Memcpy(stream.views))

    @property
    def nbytes(self) -> int:
        """The bytes each sample moves."""
        return self.memcpy.target.nbytes

    def sample(self) -> None:
        self.unix.append(self.stream.sample())
        self.copy.append(self.memcpy.sample())


@contextlib.contextmanager
def _unix_stream(request: EngineCoreRequest, enabled: bool) -> Iterator[transport.UnixStream | None]:
    """The unix-socket yardstick for the request's raw tensor bytes (at most ``REFERENCE_BYTES`` of
    them), or None when not wanted. Its reader is forked here, before the session starts ZeroMQ's
    threads."""
    if not enabled:
        yield None
        return
    with transport.UnixStream(leading_bytes([array_bytes(leaf) for leaf in arrays(request)])) as unix:
        yield unix


def leading_bytes(frames: list[memoryview], limit: int = REFERENCE_BYTES) -> list[memoryview]:
    """The first ``limit`` bytes of ``frames``, as views: the last frame kept is cut short."""
    kept, room = [], limit
    for frame in frames:
        if room <= 0:
            break
        view = memoryview(frame).cast("B")
        kept.append(view[:room])
        room -= view.nbytes
    return kept


def region_bytes(serializer: Serializer, pool: RequestPool, megabytes: float | None) -> int:
    """The shm region: ``megabytes`` if given, else room for two of the largest requests (one in
    use, the next being written)."""
    if megabytes is not None:
        return round(megabytes * 1e6)
    largest = max(shm.placed_bytes(serializer.encode(request)) for request in pool.requests)
    return max(2 * largest, shm.INLINE_BELOW)


def measure(backend: str, workload_spec: str, cfg: Settings, sender: Sender = transport.send) -> Outcome:
    """One ipc case: the floor, the load at each rate, and for payload workloads the references.

    Unix-socket and memcpy samples are taken between requests of the first rate's
    load when it leaves gaps (one request at a time, the payload default), so both
    sides of each ratio see the same machine; the rest are taken after.
    ``sender`` sends the frontend's request frames; tests swap in a faulty one.
    """
    workload = get_workload(workload_spec)
    serializer = get_serializer(backend)
    cached = cfg.cache != "none"
    pool = RequestPool(workload, cfg.num_prompts, fresh=cached or getattr(workload, "repeating", False))
    verification = conformance.verify(serializer, pool.requests, "request", (backend, workload_spec))
    if cached:  # the all-hit form of each: references in place of the tensors
        cache.register(workload)  # a plugin's request type: its walk, before the engine forks
        refs = [cache.all_refs(r, cfg.cache) for r in pool.requests]
        verified = conformance.verify(serializer, refs, f"request-{cfg.cache}", (backend, workload_spec))
        verification.messages += verified.messages
        verification.seconds += verified.seconds
    payload = workload.payload_bytes()
    cache_bytes = cfg.cache_bytes or max(2 * payload, 1 << 20)
    loads = []
    shm_bytes = region_bytes(serializer, pool, cfg.shm_mb) if cfg.transport == "shm" else 0
    unix_stream = _unix_stream(pool.get(0)[0], bool(payload) and not cfg.engine)
    staging = dataclasses.asdict(cfg.staging) if cfg.staging else None
    with contextlib.ExitStack() as stack:
        # The backend's channel (vLLM's tensor IPC queue): made before the engine's fork, released
        # after its end, also when the case fails.
        channel = stack.enter_context(shared_channel(serializer))
        session = open_link(
            backend,
            cfg.step_s,
            cfg.engine,
            cfg.transport,
            shm_bytes,
            staging,
            # a workload whose requests are a plugin's own type: the engine decodes them as that type
            workload=workload_spec if workload.request_type is not EngineCoreRequest else None,
            cache_mode=cfg.cache if cached else None,
            cache_bytes=cache_bytes,
            channel=channel,
        )
        stack.enter_context(one_cpu(cfg.one_cpu))
        stream = stack.enter_context(unix_stream)
        link, local = stack.enter_context(session)
        stack.enter_context(_frozen_gc())
        # With a cache the frames sent are not the request's; with a channel an encode sends its
        # tensors there, its frames holding handles that differ each time.
        if not cached and channel is None:
            pool.encode_checksums(serializer)
        refs = References.beside(stream) if stream else None  # after the engine's fork
        floor = floor_round_trips(link, cfg.floor, cfg.step_s)
        for k, rate in enumerate(cfg.rates):
            offsets = arrival_offsets(cfg.num_prompts, rate, cfg.burstiness, cfg.seed)
            between = refs.sample if refs and k == 0 else None
            tracked, egress, duration = run_load(
                link,
                serializer,
                pool,
                offsets,
                cfg.max_concurrency,
                sender,
                bool(payload),
                between,
                first=k * cfg.num_prompts,
                more=cfg.more if len(cfg.rates) == 1 else None,
            )
            loads.append((rate, offsets, tracked, egress, duration))
        while refs and len(refs.unix) < len(loads[0][2]):  # a reference sample per request
            refs.sample()
        front, engine_cache = link.cache, link.engine_cache
    carries = bool(payload)
    summaries = [load_metrics(tracked, egress, span, carries, local) for _, _, tracked, egress, span in loads]
    first = summaries[0]
    measured = first.metrics
    measured["floor_rtt_s"] = metrics.measured("floor_rtt_s", floor)
    if refs:
        for name, samples in (("unix_gb_per_s", refs.unix), ("memcpy_gb_per_s", refs.copy)):
            measured[name] = metrics.measured(name, [refs.nbytes / s / 1e9 for s in samples])
    info = IpcInfo(
        payload_bytes=payload,
        verification=verification,
        serving=first.serving,
        duration_s=first.duration_s,
        output_tokens=first.output_tokens,
        settings=_settings_info(cfg),
        local_engine=local,
        **ipc_ratios(measured),
    )
    if len(loads) > 1:
        points = [
            sweep_point(rate, offsets, tracked, duration, summary.metrics, cfg.ttft_slo_s)
            for (rate, offsets, tracked, _, duration), summary in zip(loads, summaries, strict=True)
        ]
        info.sweep = saturation(points)
    if shm_bytes:
        info.shm_region_bytes = shm_bytes
    if cached and front is not None and front.lookups:
        info.cache = cache_summary(front, engine_cache, cache_bytes, workload, len(loads[0][2]))
        measured["cache_frontend_bytes"] = metrics.measured("cache_frontend_bytes", [front.held_bytes])
        measured["cache_engine_bytes"] = metrics.measured("cache_engine_bytes", [engine_cache["cache_bytes"]])
        measured["cache_evictions"] = metrics.measured("cache_evictions", [front.evictions])
    return Outcome(measured, info)


def cache_summary(
    front: cache.FrontendCache, engine: dict[str, int], capacity: int, workload: Workload, sent: int
) -> dict[str, Any]:
    """``IpcInfo.cache``: the mode, each side's capacity, the hit ratio the workload defines for the
    requests of the first load (None for a workload that defines none), and the frontend's counts.
    Over lru the engine's evictions must be the frontend's: the two LRUs mirror each other."""
    disagreement = cache.mirror_disagreement(front, engine.get("cache_evictions"))
    if disagreement is not None:
        raise IntegrityError(disagreement)
    defined = workload.defined_hit_ratio(sent) if hasattr(workload, "defined_hit_ratio") else None
    return {
        "mode": front.mode,
        "capacity_bytes": capacity,
        "defined_hit_ratio": defined,
        "lookups": front.lookups,
        "hits": front.hits,
    }


def _settings_info(cfg: Settings) -> dict[str, Any]:
    settings = dataclasses.asdict(cfg)
    settings["rates"] = [_rate_text(r) for r in cfg.rates]  # JSON has no infinity
    return settings


def _rate_text(rate: float) -> str | float:
    return "inf" if math.isinf(rate) else rate


# ---- option values (ValueError says why one is refused) --------------------------


def _rates(text: str) -> tuple[float, ...]:
    """``40`` or a sweep ``10,40,160,inf``: each > 0 or 'inf', none twice."""
    rates = tuple(float(part) for part in text.split(","))
    bad = [r for r in rates if not r > 0]
    if bad or not rates:
        raise ValueError(f"each rate must be > 0 or 'inf', got {text!r}")
    if len(set(rates)) != len(rates):
        raise ValueError(f"a rate is given twice in {text!r}")
    return rates


def _positive(text: str) -> float:
    """A finite number > 0 (a burstiness, milliseconds, megabytes: the option's help says which)."""
    value = float(text)
    if not 0 < value < math.inf:
        raise ValueError(f"must be a finite number > 0, got {text!r}")
    return value


def _step_ms(text: str) -> float:
    value = float(text)
    if not 0 <= value <= MAX_STEP_S * 1e3:
        raise ValueError(f"must be in [0, {MAX_STEP_S * 1e3:g}], got {text!r}")
    return value


def _engine_url(text: str) -> str:
    transport.tcp_addresses(text)  # ValueError says what is wrong with it
    return text


class Ipc(Scenario):
    name = "ipc"
    description = (
        "frontend and engine processes over real ZeroMQ under load: TTFT, ITL, E2E, floor, integrity"
    )
    figures = (
        Figure("cdf", "Time to first token, per request", (("ttft_s", MEDIAN), ("ttft_s", P99))),
        Figure("cdf", "Inter-token latency, per output", (("itl_s", MEDIAN), ("itl_s", P99))),
        Figure(
            "images",
            "TTFT and ITL against images per request: median and p99",
            (("ttft_s", MEDIAN), ("ttft_s", P99), ("itl_s", MEDIAN), ("itl_s", P99)),
        ),
        Figure(
            "bars",
            "TTFT's parts, per request: ingress (encode → engine decoded), queue, first step; egress",
            (("ingress_s", MEDIAN), ("ingress_s", P99), ("queue_s", MEDIAN), ("egress_s", MEDIAN)),
        ),
        Figure("bars", "Throughput", (("req_per_s", MEDIAN), ("payload_gb_per_s", MEDIAN))),
        Figure(
            "batch",
            "The output path: the frontend's decode per step and egress against batch (step budget dashed)",
            (("step_decode_s", MEDIAN), ("step_decode_s", P99), ("egress_s", MEDIAN), ("egress_s", P99)),
        ),
        Figure(
            "size",
            "Ingress against tensor size (tensor-N): p50 and p99, thresholds marked",
            (("ingress_s", MEDIAN), ("ingress_s", P99)),
            table=False,
        ),
        Figure(
            "sweep",
            "Against offered load (--rate sweep): TTFT, ingress, admitted rate and goodput",
            (("ttft_s", MEDIAN),),
            table=False,
        ),
        caching.FIGURE,
    )
    dimensions = (TRANSPORT, caching.CACHE)
    interleaved = True
    options: ClassVar[tuple[Option, ...]] = (
        Option("--num-prompts", "ipc_num_prompts", positive_int, "requests per case (default by profile)"),
        Option(
            "--rate",
            "ipc_rates",
            _rates,
            "requests per second, 'inf' = all at once; a list (10,40,160,inf) sweeps the offered load",
        ),
        Option(
            "--ttft-slo-ms",
            "ipc_ttft_slo_ms",
            _positive,
            f"goodput counts requests with TTFT within this ({TTFT_SLO_MS:g})",
        ),
        Option("--burstiness", "ipc_burstiness", _positive, "gamma shape of arrival gaps (1 = Poisson)"),
        Option("--max-concurrency", "ipc_max_concurrency", positive_int, "requests in flight at most"),
        Option("--step-ms", "ipc_step_ms", _step_ms, "simulated model time per engine step (5)"),
        Option(
            "--shm-mb",
            "ipc_shm_mb",
            _positive,
            "shared-memory region over --transport shm, in MB (default: two of the largest requests)",
        ),
        Option(
            "--engine",
            "ipc_engine",
            _engine_url,
            "drive a `serbench engine` at tcp://HOST:PORT instead of forking one",
        ),
        Option(
            "--engine-cpu",
            "ipc_engine_cpu",
            str,
            "a forked engine fed one request at a time over ZeroMQ: on the frontend's CPU (shared, "
            "default: steadier on a VM) or wherever the scheduler puts it (free)",
            choices=ENGINE_CPUS,
        ),
        caching.CACHE_MB,
        *device.OPTIONS,
        MEASURE,
    )

    def cases(
        self, backends: list[str], workloads: list[str], chosen: Mapping[str, tuple[Any, ...]] | None = None
    ) -> list[Case]:
        """Every backend × transport × cache × workload; ``none`` is an uncached case's key."""
        return caching.with_cache(super().cases(backends, workloads, chosen))

    # Each visit's requests share one engine process, whose level moves TTFT from visit to visit:
    # the visits, more than their requests, set a between-backend ratio's noise; payloads take
    # ``MORE_VISITS`` (docs/measurements/2026-12-06-ipc-in-turns.md).
    min_rounds = 6

    def rounds(self, case: Case, profile: Profile) -> int:
        """Interleaved visits for the profile's own load of requests, at least ``min_rounds`` where
        the profile has rounds (``MORE_VISITS`` for a payload): one at a
        time (the payload default), where each request is measured alone, and text at its default
        rate, a load light enough (a TTFT well under the time between arrivals) that each visit's
        share of it queues as the whole would. A rate or concurrency asked for (offered load is
        their point), a cached case (its hit ratio follows the whole sequence of requests) and the
        way back (one batch streamed) are measured whole."""
        workload = get_workload(case.workload)
        cfg = settings_for(profile, workload, case.link, caching.mode(case))
        asked = any(profile.options.get(key) is not None for key in ("ipc_rates", "ipc_max_concurrency"))
        whole = workload.kind != "request" or asked or cfg.cache != "none" or counting(profile)
        planned = 1 if whole else super().rounds(case, profile)
        if planned > 1 and workload.payload_bytes():
            return max(planned, MORE_VISITS)
        return planned

    def unsupported(self, case: Case, profile: Profile) -> str | None:
        """A backend with a channel (``serializers.shared_channel``) where no engine is forked from
        this process; counting instructions, the cases whose path is not counted
        (``ipc_counted.not_counted``)."""
        counted = counting(profile) and instructions.launched()
        if has_channel(get_serializer(case.backend)):
            if profile.options.get("ipc_engine"):
                return (
                    f"{case.backend} shares a channel with the engine it forks: "
                    "not with one started apart (--engine)"
                )
            if counted:
                return (
                    f"instructions: {case.backend}'s channel joins a process and its fork, "
                    "not the two halves counted in one"
                )
        if not counted:
            return None
        workload = get_workload(case.workload)
        cfg = settings_for(profile, workload, case.link, caching.mode(case))
        return ipc_counted.not_counted(cfg.cache, workload.kind, cfg.engine, cfg.staging)

    def tables(self, data: Results) -> list[Table]:
        """The output path's verdict: per backend row and workload family, the largest measured
        batch whose median decode CPU per step fits the step (``stream.fitting_batches``)."""
        fitting = stream.fitting_batches(data.of(self.name))
        if not fitting:
            return caching.savings(data, self.name)
        rows = [
            [row, family, str(cell["fits"] or "none"), str(cell["over"] or "none measured")]
            for (row, family), cell in fitting.items()
        ]
        headers = ["backend", "workload", "decode fits the step at", "first batch over it"]
        note = "the largest measured batch whose median decode CPU per step fits the step"
        return [
            Table("largest batch whose decode fits the step", headers, rows, note),
            *caching.savings(data, self.name),
        ]

    def check(self, profile: Profile) -> None:
        """The device options: checked here for a forked engine, by the engine itself for ``--engine``."""
        if profile.options.get("ipc_engine"):
            device.staging(profile)
        else:
            device.check(profile)

    def run(self, case: Case, profile: Profile) -> Outcome:
        workload = get_workload(case.workload)
        cfg = settings_for(profile, workload, case.link, caching.mode(case))
        if workload.kind == "outputs":  # the way back: the engine streams the workload's steps
            return stream.measure(case.backend, case.workload, cfg.step_s, cfg.engine, cfg.transport)
        # counted under valgrind (where a clock would measure valgrind), else timed with a note
        if counting(profile) and instructions.unavailable() is None:
            return ipc_counted.measure(case.backend, case.workload, cfg.transport)
        return measure(case.backend, case.workload, cfg)
