"""memory: peak RSS of a frontend and an engine process while one request goes through.

One request of the workload goes encode → send → receive → decode → use (the engine checksums
every decoded tensor against the frontend's) between two processes over the case's transport
(``serbench.links.transport``; ``shm``: docs/shm.md). Each repetition forks a fresh frontend and
engine from the case's process, which built the request once; each side's peak RSS above its
own baseline, taken after setup, comes from the kernel (``serbench.probes.rss``). Setup
includes a warm-up pass on a miniature of the request: a forked process maps the shared-library
code it runs on first use, which a serving process has long paid, so it is not the serializer's.

``copies`` = the engine's extra peak bytes / payload bytes (1.0 = the receive buffer alone),
``copies_frontend`` the same for the frontend: machine-independent, so a zero-copy regression
moves them by whole units. RSS counts a shared page in both processes, so ``copies_total`` sums
both sides' extra PSS at the moment both hold the request: shared memory counts once there.
With ``--engine-device`` the engine stages the request on the device first, and
``pinned_bytes`` says how much page-locked (resident) host memory that filled. With a
multimodal cache the request measured is one that resends images, the requests before it having
gone through both sides' caches before the baselines. A msgpack backend whose spec leaves
``threshold`` at its default is measured twice, as given and with ``threshold=inf`` (zero-copy
off). docs/memory.md says how each of these is read.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import msgspec
import zmq

from serbench.links import cache, shm, transport
from serbench.model.errors import TransportTimeout
from serbench.model.metrics import measured
from serbench.model.profiles import Profile
from serbench.model.results import MemoryInfo, Phase, Verification
from serbench.model.specs import Spec, format_spec, parse_spec
from serbench.model.stats import Measurement
from serbench.model.views import MEDIAN, Figure
from serbench.probes.rss import Reading, Side, live_memory, measure, status_bytes
from serbench.runtime import lazy
from serbench.runtime.isolation import run_isolated
from serbench.scenarios import caching, device
from serbench.scenarios.base import TRANSPORT, Case, Option, Outcome, Scenario, positive_int
from serbench.scenarios.engine.protocol import frames_checksum, integrity_fault
from serbench.scenarios.engine.staging import Stager, Staging, recv_pinned
from serbench.serializers import Serializer, attached, conformance, get_serializer, shared_channel
from serbench.workloads import Workload, get_workload
from serbench.workloads.base import About
from serbench.workloads.tree import miniature, payload_bytes, payload_checksum

torch = lazy.torch(__name__)  # imported on first use (serbench.runtime.lazy)

RECV_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Repetitions:
    """Fresh frontend/engine pairs per case: at least ``least``, more while under ``budget_s``."""

    least: int
    most: int
    budget_s: float


# Peaks agree within a fraction of a MB from one repetition to the next, so
# the quick profile measures each case once; full repeats them.
REPETITIONS = {"quick": Repetitions(1, 1, 0.0), "full": Repetitions(3, 10, 30.0)}


def repetitions(profile: Profile) -> Repetitions:
    """``--memory-repetitions N`` exactly, else the profile's policy."""
    count = profile.options.get("memory_repetitions")
    return Repetitions(count, count, 0.0) if count else REPETITIONS.get(profile.name, REPETITIONS["quick"])


def zero_copy_off(spec: str) -> str | None:
    """The ``threshold=inf`` variant of a msgpack backend spec that leaves threshold at its default."""
    # Here, not at the top: the backend's module loads torch, which the command line's parsers
    # (the scenario's declarations) must not pay for.
    from serbench.serializers.msgpack_backend import MsgpackSerializer

    parsed = parse_spec(spec)
    if "threshold" in parsed.options or not isinstance(get_serializer(parsed), MsgpackSerializer):
        return None
    return format_spec(Spec(parsed.name, {**parsed.options, "threshold": "inf"}))


def stamp() -> tuple[float, int]:
    """(CLOCK_MONOTONIC, VmHWM): when a step ended and this process's peak RSS so far."""
    return time.monotonic(), status_bytes("VmHWM")


