"""The ipc scenario's load: requests on a schedule, every output checked, latency metrics.

``arrival_offsets`` draws the schedule as vLLM's serving benchmark does; ``run_load`` sends the
``RequestPool``'s requests on it over an ``EngineLink`` and takes every output, keeping one
``Tracked`` per request; ``account`` and ``acknowledge`` check each output and ack as it arrives
(value, position and end of every token: integrity is total, not sampled); ``load_metrics``
turns the record into TTFT (and its parts), ITL, E2E and throughput; ``sweep_point``
summarizes one rate of a rate sweep.

TTFT's parts come from the engine's stamps in each outputs header (``engine.protocol``):
``encode_s`` (the frontend's encode), ``ingress_s`` (just before encode → the engine holds the
decoded request), ``queue_s`` (→ the first step that schedules it), ``first_step_s`` (that step
→ its output decoded at the frontend); ``egress_s`` is each outputs message's way back. They
subtract one process's clock from another's, so they exist only for a local engine.

With a multimodal cache (``EngineLink.cache``, docs/cache.md) each request goes through the
frontend's cache before its encode (inside ``encode_s``), the engine's ack must report found
what the frontend sent as references, and ``load_metrics`` adds the hit ratio, the bytes each
request moved, and TTFT and ingress split by hit and miss.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from serbench.links import cache
from serbench.model import metrics
from serbench.model.errors import IntegrityError
from serbench.model.results import Serving, Sweep, SweepPoint
from serbench.model.stats import Measurement
from serbench.scenarios.engine.client import STALL_TIMEOUT_S, EngineLink, Sender
from serbench.scenarios.engine.protocol import Control, clock, frames_checksum, request_checksum
from serbench.serializers import Serializer
from serbench.workloads import Workload, output_token
from serbench.workloads.messages import EngineCoreOutputs, EngineCoreRequest, FlatEngineCoreOutputs
from serbench.workloads.tree import payload_bytes

# Distinct payload requests built per case; beyond, they repeat under new ids (each arrives in
# fresh engine memory all the same). Building them is not timed, but costs the run in proportion.
POOL_BYTES = 1 << 27


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

    def __init__(self, workload: Workload, count: int, fresh: bool = False) -> None:
        per_request = max(1, workload.payload_bytes())
        distinct = max(1, min(count, POOL_BYTES // per_request))
        self.workload = workload
        self.fresh = fresh
        self.requests = list(workload.requests(distinct))
        self.checksums = [request_checksum(r, workload) for r in self.requests]
        self.encoded: list[int] = []
        self.known: dict[str, int] = {}  # digests of cacheable tensors, by cache key

    def encode_checksums(self, serializer: Serializer) -> None:
        """The CRC of each distinct request's frames as ``serializer`` encodes it, before the load:
        sent beside the request, it lets the engine tell bytes changed in flight from a codec bug."""
        self.encoded = [frames_checksum(serializer.encode(r)) for r in self.requests]

    def encoded_checksum(self, index: int) -> int | None:
        """Request ``index``'s frames CRC; None for a repeat, whose request id (header) differs."""
        return self.encoded[index] if index < len(self.encoded) else None

    def get(self, index: int) -> tuple[EngineCoreRequest, int]:
        """Request ``index`` (a repeat gets an id of its own; with ``fresh``, the workload's own
        request ``index``, built now: a cache must meet the images the workload defines) and its
        checksum."""
        if self.fresh and index >= len(self.requests):
            request = self.workload.request(index)
            return request, request_checksum(request, self.workload)
        slot = index % len(self.requests)
        base = self.requests[slot]
        if index == slot:
            return base, self.checksums[slot]
        rid = f"{self.workload.about(base).request_id}#{index}"
        return self.workload.renamed(base, rid), self.checksums[slot]


@dataclass
class Tracked:
    """What the frontend knows of one request in flight (times from ``protocol.clock``).

    ``created`` is just before its encode; ``decoded`` and ``scheduled`` are
    the engine's stamps (``first`` of the outputs header with its first token).
    """

    created: float
    max_tokens: int
    encode_s: float = 0.0
    times: list[float] = field(default_factory=list)
    acked: float | None = None
    to_device: float | None = None  # the engine's stage after decode, when it has a device
    decoded: float | None = None
    scheduled: float | None = None
    checked: bool = False  # the engine checked it and let it go (asked for with an ack)
    sent_bytes: int = 0  # frames sent, plus what the cache wrote to its store for it
    payload_bytes: int = 0  # its own tensor bytes (a turn of a conversation carries fewer than the last)
    lookups: int = 0  # cacheable tensors (with a cache)
    hits: int = 0  # of them, sent as references
    engine_hits: int | None = None  # of them, found by the engine (its ack)

    @property
    def hit(self) -> bool:
        """Every cacheable tensor a hit: nothing of the payload travelled."""
        return bool(self.lookups) and self.hits == self.lookups

    @property
    def finished(self) -> bool:
        return len(self.times) >= self.max_tokens


