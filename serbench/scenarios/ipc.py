"""ipc: a frontend and an engine process over real ZeroMQ, under load (docs/architecture.md, "Scenarios").

The case's own process is the frontend: it forks an engine
(``serbench.engine.server``) bound on a private ipc:// folder (or loopback
tcp://), or drives one started with ``serbench engine`` (``--engine
tcp://HOST:PORT``), through ``serbench.engine.client``. In one run it measures

1. the transport floor: round trips of the empty message through the same
   sockets and the engine's receive thread;
2. the load (``serbench.scenarios.load``): the workload's requests with
   Poisson/gamma arrivals at a rate (or all at once), optionally capped in
   concurrency, while the engine steps and streams one token per running
   request per step. TTFT runs from just before a request's encode to the
   decode of its first output. For payload workloads the engine also
   acknowledges each request as soon as it is decoded: payload bytes /
   (ack - created) is the payload GB/s. With ``--engine-device`` the
   engine stages each request on the device after decode
   (``serbench.scenarios.device``) and the request is ready — acknowledged,
   scheduled — only once it is there: TTFT and the payload GB/s then run
   until device-ready, and ``to_device_s`` is the stage itself;
3. for payload workloads, the same payload bytes streamed over a plain unix
   socket between two processes, and copied once within one (memcpy): the
   two references for that GB/s.

The link is the case's transport (``--transport``): ZeroMQ over ipc:// or
tcp://, or ``shm``, where the requests' large frames are placed in a
shared-memory region and only references cross the ipc:// socket
(``serbench.shm``, docs/shm.md).

Payload workloads default to one request at a time, so their TTFT and GB/s
are those of one request, not of a queue.

Integrity is not sampled, it is total: the engine checks every request
against a checksum computed outside the timed path, and the frontend checks
every output token (value, position, finish) — a corrupted, lost or
duplicated message fails the case with a message saying which.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

from serbench import conformance, metrics, shm, transport
from serbench.engine.client import Sender, open_link
from serbench.engine.protocol import MAX_STEP_S
from serbench.engine.staging import Staging
from serbench.profiles import Profile
from serbench.scenarios import device
from serbench.scenarios.base import Case, Option, Scenario, positive_int
from serbench.scenarios.load import RequestPool, arrival_offsets, load_metrics, run_load
from serializers import Serializer, get_serializer
from workloads import Workload, get_workload
from workloads.messages import EngineCoreRequest
from workloads.tree import array_bytes, is_array, iter_leaves

# Per profile and workload kind: what a run measures unless options say otherwise.
DEFAULTS: dict[tuple[str, str], dict[str, Any]] = {
    ("quick", "text"): {"num_prompts": 10, "rate": 40.0, "max_concurrency": None, "floor": 50},
    ("full", "text"): {"num_prompts": 1000, "rate": 40.0, "max_concurrency": None, "floor": 200},
    ("quick", "payload"): {"num_prompts": 1, "rate": math.inf, "max_concurrency": 1, "floor": 50},
    ("full", "payload"): {"num_prompts": 10, "rate": math.inf, "max_concurrency": 1, "floor": 200},
}


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
    shm_mb: float | None = None  # the shm region; None: two of the largest requests
    staging: Staging | None = None


def settings_for(profile: Profile, workload: Workload, link: str = transport.DEFAULT_KIND) -> Settings:
    """The profile's defaults for this kind of workload over ``link``, overridden by scenario options."""
    kind = "payload" if workload.payload_bytes() else "text"
    values = dict(DEFAULTS[(profile.name if profile.name == "full" else "quick", kind)], transport=link)
    opts = profile.options
    for key in ("num_prompts", "rate", "max_concurrency", "burstiness", "engine", "shm_mb"):
        if opts.get(f"ipc_{key}") is not None:
            values[key] = opts[f"ipc_{key}"]
    if opts.get("ipc_step_ms") is not None:
        values["step_s"] = opts["ipc_step_ms"] / 1e3
    return Settings(**values, staging=device.staging(profile))


@dataclass
class References:
    """The payload's two yardsticks, sampled side by side: a unix-socket stream and one memcpy."""

    stream: transport.UnixStream
    memcpy: transport.Memcpy
    unix: list[float] = field(default_factory=list)
    copy: list[float] = field(default_factory=list)

    def sample(self) -> None:
        self.unix.append(self.stream.sample())
        self.copy.append(self.memcpy.sample())


@contextlib.contextmanager
def _references(request: EngineCoreRequest, enabled: bool) -> Iterator[References | None]:
    """The references for the request's raw tensor bytes, or None when not wanted."""
    if not enabled:
        yield None
        return
    tensors = [array_bytes(leaf) for leaf in iter_leaves(request) if is_array(leaf)]
    with transport.UnixStream(tensors) as stream:
        yield References(stream, transport.Memcpy(tensors))