@dataclass(frozen=True)
class Sent:
    """A message, the checksum its receiver must find, the CRC of its frames as encoded, and how
    its workload reads a request (``Workload.about``)."""

    message: Any
    checksum: int
    encoded: int
    about: Callable[[Any], About]

    @classmethod
    def of(cls, message: Any, serializer: Serializer, workload: Workload) -> Sent:
        frames = serializer.encode(message)
        return cls(message, payload_checksum(message), frames_checksum(frames), workload.about)

    def check(self, decoded: Any, frames: list) -> None:
        """Use the decoded message: read every tensor byte, compare with what was sent; on a
        difference, say from the received ``frames`` whether the bytes or the decoder changed."""
        same_id = self.about(decoded).request_id == self.about(self.message).request_id
        if not same_id or payload_checksum(decoded) != self.checksum:
            raise ValueError(
                f"decoded request differs from the one sent (checksum mismatch): "
                f"{integrity_fault(frames, self.encoded)}"
            )


@dataclass(frozen=True)
class Route:
    """Everything both sides know before a repetition (``shm_bytes``: the region over shm, else 0)."""

    backend: str
    request: Sent
    warmup: Sent
    addresses: transport.Addresses
    staging: Staging | None = None
    sizes: list[int] | None = None  # the request's frame sizes, where the engine receives into pinned buffers
    shm_bytes: int = 0
    cache: Cached | None = None  # the multimodal cache, primed with the requests before this one
    channel: Any = None  # the backend's, shared by both sides (``serializers.shared_channel``)


@dataclass
class Cached:
    """A case's cache before its request: the frontend's half (primed with the requests before
    the measured one), what those requests were as sent (the engine replays them into its half),
    the measured request's digests, and over shm the store both sides inherit."""

    mode: str
    capacity: int
    front: cache.FrontendCache
    prelude: list[Any]
    known: dict[str, int]
    region: shm.Region | None = None

    @classmethod
    def prime(cls, mode: str, capacity: int, earlier: list[Any], request: Any) -> Cached:
        region = None
        if mode == "shm":
            region = shm.Region.create(capacity, populate=False)
            region.unlink()  # inherited by both sides through fork: no name to leave behind
        front = cache.FrontendCache(mode, capacity, cache.Store(region) if region else None)
        known: dict[str, int] = {}
        prelude = []
        for sent in earlier:
            message, _ = front.prepare(sent, cache.digests(sent, known))
            front.done(sent.request_id)
            prelude.append(message)
        return cls(mode, capacity, front, prelude, cache.digests(request, known), region)

    def engine_half(self) -> cache.EngineCache:
        """The engine's half, the requests before replayed into it (an lru keeps copies of its own)."""
        half = cache.EngineCache(self.mode, self.capacity, self.region, own=cache.owned)
        for message in self.prelude:
            half.resolve(message)
        return half


class Placed(msgspec.Struct, array_like=True):
    """Frame 0 of a message over shm: the region and where the placed frames are."""

    name: str
    size: int
    refs: list[list[int]]


def _gather_placed(frames: list) -> tuple[list, shm.Region]:
    """A message received over shm: its frames, the placed ones as views of the mapped region."""
    header = msgspec.msgpack.decode(memoryview(frames[0]), type=Placed)
    region = shm.Region.attach(header.name, header.size)
    region.unlink()  # mapped on both sides: nothing may outlive them
    return shm.gather(region.view, header.refs, frames[1:]), region


def _send_frames(push: zmq.Socket, frames: list, region: shm.Region | None) -> None:
    """Send a message; over shm its large frames are placed in ``region`` first."""
    if region is None:
        transport.send(push, frames)
        return
    with shm.Placer(region, threads=1) as placer:  # no copy threads in the process measured
        placement = placer.place(frames)
    header = msgspec.msgpack.encode(Placed(region.name, region.size, placement.refs))
    transport.send(push, [header, *placement.inline])


@dataclass
class EngineSide:
    """The engine side's state after setup."""

    serializer: Any
    stager: Stager | None
    pull: zmq.Socket
    push: zmq.Socket
    region: shm.Region | None = None  # over shm, once the request arrived
    cache: cache.EngineCache | None = None


def engine_setup(route: Route) -> EngineSide:
    """The serializer (and the device stage, its CUDA context made) warmed up on the miniature
    through decode, stage and use; sockets bound."""
    serializer = attached(get_serializer(route.backend), route.channel)
    stager = Stager(route.staging) if route.staging else None
    frames = serializer.encode(route.warmup.message)
    decoded = serializer.decode(frames, type(route.warmup.message))
    route.warmup.check(stager.stage(decoded).request if stager else decoded, frames)
    pull, push = transport.bind_engine(zmq.Context(), route.addresses)
    half = route.cache.engine_half() if route.cache else None
    return EngineSide(serializer, stager, pull, push, cache=half)