def account(
    outputs: EngineCoreOutputs | FlatEngineCoreOutputs, tracked: dict[str, Tracked], at: float
) -> int:
    """Check one outputs message token by token (either layout); returns how many requests it finished."""
    finished = 0
    for rid, new_token_ids, finish_reason in outputs.entries():
        state = tracked.get(rid)
        if state is None:
            raise IntegrityError(f"output for a request never sent: {rid!r}")
        if state.finished:
            raise IntegrityError(f"output after the end of request {rid!r} (duplicated message?)")
        position = len(state.times)
        expected = output_token(rid, position)
        if new_token_ids != [expected]:
            raise IntegrityError(
                f"request {rid!r} token {position}: got {new_token_ids}, expected [{expected}]"
            )
        state.times.append(at)
        last = state.finished
        if (finish_reason is not None) != last:
            raise IntegrityError(f"request {rid!r}: finish_reason {finish_reason!r} at token {position}")
        finished += last
    return finished


def stamp(ctrl: Control, tracked: dict[str, Tracked]) -> None:
    """Keep the engine's stamps of the requests whose first token this outputs message holds."""
    for rid, (decoded, scheduled) in ctrl.data.get("first", {}).items():
        state = tracked.get(rid)
        if state is None or state.decoded is not None:
            raise IntegrityError(f"unexpected first-token stamp for {rid!r}")
        state.decoded, state.scheduled = decoded, scheduled


def acknowledge(ctrl: Control, tracked: dict[str, Tracked], at: float) -> None:
    """Note when the engine had the request ready (decoded, and on its device if it has one)
    and how long its device stage took; once per request."""
    state = tracked.get(ctrl.data.get("request_id"))
    if state is None or state.acked is not None:
        raise IntegrityError(f"unexpected ack for {ctrl.data.get('request_id')!r}")
    state.acked = at
    state.to_device = ctrl.data.get("to_device_s")
    if "cache_hits" in ctrl.data:
        state.engine_hits = ctrl.data["cache_hits"]
        if (ctrl.data.get("cache_lookups"), state.engine_hits) != (state.lookups, state.hits):
            raise IntegrityError(
                f"request {ctrl.data.get('request_id')!r}: the engine's cache found {state.engine_hits} of "
                f"{ctrl.data.get('cache_lookups')} tensors, the frontend sent {state.hits} of {state.lookups}"
            )


def checked(ctrl: Control, tracked: dict[str, Tracked]) -> None:
    """Note that the engine checked a finished request and dropped it; once per finished request."""
    state = tracked.get(ctrl.data.get("request_id"))
    if state is None or not state.finished or state.checked:
        raise IntegrityError(f"unexpected 'checked' for {ctrl.data.get('request_id')!r}")
    state.checked = True


