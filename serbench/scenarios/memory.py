"""memory: peak RSS of a frontend and an engine process while one request goes through.

One request of the workload goes encode → send → receive → decode → use
(the engine checksums every decoded tensor against the frontend's) between
two processes over the ZeroMQ sockets of ``serbench.transport``, frames sent
and received with ``copy=False``. Each repetition forks a fresh frontend and
a fresh engine from the case's process, which built the request once; each
side's peak RSS above its own baseline, taken after setup, comes from the
kernel (``serbench.rss``).

Setup includes one warm-up pass of each side's half of the path on a
miniature of the request (every array cut to a few KiB): a forked process
maps the shared-library code it runs on first use (libtorch alone adds
~5 MB of RSS that way), and a serving process has long paid that, so it is
not the serializer's cost.

``copies`` = the engine's extra peak bytes / payload bytes (1.0 = the
receive buffer and nothing else), ``copies_frontend`` the same for the
frontend (0 = the payload left from the tensors' own memory). They are
machine-independent: a zero-copy regression moves them by whole units,
noise by a few hundredths. ``info.phases`` says when, and at what peak,
each step ended; ``info.timeline`` is the psutil RSS of both sides.

Variants (docs/architecture.md, "History": the flattened-MultiModalKwargs table): a msgpack
backend whose spec leaves ``threshold`` at its default is measured twice,
as given (zero-copy on) and with ``threshold=inf`` (zero-copy off). A spec
that names a threshold is measured as given, so ``--backends
msgspec-frombuffer:threshold=256`` asks for one row only.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import zmq

from serbench import transport
from serbench.metrics import measured
from serbench.profiles import Profile
from serbench.rss import Measurement, Side, measure, status_bytes
from serbench.scenarios.base import Case, Option, Scenario, positive_int
from serializers import get_serializer
from serializers.msgpack_backend import MsgpackSerializer
from specs import Spec, format_spec, parse_spec
from workloads import get_workload
from workloads.tree import is_array, map_leaves, payload_bytes, payload_checksum

MINIATURE_LAST_DIM = 256  # elements kept along an array's last dim (and 2 along the others)
RECV_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Repetitions:
    """Fresh frontend/engine pairs per case: at least ``least``, more while under ``budget_s``."""

    least: int
    most: int
    budget_s: float


# Peaks agree within a fraction of a MB from one repetition to the next, so
# the quick profile repeats only the cases that are cheap to repeat.
REPETITIONS = {"quick": Repetitions(1, 3, 0.3), "full": Repetitions(3, 10, 30.0)}


def repetitions(profile: Profile) -> Repetitions:
    """``--memory-repetitions N`` exactly, else the profile's policy."""
    count = profile.options.get("memory_repetitions")
    return Repetitions(count, count, 0.0) if count else REPETITIONS.get(profile.name, REPETITIONS["quick"])


def zero_copy_off(spec: str) -> str | None:
    """The ``threshold=inf`` variant of a msgpack backend spec that leaves threshold at its default."""
    parsed = parse_spec(spec)
    if "threshold" in parsed.options or not isinstance(get_serializer(parsed), MsgpackSerializer):
        return None
    return format_spec(Spec(parsed.name, {**parsed.options, "threshold": "inf"}))


def miniature(message: Any) -> Any:
    """``message`` with every array cut to a few KiB, same dtype and rank, still above
    the default zero-copy threshold: it runs the same code as the real request."""

    def shrink(leaf: Any) -> Any:
        if not is_array(leaf) or leaf.ndim == 0:
            return leaf
        part = leaf[(*(slice(0, 2) for _ in leaf.shape[:-1]), slice(0, MINIATURE_LAST_DIM))]
        return part.contiguous() if isinstance(part, torch.Tensor) else np.ascontiguousarray(part)

    return map_leaves(message, shrink)


def stamp() -> tuple[float, int]:
    """(CLOCK_MONOTONIC, VmHWM): when a step ended and this process's peak RSS so far."""
    return time.monotonic(), status_bytes("VmHWM")


@dataclass(frozen=True)
class Sent:
    """A message and the checksum its receiver must find."""

    message: Any
    checksum: int

    @classmethod
    def of(cls, message: Any) -> Sent:
        return cls(message, payload_checksum(message))

    def check(self, decoded: Any) -> None:
        """Use the decoded message: read every tensor byte, compare with what was sent."""
        if decoded.request_id != self.message.request_id or payload_checksum(decoded) != self.checksum:
            raise ValueError("decoded request differs from the one sent (checksum mismatch)")


@dataclass(frozen=True)
class Route:
    """Everything both sides know before a repetition."""

    backend: str
    request: Sent
    warmup: Sent
    addresses: transport.Addresses