def engine_receive(route: Route, engine: EngineSide) -> tuple[list[Any], int]:
    """The request's frames, and how many of their bytes landed straight in pinned buffers."""
    if engine.stager is None or not engine.stager.receives_pinned:
        frames = transport.recv(engine.pull, RECV_TIMEOUT_S)
        if route.shm_bytes:
            frames, engine.region = _gather_placed(frames)
        return frames, 0
    if not engine.pull.poll(int(RECV_TIMEOUT_S * 1000), zmq.POLLIN):
        raise TransportTimeout(f"nothing received within {RECV_TIMEOUT_S:g} s")
    return recv_pinned(engine.pull, route.sizes), sum(route.sizes)


def engine_run(route: Route, engine: EngineSide) -> dict[str, Any]:
    """Receive, decode, stage (with a device), use (checksum every tensor), read PSS, then tell the
    frontend, holding the request until the frontend has read its PSS too.

    Returns each step's stamp, the (PSS, USS) held and, with a device, the bytes the engine pinned.
    """
    frames, pinned = engine_receive(route, engine)
    steps = {"received": stamp()}
    decoded = engine.serializer.decode(frames, type(route.request.message))
    found = None
    if engine.cache is not None:
        decoded, resolved = engine.cache.resolve(decoded)
        found = [resolved.found, resolved.lookups]
    steps["decoded"] = stamp()
    if engine.stager is not None:
        staged = engine.stager.stage(decoded)
        decoded, pinned = staged.request, pinned + staged.pinned_bytes
        steps["staged"] = stamp()
    route.request.check(decoded, frames)
    if found is not None:
        wrong = cache.verify_hits(decoded.request_id, resolved.hits)
        if wrong:
            raise ValueError(wrong)
    steps["used"] = stamp()
    holding = live_memory()
    transport.send(engine.push, [transport.PING])
    if not transport.is_ping(transport.recv(engine.pull, RECV_TIMEOUT_S)):
        raise ValueError("the frontend answered something other than its reading")
    del decoded, frames  # held until here on purpose
    engine.region = None
    steps["held"] = holding
    if found is not None:
        steps["cache"] = found
    return {**steps, "pinned_bytes": pinned} if engine.stager else steps


def frontend_setup(route: Route) -> tuple[Any, zmq.Socket, zmq.Socket, shm.Region | None]:
    """The serializer, warmed up on the miniature's encode; sockets connected; over shm, the
    region (not faulted in: its pages count when the payload is placed)."""
    serializer = attached(get_serializer(route.backend), route.channel)
    serializer.encode(route.warmup.message)
    push, pull = transport.connect_frontend(zmq.Context(), route.addresses)
    region = shm.Region.create(route.shm_bytes, populate=False) if route.shm_bytes else None
    return serializer, push, pull, region


def frontend_run(route: Route, state: tuple[Any, zmq.Socket, zmq.Socket, shm.Region | None]) -> dict:
    """Encode and send; keep the frames alive until the engine has used the request."""
    serializer, push, pull, region = state
    start = stamp()
    message = route.request.message
    if route.cache is not None:
        message, _ = route.cache.front.prepare(message, route.cache.known)
    frames = serializer.encode(message)
    encoded = stamp()
    _send_frames(push, frames, region)
    if not transport.is_ping(transport.recv(pull, RECV_TIMEOUT_S)):
        raise ValueError("the engine answered something other than its acknowledgement")
    acknowledged = stamp()
    holding = live_memory()
    transport.send(push, [transport.PING])
    if region is not None:
        region.unlink()
    return {"start": start, "encoded": encoded, "acknowledged": acknowledged, "held": holding}


def sides(route: Route) -> list[Side]:
    """Engine first: it binds, the frontend connects."""
    return [
        Side("engine", lambda: engine_setup(route), lambda state: engine_run(route, state)),
        Side("frontend", lambda: frontend_setup(route), lambda state: frontend_run(route, state)),
    ]


