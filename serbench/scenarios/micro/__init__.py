"""micro: encode and decode of one workload message in one process.

The message is the workload's (``Workload.message``): a request, or for an output workload
(``outputs-B``) one engine step's outputs for B requests. Timing starts after ``gc.freeze()``, as
a serving process does once started (vLLM's engine and API server both freeze their start-up
heap): otherwise a decode that builds thousands of objects pays for the collector walking
torch's objects, several times the decode itself. And with the heap set to keep what a call
frees (``heap.reused_memory``), as a long-running process's mostly is: left to glibc's adaptive
thresholds, the same decode faulted its buffers in afresh on every call in one process and not
in another. For an output workload micro also takes ``decode_cpu_s``, the decode's CPU time,
which preemption does not inflate (as the ipc path's ``step_decode_s``).

Beside the backend's own timings it times one plain copy of the payload (``np.copyto`` into a
buffer already mapped) in the same interleaved loop, so every timing reads as a multiple of the
machine's copy speed: a zero-copy backend is a small fraction of one copy, an in-band one several.
A backend whose decode consumes its frames (``frames_consumed``: SGLang's shm transport unlinks
a frame's segments) cannot decode one frame over and over: each of its decodes gets a frame of
its own, encoded untimed just before, and each of its encodes' frames is given back untimed
after (``timing.PerCall``), so nothing it made is left in /dev/shm.
"""

from __future__ import annotations

import contextlib
import gc
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import msgspec
import numpy as np

from serbench.model.metrics import measured
from serbench.model.profiles import Profile
from serbench.model.results import MicroInfo
from serbench.model.stats import Measurement
from serbench.model.views import MEDIAN, Figure
from serbench.probes import heap, instructions
from serbench.probes.timing import Operation, PerCall, interleaved
from serbench.runtime.isolation import error_text
from serbench.scenarios.base import MEASURE, Case, Outcome, Scenario, counting
from serbench.serializers import Serializer, conformance, discard_frames, frames_consumed, get_serializer
from serbench.workloads import get_workload
from serbench.workloads.tree import array_bytes, arrays, payload_bytes


def payload_copier(message: Any):
    """A function that copies every payload byte of ``message`` once, or None for text."""
    sources = [np.frombuffer(array_bytes(leaf), np.uint8) for leaf in arrays(message)]
    if not sources:
        return None
    targets = [np.ones_like(src) for src in sources]  # touched: pages already mapped

    def copy() -> None:
        for dst, src in zip(targets, sources, strict=True):
            np.copyto(dst, src)

    return copy


class _Consuming(PerCall):
    """An operation of a backend whose decode consumes its frames, holding one call's frames
    until they are decoded; ``close`` gives back any still held (``discard_frames``)."""

    def __init__(self, serializer: Serializer, message: Any) -> None:
        self.serializer, self.message, self.type = serializer, message, type(message)
        self.frames: list | None = None

    def close(self) -> None:
        if self.frames is not None:  # held until given back: an interrupted discard is done again
            discard_frames(self.serializer, self.frames, self.type)
            self.frames = None


class FreshDecode(_Consuming):
    """decode of a frame of its own, encoded untimed just before (``ready``): what one frame's
    decode costs (SGLang's shm transport: each segment opened, mapped and unlinked), its encode's
    not included."""

    def ready(self) -> None:
        if self.frames is None:
            self.frames = self.serializer.encode(self.message)

    def __call__(self) -> object:
        decoded = self.serializer.decode(self.frames, self.type)
        self.frames = None  # taken; a decode that raised leaves them to ``close``
        return decoded


class EncodeGivenBack(_Consuming):
    """encode whose frames are given back untimed (decoded) before the next call (``ready``):
    what the encode makes is timed, its release is not."""

    def ready(self) -> None:
        self.close()

    def __call__(self) -> object:
        self.frames = self.serializer.encode(self.message)
        return self.frames


def operations(
    serializer: Serializer, message: Any, copy: Callable[[], None] | None = None
) -> dict[str, Operation]:
    """The timed operations on one message: encode, decode, their round trip,
    and (when the message has a payload) one plain copy of it: ``copy``, or a
    ``payload_copier`` of its own. Where the backend's decode consumes its frames
    (``frames_consumed``), encode and decode are ``PerCall``s (``FreshDecode``,
    ``EncodeGivenBack``), which their user closes (``given_back``); its round trip
    decodes the frames it encodes, each call, and gives them back if ended before.

    Shared by the micro scenario, the pytest-benchmark suite and asv."""
    msg_type = type(message)
    ops: dict[str, Operation]
    if frames_consumed(serializer):

        def roundtrip() -> object:
            frames = serializer.encode(message)
            try:
                return serializer.decode(frames, msg_type)
            except BaseException:  # SIGTERM's unwinding too: a decode ended before it took them
                discard_frames(serializer, frames, msg_type)
                raise

        ops = {
            "encode_s": EncodeGivenBack(serializer, message),
            "decode_s": FreshDecode(serializer, message),
            "roundtrip_s": roundtrip,
        }
    else:
        frames = serializer.encode(message)
        ops = {
            "encode_s": lambda: serializer.encode(message),
            "decode_s": lambda: serializer.decode(frames, msg_type),
            "roundtrip_s": lambda: serializer.decode(serializer.encode(message), msg_type),
        }
    copy = copy or payload_copier(message)
    if copy is not None:
        ops["copy_s"] = copy
    return ops