def engine_setup(route: Route) -> tuple[Any, zmq.Socket, zmq.Socket]:
    """The serializer, warmed up on the miniature through decode and use; sockets bound."""
    serializer = get_serializer(route.backend)
    route.warmup.check(serializer.decode(serializer.encode(route.warmup.message), type(route.warmup.message)))
    pull, push = transport.bind_engine(zmq.Context(), route.addresses)
    return serializer, pull, push


def engine_run(route: Route, state: tuple[Any, zmq.Socket, zmq.Socket]) -> dict[str, Any]:
    """Receive, decode, use (checksum every tensor), then tell the frontend it is done."""
    serializer, pull, push = state
    frames = transport.recv(pull, RECV_TIMEOUT_S)
    received = stamp()
    decoded = serializer.decode(frames, type(route.request.message))
    decoded_at = stamp()
    route.request.check(decoded)
    used = stamp()
    transport.send(push, [transport.PING])
    return {"received": received, "decoded": decoded_at, "used": used}


def frontend_setup(route: Route) -> tuple[Any, zmq.Socket, zmq.Socket]:
    """The serializer, warmed up on the miniature's encode; sockets connected."""
    serializer = get_serializer(route.backend)
    serializer.encode(route.warmup.message)
    push, pull = transport.connect_frontend(zmq.Context(), route.addresses)
    return serializer, push, pull


def frontend_run(route: Route, state: tuple[Any, zmq.Socket, zmq.Socket]) -> dict[str, Any]:
    """Encode and send; keep the frames alive until the engine has used the request."""
    serializer, push, pull = state
    start = stamp()
    frames = serializer.encode(route.request.message)
    encoded = stamp()
    transport.send(push, frames)
    if not transport.is_ping(transport.recv(pull, RECV_TIMEOUT_S)):
        raise ValueError("the engine answered something other than its acknowledgement")
    return {"start": start, "encoded": encoded, "acknowledged": stamp()}


def sides(route: Route) -> list[Side]:
    """Engine first: it binds, the frontend connects."""
    return [
        Side("engine", lambda: engine_setup(route), lambda state: engine_run(route, state)),
        Side("frontend", lambda: frontend_setup(route), lambda state: frontend_run(route, state)),
    ]


def phases(m: Measurement) -> dict[str, dict[str, float]]:
    """Each step's end: seconds on the timeline's clock, and the side's peak above baseline by then."""
    return {
        step: {"t_s": round(at - m.started, 4), "peak_bytes": hwm - side.baseline_bytes}
        for side in m.sides.values()
        for step, (at, hwm) in side.result.items()
    }


def summarize_runs(runs: list[Measurement], payload: int) -> dict[str, dict]:
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
    if payload:
        metrics["copies"] = measured("copies", [b / payload for b in engine])
        metrics["copies_frontend"] = measured("copies_frontend", [b / payload for b in frontend])
    return metrics


def repeat(case: Case, plan: Repetitions, timeout_s: float) -> tuple[list[Measurement], int]:
    """The case's measurements (fresh sides and ipc folder each) and its payload bytes."""
    message = get_workload(case.workload).request(0)
    request, warmup = Sent.of(message), Sent.of(miniature(message))
    runs: list[Measurement] = []
    start = time.monotonic()
    while len(runs) < plan.most and (len(runs) < plan.least or time.monotonic() - start < plan.budget_s):
        with transport.ipc_dir() as folder:
            route = Route(case.backend, request, warmup, transport.ipc_addresses(folder))
            runs.append(measure(sides(route), timeout_s))
    return runs, payload_bytes(message)


class Memory(Scenario):
    name = "memory"
    description = (
        "peak RSS above baseline of frontend and engine processes, encode → send → decode → use; "
        "adds each msgpack backend at its default threshold again with threshold=inf (zero-copy off)"
    )
    options = (
        Option(
            "--memory-repetitions",
            "memory_repetitions",
            positive_int,
            "fresh frontend/engine pairs per case (default: quick 1-3 within 0.3 s, full 3-10 in 30 s)",
            metavar="N",
        ),
    )

    def cases(self, backends: list[str], workloads: list[str]) -> list[Case]:
        """Each backend as given, each default-threshold msgpack one also with zero-copy off."""
        variants = [spec for b in backends for spec in (b, zero_copy_off(b)) if spec]
        return super().cases(variants, workloads)

    def run(self, case: Case, profile: Profile) -> dict[str, Any]:
        runs, payload = repeat(case, repetitions(profile), profile.case_timeout_s)
        first = runs[0]
        info = {
            "payload_bytes": payload,
            "repetitions": len(runs),
            "baseline_bytes": {name: [m.sides[name].baseline_bytes for m in runs] for name in first.sides},
            "phases": phases(first),
            "timeline": first.timeline,
        }
        return {"metrics": summarize_runs(runs, payload), "info": info}