def phases(m: Reading) -> dict[str, Phase]:
    """Each step's end: seconds on the timeline's clock, and the side's peak above baseline by then."""
    return {
        step: Phase(t_s=round(value[0] - m.started, 4), peak_bytes=value[1] - side.baseline_bytes)
        for side in m.sides.values()
        for step, value in side.result.items()
        if isinstance(value, tuple) and step != "held"  # a stamp; pinned_bytes and held are not
    }


def summarize_runs(runs: list[Reading], payload: int) -> dict[str, Measurement]:
    """The memory metrics over repetitions (``copies`` only where there is a payload)."""
    engine = [m.sides["engine"].peak_bytes for m in runs]
    frontend = [m.sides["frontend"].peak_bytes for m in runs]
    metrics = {
        "peak_rss_engine_bytes": measured("peak_rss_engine_bytes", engine),
        "peak_rss_frontend_bytes": measured("peak_rss_frontend_bytes", frontend),
        "encode_to_use_s": measured(
            "encode_to_use_s",
            [m.sides["engine"].result["used"][0] - m.sides["frontend"].result["start"][0] for m in runs],
        ),
    }
    held = {name: [held_above(m, name)[0] for m in runs] for name in ("engine", "frontend")}
    metrics["pss_engine_bytes"] = measured("pss_engine_bytes", held["engine"])
    metrics["pss_frontend_bytes"] = measured("pss_frontend_bytes", held["frontend"])
    if payload:
        metrics["copies"] = measured("copies", [b / payload for b in engine])
        metrics["copies_frontend"] = measured("copies_frontend", [b / payload for b in frontend])
        total = [e + f for e, f in zip(held["engine"], held["frontend"], strict=True)]
        metrics["copies_total"] = measured("copies_total", [b / payload for b in total])
    found = [m.sides["engine"].result["cache"] for m in runs if "cache" in m.sides["engine"].result]
    if found:
        metrics["hit_ratio"] = measured("hit_ratio", [hits / max(lookups, 1) for hits, lookups in found])
    staged = [m.sides["engine"].result for m in runs if "staged" in m.sides["engine"].result]
    if staged:
        metrics["to_device_s"] = measured("to_device_s", [r["staged"][0] - r["decoded"][0] for r in staged])
        metrics["pinned_bytes"] = measured("pinned_bytes", [r["pinned_bytes"] for r in staged])
    return metrics


def held_above(m: Reading, name: str) -> tuple[int, int]:
    """A side's (PSS, USS) above its baseline while both sides held the request."""
    side = m.sides[name]
    pss, uss = side.result["held"]
    return pss - side.baseline_pss_bytes, uss - side.baseline_uss_bytes


def _free_tcp_addresses() -> transport.Addresses:
    """Two loopback tcp:// endpoints on ports free right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return transport.tcp_addresses(f"tcp://127.0.0.1:{port}")


def frame_sizes(serializer: Serializer, message: Any, staging: Staging | None) -> list[int] | None:
    """The encoded message's frame sizes where the engine receives into pinned buffers (it must
    size them before the bytes arrive; the encoding is deterministic), else None."""
    if staging is None or staging.pin != "receive":
        return None
    return [memoryview(frame).nbytes for frame in serializer.encode(message)]


def measured_index(workload: Any) -> int:
    """The request a memory case measures: one that resends images, if the workload has any (the
    last turn of the first conversation, else the second request), else the first."""
    if getattr(workload, "turns", 1) > 1:
        return workload.turns - 1
    return 1 if getattr(workload, "repeat", 0) else 0


def repeat(
    case: Case,
    plan: Repetitions,
    timeout_s: float,
    staging: Staging | None = None,
    cache_mb: float | None = None,
) -> tuple[list[Reading], int, Verification]:
    """The case's measurements (fresh sides and ipc folder each), its payload bytes, and the
    cost of verifying the request's round trip before them."""
    workload = get_workload(case.workload)
    cache.register(workload)
    index = measured_index(workload)
    message = workload.request(index)
    # In a child of its own: the round trip's temporaries (hundreds of MB for pickle) must not
    # stay in the heap the measured sides inherit, where they read as extra frontend copies.
    serializer = get_serializer(case.backend)
    check = (serializer, [message], "request", (case.backend, case.workload))
    verification = run_isolated(conformance.verify, check, timeout_s)
    # Encoded here before the sides share the backend's channel (if it has one): what these encodes
    # send there stays in this process, released as the sides' channel is given to it.
    request = Sent.of(message, serializer, workload)
    warmup = Sent.of(miniature(message), serializer, workload)
    sizes = frame_sizes(serializer, message, staging)
    shm_bytes = 0
    if case.link == "shm":
        if sizes is not None:
            raise ValueError("--pin receive reads ZeroMQ frames into pinned buffers: not over shm")
        shm.reclaim_orphans()
        shm_bytes = max(shm.placed_bytes(serializer.encode(message)), 1)
    mode = caching.mode(case)
    earlier = [workload.request(i) for i in range(index)] if mode != "none" else []
    capacity = round(cache_mb * 1e6) if cache_mb else max(2 * workload.payload_bytes(), 1 << 20)
    if mode != "none":  # the all-hit form of the request, round-tripped too
        refs = [cache.all_refs(message, mode)]
        verified = run_isolated(conformance.verify, (check[0], refs, f"request-{mode}", check[3]), timeout_s)
        verification.messages += verified.messages
        verification.seconds += verified.seconds
    runs: list[Reading] = []
    start = time.monotonic()
    while len(runs) < plan.most and (len(runs) < plan.least or time.monotonic() - start < plan.budget_s):
        primed = Cached.prime(mode, capacity, earlier, message) if mode != "none" else None
        with transport.ipc_dir() as folder, shared_channel(serializer) as channel:
            tcp = case.link == "tcp"
            addresses = _free_tcp_addresses() if tcp else transport.ipc_addresses(folder)
            route = Route(
                case.backend, request, warmup, addresses, staging, sizes, shm_bytes, primed, channel
            )
            runs.append(measure(sides(route), timeout_s))
        if primed is not None and primed.region is not None:
            primed.region.close()
    return runs, payload_bytes(message), verification