def run_load(
    link: EngineLink,
    serializer: Serializer,
    pool: RequestPool,
    offsets: Sequence[float],
    max_concurrency: int | None,
    sender: Sender,
    ack: bool,
    between: Callable[[], Any] | None = None,
    first: int = 0,
    more: Callable[[int, float], bool] | None = None,
) -> tuple[dict[str, Tracked], list[float], float]:
    """Send request i at ``offsets[i]`` s, take every output; (per-request record, egress, duration).

    At most ``max_concurrency`` requests are in flight (None: no cap). With
    ``ack`` the engine acknowledges each request once decoded, and a request
    stays in flight until the engine has checked and dropped it after its
    last token (``checked``): a check never runs beside a later request
    sent one at a time, and that request's memory can be what the last one
    freed, as in a serving engine; ``between``
    runs before each request sent while none is in flight (an interleaved
    reference measurement that disturbs no request). Requests are the pool's
    ``first``, ``first + 1``, ...: a later load of the same session sends
    ids of its own. ``more(sent, elapsed_s)``, asked whenever every request
    sent is done and none is waiting, says whether to send one more at once
    (a time budget). ``egress`` holds, per outputs message, engine encode →
    frontend decoded.
    """
    front = link.cache
    offsets = list(offsets)
    waiting = deque(range(len(offsets)))
    tracked: dict[str, Tracked] = {}
    egress: list[float] = []
    active = 0
    start = last_progress = clock()
    while True:
        if not waiting and not active:
            if more is None or not more(len(tracked), clock() - start):
                break
            offsets.append(clock() - start)
            waiting.append(len(offsets) - 1)
        can_send = max_concurrency is None or active < max_concurrency
        while waiting and can_send and offsets[waiting[0]] <= clock() - start:
            if between is not None and not active:
                between()
            index = first + waiting.popleft()
            request, checksum = pool.get(index)
            encoded = pool.encoded_checksum(index)
            known = cache.digests(request, pool.known) if front else None
            tensors = payload_bytes(request)
            created = clock()
            message, prepared = front.prepare(request, known) if front else (request, cache.Prepared())
            frames = serializer.encode(message)
            encode_s = clock() - created
            link.send("request", frames, sender, checksum=checksum, encoded=encoded, ack=ack)
            about = pool.workload.about(request)
            state = Tracked(created, about.max_tokens, encode_s, lookups=prepared.lookups)
            state.hits, state.payload_bytes = prepared.hits, tensors
            state.sent_bytes = sum(memoryview(f).nbytes for f in frames) + prepared.stored_bytes
            tracked[about.request_id] = state
            del request, message, frames
            active += 1
            can_send = max_concurrency is None or active < max_concurrency
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
        if ctrl is not None and ctrl.kind == "checked":
            checked(ctrl, tracked)
            if front is not None:
                front.done(ctrl.data["request_id"])
                link.engine_cache = {k: v for k, v in ctrl.data.items() if k.startswith("cache_")}
            active -= 1
            last_progress = now
            continue
        if ctrl is None or ctrl.kind != "outputs":
            raise IntegrityError(f"unexpected {ctrl.kind if ctrl else 'empty'!r} message during the load")
        try:
            outputs = serializer.decode(frames, pool.workload.message_type)
        except Exception as exc:
            raise IntegrityError(
                f"frontend could not decode an outputs message: {type(exc).__name__}: {exc}"
            ) from exc
        decoded = clock()
        egress.append(decoded - ctrl.data.get("sent", decoded))
        stamp(ctrl, tracked)
        finished = account(pool.workload.in_model(outputs), tracked, decoded)
        active -= 0 if ack else finished
        last_progress = now
    return tracked, egress, clock() - start


def _lost(tracked: dict[str, Tracked]) -> str:
    unfinished = {rid: t for rid, t in tracked.items() if not t.finished}
    missing = sum(t.max_tokens - len(t.times) for t in unfinished.values())
    first = ", ".join(list(unfinished)[:3])
    return (
        f"no output for {STALL_TIMEOUT_S:g} s with {len(unfinished)} request(s) unfinished "
        f"({missing} tokens missing; e.g. {first}): messages lost"
    )


@dataclass
class LoadSummary:
    """A finished load as ``load_metrics`` reads it: its metrics, and what ``results.IpcInfo``
    says of it (the serving benchmark's summary, the load's length and its output tokens)."""

    metrics: dict[str, Measurement]
    serving: Serving
    duration_s: float
    output_tokens: int


def load_metrics(
    tracked: dict[str, Tracked], egress: list[float], duration: float, payload: bool, same_clock: bool
) -> LoadSummary:
    """TTFT and its parts, ITL, E2E and throughput metrics (and their serving summary) from a finished
    load; the payload GB/s where the requests carry tensors (``payload``). The parts that subtract
    the engine's stamps need ``same_clock`` (a local engine)."""
    states = list(tracked.values())
    ttft = [t.times[0] - t.created for t in states]
    e2e = [t.times[-1] - t.created for t in states]
    itl = [b - a for t in states for a, b in zip(t.times, t.times[1:], strict=False)] or [0.0]
    tokens = sum(len(t.times) for t in states)
    measured = {
        "ttft_s": metrics.measured("ttft_s", ttft),
        "itl_s": metrics.measured("itl_s", itl),
        "e2e_s": metrics.measured("e2e_s", e2e),
        "encode_s": metrics.measured("encode_s", [t.encode_s for t in states]),
        "req_per_s": metrics.measured("req_per_s", [len(tracked) / duration]),
        "output_tokens_per_s": metrics.measured("output_tokens_per_s", [tokens / duration]),
    }
    p99 = metrics.statistic("ttft_p99_s", ttft)
    if p99 is not None:
        measured["ttft_p99_s"] = p99
    if same_clock:
        measured["ingress_s"] = metrics.measured("ingress_s", [t.decoded - t.created for t in states])
        measured["queue_s"] = metrics.measured("queue_s", [t.scheduled - t.decoded for t in states])
        first_step = [t.times[0] - t.scheduled for t in states]
        measured["first_step_s"] = metrics.measured("first_step_s", first_step)
        measured["egress_s"] = metrics.measured("egress_s", egress)
    if payload:  # each request's own tensor bytes: the turns of a conversation differ
        rates = [t.payload_bytes / (t.acked - t.created) / 1e9 for t in states]
        measured["payload_gb_per_s"] = metrics.measured("payload_gb_per_s", rates)
        staged = [t.to_device for t in tracked.values() if t.to_device is not None]
        if staged:
            measured["to_device_s"] = metrics.measured("to_device_s", staged)
    if any(t.lookups for t in states):
        measured.update(cache_metrics(states, same_clock))
    return LoadSummary(measured, Serving.of(ttft, itl, e2e), duration, tokens)