@contextlib.contextmanager
def given_back(ops: list[Operation]) -> Iterator[None]:
    """Close every ``PerCall`` of ``ops`` on the way out, whatever ended the block (a failed case,
    SIGTERM's unwinding): what their frames hold is given back."""
    try:
        yield
    finally:
        for op in ops:
            if isinstance(op, PerCall):
                op.close()


def countable(
    ops: dict[str, Operation],
) -> tuple[dict[str, Callable[[], object]], Callable[[], object] | None]:
    """``ops`` as ``instructions.per_call`` counts them, and the call it subtracts as empty.

    A ``PerCall`` is readied once before, and uncounted after every call (``instructions.uncounted``):
    each counted decode takes a fresh frame, each counted encode's frames are given back uncounted.
    Every operation then has one uncounted part a call, which ``instructions.skip_nothing``
    subtracts, as the ipc path's counting does. Without a ``PerCall`` they count as they are."""
    if not any(isinstance(op, PerCall) for op in ops.values()):
        return dict(ops), None

    def then_ready(op: Operation) -> Callable[[], object]:
        ready = op.ready if isinstance(op, PerCall) else lambda: None
        ready()

        def call() -> None:
            op()
            with instructions.uncounted():
                ready()

        return call

    return {name: then_ready(op) for name, op in ops.items()}, instructions.skip_nothing


def wire_bytes(frames: list) -> int:
    return sum(memoryview(frame).nbytes for frame in frames)


def on_the_wire(message: Any, frames: list) -> dict[str, Measurement]:
    """What a message is on the wire: bytes and frames, and where its arrays travel."""
    metrics = {
        "wire_bytes": measured("wire_bytes", [wire_bytes(frames)]),
        "frames": measured("frames", [len(frames)]),
    }
    arrays, out_of_band = array_count(message), len(frames) - 1
    if arrays:
        metrics["oob_frames"] = measured("oob_frames", [out_of_band])
        metrics["inline_arrays"] = measured("inline_arrays", [max(arrays - out_of_band, 0)])
    return metrics


def array_count(message: Any) -> int:
    """Tensors and ndarrays in a message: each leaves inline or as an out-of-band frame."""
    return sum(1 for _ in arrays(message))


# Processes differ, so micro plans MORE_ROUNDS, each a process of its own, as pyperf spreads its
# values over processes; only while the case's own seconds so far are at most MORE_ROUNDS_S, since
# an in-band backend's ratio at a large payload is plain after the first rounds
# (docs/measurements/2026-12-05-micro-rounds.md).
MORE_ROUNDS = 9
MORE_ROUNDS_S = 10.0

# What ``--measure instructions`` counts: encode and decode (a round trip is their sum, and
# the plain copy is a yardstick of the machine's memory, which instruction counts do not see).
COUNTED = {"encode_s": "encode_instructions", "decode_s": "decode_instructions"}


class Micro(Scenario):
    name = "micro"
    description = (
        "encode / decode one message (a request, or one engine step) in-process: "
        "calibrated loops, median + CI, bytes, frames"
    )
    figures = (
        Figure("bars", "Encode and decode time of one request", (("encode_s", MEDIAN), ("decode_s", MEDIAN))),
        Figure("bars", "Bytes and frames on the wire", (("wire_bytes", MEDIAN), ("frames", MEDIAN))),
        Figure(
            "batch",
            "One engine step's encode and decode against batch (outputs-B)",
            (("encode_s", MEDIAN), ("decode_s", MEDIAN), ("decode_cpu_s", MEDIAN)),
            table=False,
        ),
        Figure(
            "size",
            "Latency against tensor size (tensor-N): 256 B inline threshold, 64 KiB zmq copy threshold",
            (("encode_s", MEDIAN), ("decode_s", MEDIAN), ("roundtrip_s", MEDIAN), ("oob_frames", MEDIAN)),
            table=False,
        ),
    )
    # Rounds, each one process timing every backend of the group a sample at a time: the
    # difference between processes (allocator history, CPU placement) goes into the interval,
    # and a slow spell of the machine (milliseconds) into both samples of a pair or neither.
    interleaved = True
    together = True
    min_rounds = MORE_ROUNDS
    options = (MEASURE,)

    def rounds(self, case: Case, profile: Profile) -> int:
        """Counting instructions is one valgrind process for the run: no rounds."""
        return 1 if counting(profile) else super().rounds(case, profile)

    def revisit(self, case: Case, profile: Profile, visited: int, spent_s: float) -> bool:
        """The profile's rounds, and more while the visits so far took at most ``MORE_ROUNDS_S``."""
        return visited < profile.rounds or spent_s <= MORE_ROUNDS_S

    def run(self, case: Case, profile: Profile) -> Outcome:
        """One case in its own process: counted under valgrind (``--measure instructions``), else
        timed alone."""
        prepared = _Prepared.of(case, get_workload(case.workload).message(0))
        if not counting(profile):
            return _timed([prepared], profile)[0]
        reason = instructions.unavailable()
        if reason is not None:
            prepared.info.instructions = f"not counted: {reason}"
            return _timed([prepared], profile)[0]
        # under valgrind a wall clock measures valgrind: counts only
        with given_back(list(prepared.ops.values())):
            fns, empty = countable({name: prepared.ops[op] for op, name in COUNTED.items()})
            counts, counted = instructions.per_call(fns, empty)
        prepared.info.calls_per_window = counted["calls_per_window"]
        metrics = {name: measured(name, [value]) for name, value in counts.items()}
        return Outcome({**metrics, **prepared.wire}, prepared.info)

    def run_together(self, cases: list[Case], profile: Profile) -> list[Outcome | str]:
        """The backends of one round of a group in this one process: each checked and prepared
        (one that fails there fails alone), then every one's operations timed in turn."""
        message = get_workload(cases[0].workload).message(0)
        copy = payload_copier(message)  # one copy's targets for them all: the same payload
        prepared: dict[Case, _Prepared | str] = {}
        for case in cases:
            try:
                prepared[case] = _Prepared.of(case, message, copy)
            except Exception as exc:
                prepared[case] = error_text(exc)
        ready = [p for p in prepared.values() if isinstance(p, _Prepared)]
        outcomes = dict(zip((p.case for p in ready), _timed(ready, profile), strict=True)) if ready else {}
        return [outcomes.get(case) or str(prepared[case]) for case in cases]