class Memory(Scenario):
    name = "memory"
    dimensions = (TRANSPORT, caching.CACHE)
    description = (
        "peak RSS above baseline of frontend and engine processes, encode → send → decode → use; "
        "adds each msgpack backend at its default threshold again with threshold=inf (zero-copy off)"
    )
    figures = (
        Figure(
            "images",
            "Peak RSS above baseline against images per request",
            (("peak_rss_engine_bytes", MEDIAN), ("peak_rss_frontend_bytes", MEDIAN)),
        ),
        Figure(
            "images",
            "Copies of the payload at peak (extra peak bytes / payload bytes)",
            (("copies", MEDIAN), ("copies_frontend", MEDIAN)),
        ),
        Figure(
            "timeline",
            "RSS above baseline during one request of the largest workload",
            (("peak_rss_engine_bytes", MEDIAN),),
            table=False,
        ),
    )
    options = (
        Option(
            "--memory-repetitions",
            "memory_repetitions",
            positive_int,
            "fresh frontend/engine pairs per case (default: quick 1, full 3-10 in 30 s)",
            metavar="N",
        ),
        caching.CACHE_MB,
        *device.OPTIONS,
    )

    def check(self, profile: Profile) -> None:
        device.check(profile)

    def cases(
        self, backends: list[str], workloads: list[str], chosen: Mapping[str, tuple[Any, ...]] | None = None
    ) -> list[Case]:
        """Each backend as given, each default-threshold msgpack one also with zero-copy off."""
        variants = [spec for b in backends for spec in (b, zero_copy_off(b)) if spec]
        return caching.with_cache(super().cases(variants, workloads, chosen))

    def run(self, case: Case, profile: Profile) -> Outcome:
        staging = device.staging(profile)
        cache_mb = profile.options.get("cache_mb")
        runs, payload, verification = repeat(
            case, repetitions(profile), profile.case_timeout_s, staging, cache_mb
        )
        first = runs[0]
        info = MemoryInfo(
            payload_bytes=payload,
            verification=verification,
            repetitions=len(runs),
            staging=staging.describe() if staging else None,
            baseline_bytes={name: [m.sides[name].baseline_bytes for m in runs] for name in first.sides},
            uss_above_baseline_bytes={name: [held_above(m, name)[1] for m in runs] for name in first.sides},
            phases=phases(first),
            timeline=first.timeline,
        )
        if case.cache:
            found = [m.sides["engine"].result["cache"] for m in runs]
            info.cache = {"mode": case.cache, "hits": [h for h, _ in found], "lookups": [n for _, n in found]}
        return Outcome(summarize_runs(runs, payload), info)
