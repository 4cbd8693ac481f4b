"""The ipc scenario's load: requests on a schedule, every output checked, latency metrics.

``arrival_offsets`` draws the schedule as vLLM's serving benchmark does;
``run_load`` sends the ``RequestPool``'s requests on it over an
``EngineLink`` and takes every output, keeping one ``Tracked`` per request;
``account`` and ``acknowledge`` check each output and ack as it arrives
(value, position and end of every token: integrity is total, not sampled);
``load_metrics`` turns the record into TTFT, ITL, E2E and throughput.
"""

from __future__ import annotations

import math
import statistics
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec
import numpy as np

from serbench import metrics
from serbench.engine.client import STALL_TIMEOUT_S, EngineLink, Sender
from serbench.engine.protocol import Control, IntegrityError, frames_checksum, request_checksum
from serializers import Serializer
from workloads import Workload, output_token
from workloads.messages import EngineCoreOutputs, EngineCoreRequest

clock = time.perf_counter

POOL_BYTES = 1 << 29  # distinct payload requests kept in memory; beyond, they repeat


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
        self.encoded: list[int] = []

    def encode_checksums(self, serializer: Serializer) -> None:
        """The CRC of each distinct request's frames as ``serializer`` encodes it, before the load:
        sent beside the request, it lets the engine tell bytes changed in flight from a codec bug."""
        self.encoded = [frames_checksum(serializer.encode(r)) for r in self.requests]

    def encoded_checksum(self, index: int) -> int | None:
        """Request ``index``'s frames CRC; None for a repeat, whose request id (header) differs."""
        return self.encoded[index] if index < len(self.encoded) else None

    def get(self, index: int) -> tuple[EngineCoreRequest, int]:
        """Request ``index`` (a repeat gets an id of its own) and its checksum."""
        slot = index % len(self.requests)
        base = self.requests[slot]
        if index == slot:
            return base, self.checksums[slot]
        rid = f"{base.request_id}#{index}"
        return msgspec.structs.replace(base, request_id=rid), self.checksums[slot]


@dataclass
class Tracked:
    """What the frontend knows of one request in flight."""

    created: float
    max_tokens: int
    times: list[float] = field(default_factory=list)
    acked: float | None = None
    to_device: float | None = None  # the engine's stage after decode, when it has a device

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
    """Note when the engine had the request ready (decoded, and on its device if it has one)
    and how long its device stage took; once per request."""
    state = tracked.get(ctrl.data.get("request_id"))
    if state is None or state.acked is not None:
        raise IntegrityError(f"unexpected ack for {ctrl.data.get('request_id')!r}")
    state.acked = at
    state.to_device = ctrl.data.get("to_device_s")


def run_load(
    link: EngineLink,
    serializer: Serializer,
    pool: RequestPool,
    offsets: Sequence[float],
    max_concurrency: int | None,
    sender: Sender,
    ack: bool,
    between: Callable[[], Any] | None = None,
) -> tuple[dict[str, Tracked], float]:
    """Send request i at ``offsets[i]`` s, take every output; (per-request record, duration).

    At most ``max_concurrency`` requests are in flight (None: no cap). With
    ``ack`` the engine acknowledges each request once decoded; ``between``
    runs before each request sent while none is in flight (an interleaved
    reference measurement that disturbs no request).
    """
    pool.encode_checksums(serializer)
    waiting = deque(range(len(offsets)))
    tracked: dict[str, Tracked] = {}
    active = 0
    start = last_progress = clock()
    while waiting or active:
        can_send = max_concurrency is None or active < max_concurrency
        while waiting and can_send and offsets[waiting[0]] <= clock() - start:
            if between is not None and not active:
                between()
            index = waiting.popleft()
            request, checksum = pool.get(index)
            encoded = pool.encoded_checksum(index)
            created = clock()
            frames = serializer.encode(request)
            link.send("request", frames, sender, checksum=checksum, encoded=encoded, ack=ack)
            tracked[request.request_id] = Tracked(created, request.sampling_params.max_tokens)
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
    measured = {
        "ttft_s": metrics.measured("ttft_s", ttft),
        "ttft_p99_s": metrics.measured("ttft_p99_s", [np.percentile(ttft, 99)]),
        "itl_s": metrics.measured("itl_s", itl),
        "e2e_s": metrics.measured("e2e_s", e2e),
        "req_per_s": metrics.measured("req_per_s", [len(tracked) / duration]),
        "output_tokens_per_s": metrics.measured("output_tokens_per_s", [tokens / duration]),
    }
    if payload:
        transfers = [t.acked - t.created for t in tracked.values()]
        measured["payload_gb_per_s"] = metrics.measured(
            "payload_gb_per_s", [payload / s / 1e9 for s in transfers]
        )
        staged = [t.to_device for t in tracked.values() if t.to_device is not None]
        if staged:
            measured["to_device_s"] = metrics.measured("to_device_s", staged)
    serving = {"ttft": serving_summary(ttft), "itl": serving_summary(itl), "e2e": serving_summary(e2e)}
    return measured, {"serving": serving, "duration_s": duration, "output_tokens": tokens}