def region_bytes(serializer: Serializer, pool: RequestPool, megabytes: float | None) -> int:
    """The shm region: ``megabytes`` if given, else room for two of the largest requests (one in
    use, the next being written)."""
    if megabytes is not None:
        return round(megabytes * 1e6)
    largest = max(shm.placed_bytes(serializer.encode(request)) for request in pool.requests)
    return max(2 * largest, shm.INLINE_BELOW)


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
    verification = conformance.verify(serializer, pool.requests, "request")
    offsets = arrival_offsets(cfg.num_prompts, cfg.rate, cfg.burstiness, cfg.seed)
    payload = workload.payload_bytes()
    shm_bytes = region_bytes(serializer, pool, cfg.shm_mb) if cfg.transport == "shm" else 0
    references = _references(pool.get(0)[0], bool(payload) and not cfg.engine)
    staging = dataclasses.asdict(cfg.staging) if cfg.staging else None
    session = open_link(backend, cfg.step_s, cfg.engine, cfg.transport, shm_bytes, staging)
    with references as refs, session as (link, local):
        floor = transport.round_trip_floor(link.push, link.pull, cfg.floor)
        tracked, duration = run_load(
            link, serializer, pool, offsets, cfg.max_concurrency, sender, bool(payload), refs and refs.sample
        )
        while refs and len(refs.unix) < cfg.num_prompts:
            refs.sample()
    measured, info = load_metrics(tracked, duration, payload)
    measured["floor_rtt_s"] = metrics.measured("floor_rtt_s", floor)
    info.update(
        settings=_settings_info(cfg), payload_bytes=payload, local_engine=local, verification=verification
    )
    info["ttft_over_floor"] = measured["ttft_s"]["median"] / measured["floor_rtt_s"]["median"]
    if shm_bytes:
        info["shm_region_bytes"] = shm_bytes
    if refs:
        for name, samples in (("unix_gb_per_s", refs.unix), ("memcpy_gb_per_s", refs.copy)):
            measured[name] = metrics.measured(name, [payload / s / 1e9 for s in samples])
        rate = measured["payload_gb_per_s"]["median"]
        info["payload_vs_unix"] = rate / measured["unix_gb_per_s"]["median"]
        info["payload_vs_memcpy"] = rate / measured["memcpy_gb_per_s"]["median"]
    return {"metrics": measured, "info": info}


def _settings_info(cfg: Settings) -> dict[str, Any]:
    info = dataclasses.asdict(cfg)
    info["rate"] = "inf" if math.isinf(cfg.rate) else cfg.rate  # JSON has no infinity
    return info


# ---- option values (ValueError says why one is refused) --------------------------


def _rate(text: str) -> float:
    rate = float(text)
    if not rate > 0:
        raise ValueError(f"must be > 0 or 'inf', got {text!r}")
    return rate


def _burstiness(text: str) -> float:
    value = float(text)
    if not 0 < value < math.inf:
        raise ValueError(f"must be a finite number > 0, got {text!r}")
    return value


def _step_ms(text: str) -> float:
    value = float(text)
    if not 0 <= value <= MAX_STEP_S * 1e3:
        raise ValueError(f"must be in [0, {MAX_STEP_S * 1e3:g}], got {text!r}")
    return value


def _megabytes(text: str) -> float:
    value = float(text)
    if not 0 < value < math.inf:
        raise ValueError(f"must be a size in MB > 0, got {text!r}")
    return value


def _engine_url(text: str) -> str:
    transport.tcp_addresses(text)  # ValueError says what is wrong with it
    return text


class Ipc(Scenario):
    name = "ipc"
    description = (
        "frontend and engine processes over real ZeroMQ under load: TTFT, ITL, E2E, floor, integrity"
    )
    transports = transport.KINDS
    options: ClassVar[tuple[Option, ...]] = (
        Option("--num-prompts", "ipc_num_prompts", positive_int, "requests per case (default by profile)"),
        Option("--rate", "ipc_rate", _rate, "requests per second, 'inf' = all at once"),
        Option("--burstiness", "ipc_burstiness", _burstiness, "gamma shape of arrival gaps (1 = Poisson)"),
        Option("--max-concurrency", "ipc_max_concurrency", positive_int, "requests in flight at most"),
        Option("--step-ms", "ipc_step_ms", _step_ms, "simulated model time per engine step (5)"),
        Option(
            "--shm-mb",
            "ipc_shm_mb",
            _megabytes,
            "shared-memory region over --transport shm, in MB (default: two of the largest requests)",
        ),
        Option(
            "--engine",
            "ipc_engine",
            _engine_url,
            "drive a `serbench engine` at tcp://HOST:PORT instead of forking one",
        ),
        *device.OPTIONS,
    )

    def check(self, profile: Profile) -> None:
        """The device options: checked here for a forked engine, by the engine itself for ``--engine``."""
        if profile.options.get("ipc_engine"):
            device.staging(profile)
        else:
            device.check(profile)

    def run(self, case: Case, profile: Profile) -> dict[str, Any]:
        cfg = settings_for(profile, get_workload(case.workload), case.transport)
        return measure(case.spec, case.workload, cfg)