def cache_metrics(states: Sequence[Tracked], same_clock: bool) -> dict[str, Measurement]:
    """A cached load's metrics: the hit ratio the engine measured (hits / cacheable tensors), the
    bytes each request moved to the engine, and TTFT (and ingress) of hits (every cached tensor
    a hit), partial hits (some) and misses (none) apart: a conversation's turns are partial."""
    lookups = sum(t.lookups for t in states)
    found = sum(t.engine_hits if t.engine_hits is not None else t.hits for t in states)
    measured = {
        "hit_ratio": metrics.measured("hit_ratio", [found / lookups]),
        "request_bytes": metrics.measured("request_bytes", [t.sent_bytes for t in states]),
    }
    kinds = {
        "hit": [t for t in states if t.hit],
        "partial": [t for t in states if 0 < t.hits < t.lookups],
        "miss": [t for t in states if not t.hits],
    }
    for kind, group in kinds.items():
        if group:
            measured[f"ttft_{kind}_s"] = metrics.measured(
                f"ttft_{kind}_s", [t.times[0] - t.created for t in group]
            )
            if same_clock:
                ingress = [t.decoded - t.created for t in group]
                measured[f"ingress_{kind}_s"] = metrics.measured(f"ingress_{kind}_s", ingress)
    return measured


def sweep_point(
    rate: float,
    offsets: Sequence[float],
    tracked: dict[str, Tracked],
    duration: float,
    measured: dict[str, Measurement],
    ttft_slo_s: float,
) -> SweepPoint:
    """One rate of a sweep: offered and achieved load, goodput, TTFT and ingress.

    ``offered_per_s`` is the schedule's own rate ((n-1) / last arrival; a Poisson
    draw of n requests is off its nominal rate by about 1/sqrt(n)), ``admitted_per_s``
    the rate the requests got their first token at ((n-1) / (last first token - first
    request created)): below the offered rate, the engine (or the frontend) no
    longer keeps up — saturated. ``goodput_per_s``: requests with TTFT within
    ``ttft_slo_s`` per second of the load (vLLM's goodput). An infinite rate is
    ``"inf"`` and an infinite offered or admitted rate None (JSON has no infinity).
    """
    states = list(tracked.values())
    span = max(t.times[0] for t in states) - min(t.created for t in states)
    admitted = (len(states) - 1) / span if span > 0 else math.inf
    offered = (len(offsets) - 1) / offsets[-1] if offsets[-1] > 0 else math.inf
    good = sum(t.times[0] - t.created <= ttft_slo_s for t in states)
    return SweepPoint(
        rate="inf" if math.isinf(rate) else rate,
        offered_per_s=None if math.isinf(offered) else offered,
        admitted_per_s=None if math.isinf(admitted) else admitted,
        goodput_per_s=good / duration,
        ttft_slo_s=ttft_slo_s,
        metrics={k: measured[k] for k in ("ttft_s", "ingress_s", "req_per_s") if k in measured},
    )


def saturation(points: Sequence[SweepPoint], keep_up: float = 0.9) -> Sweep:
    """A sweep's points and where it saturates: the lowest finite offered rate whose admitted rate
    falls below ``keep_up`` of it (None: none did), and the capacity, the admitted rate with
    everything sent at once (None without a rate ``inf``)."""
    finite = [p for p in points if p.rate != "inf" and p.offered_per_s and p.admitted_per_s]
    behind = [p.rate for p in finite if p.admitted_per_s < keep_up * p.offered_per_s]
    capacity = next((p.admitted_per_s for p in points if p.rate == "inf"), None)
    return Sweep(
        points=list(points), saturated_at=min(behind, default=None), capacity_per_s=capacity, keep_up=keep_up
    )