@dataclass
class _Prepared:
    """A case checked and ready to time: its message round-tripped (``conformance.verify``), what
    its frames are on the wire (``on_the_wire``), its operations, and the seconds that took."""

    case: Case
    message: Any
    wire: dict[str, Measurement]
    ops: dict[str, Operation]
    info: MicroInfo
    seconds: float

    @classmethod
    def of(cls, case: Case, message: Any, copy: Callable[[], None] | None = None) -> _Prepared:
        """``case`` ready to time on ``message`` (``copy``: the payload copier the cases timed with
        it share); raises what its check or its backend raised."""
        start = time.perf_counter()
        serializer = get_serializer(case.backend)
        kind = get_workload(case.workload).kind
        verification = conformance.verify(serializer, [message], kind, (case.backend, case.workload))
        info = MicroInfo(payload_bytes=payload_bytes(message), verification=verification)
        frames = serializer.encode(message)
        try:
            wire = on_the_wire(message, frames)
        finally:
            discard_frames(serializer, frames, type(message))
        ops = operations(serializer, message, copy)
        if kind == "outputs":  # the frontend's CPU per step, as the ipc output path counts it
            ops["decode_cpu_s"] = ops["decode_s"]
        return cls(case, message, wire, ops, info, time.perf_counter() - start)


def _timed(cases: list[_Prepared], profile: Profile) -> list[Outcome]:
    """Every operation of ``cases`` timed in turn, one sample of each (``timing.interleaved``);
    ``decode_cpu_s`` on the thread's CPU clock in a loop of its own. Cases timed together have
    their timings marked ``in_turn`` and their own seconds in ``Outcome.seconds``."""
    heap.reused_memory()
    gc.freeze()
    # operation by operation, every case in turn: the samples a ratio between two cases pairs
    # are taken one after the other, not with the others' copies of the payload between them
    timed_in_turn = [(i, op) for op in cases[0].ops for i in range(len(cases))]
    wall = {(i, op): cases[i].ops[op] for i, op in timed_in_turn if op != "decode_cpu_s"}
    cpu = {(i, op): cases[i].ops[op] for i, op in timed_in_turn if op == "decode_cpu_s"}
    with given_back([op for case in cases for op in case.ops.values()]):
        samples, timed = interleaved(wall, profile)
        if cpu:
            cpu_samples, cpu_timed = interleaved(cpu, profile, time.thread_time)
            samples.update(cpu_samples)
            timed["seconds"].update(cpu_timed["seconds"])
    together = len(cases) > 1
    outcomes = []
    for i, case in enumerate(cases):
        case.info.loops = {op: loops for (j, op), loops in timed["loops"].items() if j == i}
        case.info.samples = timed["samples"]
        # No payload throughput here: a zero-copy round trip moves no payload byte, so
        # payload / time would read 500+ GB/s, above any memory bandwidth. ``copy_s``,
        # one real copy of the payload, is the yardstick to read the times against.
        metrics = {op: measured(op, samples[(i, op)]) for op in case.ops}
        if together:
            metrics = {op: msgspec.structs.replace(m, in_turn=True) for op, m in metrics.items()}
        metrics.update(case.wire)
        own = case.seconds + sum(seconds for (j, _), seconds in timed["seconds"].items() if j == i)
        outcomes.append(Outcome(metrics, case.info, own if together else None))
    return outcomes
