"""The second hop counted: the core's and a worker's instructions per step, under callgrind
(``--measure instructions``).

As ``serbench.scenarios.ipc.counted`` does for the first hop, both ends run in the counting
process, over the transport's own code (``broadcast``'s senders and receivers), joined by stand-in
ZeroMQ sockets (``StandInContext``). Per step kind — a prefill step (the workload's tensors) and
a decode step (the running batch's scheduler output) — it counts:

* ``core_instructions``, ``core_decode_instructions`` — the core's ``publish``: the backend's
  encode, the envelope, and the write into the ring or the frames handed to the stand-in
  sockets. A core that re-serializes per worker counts N encodes here.
* ``worker_instructions``, ``worker_decode_instructions`` — worker 0's ``receive``: the step's
  frames gathered and the backend's decode of it.

ZeroMQ's own calls, the kernel and waiting are not counted. The other workers' reads and the
check of every decoded step run uncounted between the counted calls, one step waiting between
two calls, so each call has exactly one uncounted part (``instructions.skip_nothing``). Not
counted (the case is recorded unsupported, with why): torch-dist (gloo needs its other ranks),
cached cases (a hit depends on every step before it) and workers on other hosts.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict, deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from serbench.links import shm, transport
from serbench.model import metrics
from serbench.model.results import FanoutCountedInfo, Verification
from serbench.probes import instructions
from serbench.scenarios.base import Outcome
from serbench.scenarios.fanout import broadcast

KINDS = ("shm-ring", "zmq-each", "zmq-pub")  # the transports whose path runs in one process
WINDOW = instructions.WINDOW_INSTRUCTIONS // 2  # as ipc_counted's: each call also runs the rest
NAMES = {  # step kind → (the core's metric, a worker's metric)
    "prefill": ("core_instructions", "worker_instructions"),
    "decode": ("core_decode_instructions", "worker_decode_instructions"),
}


def not_counted(kind: str, cache_mode: str, remote: str) -> str | None:
    """Why a fan-out case cannot be counted, or None when it can."""
    if kind not in KINDS:
        return f"instructions: {kind}'s broadcast needs its other ranks running, processes of their own"
    if cache_mode != "none":
        return "instructions: a cached case is not counted (a hit depends on every step before it)"
    if remote:
        return "instructions: workers on another host are processes of their own, not counted"
    return None


class StandInSocket:
    """A ZeroMQ socket's stand-in (``StandInContext.socket``): sending queues the frames, as sent, for
    every socket connected to the endpoint this one is bound to."""

    def __init__(self, context: StandInContext) -> None:
        self.context = context
        self.endpoint = ""
        self.queue: deque[list[Any]] = deque()

    def setsockopt(self, option: int, value: Any) -> None:
        """Nothing to set: there is no socket."""

    def bind(self, endpoint: str) -> None:
        self.endpoint = endpoint

    def connect(self, endpoint: str) -> None:
        self.context.peers[endpoint].append(self)

    def send_multipart(self, frames: list[Any], copy: bool = True) -> None:
        for peer in self.context.peers[self.endpoint]:
            peer.queue.append(list(frames))

    def send(self, data: Any) -> None:
        self.send_multipart([data])

    def recv_multipart(self, copy: bool = True) -> list[Any]:
        return self.queue.popleft()

    def recv(self) -> Any:
        return self.queue.popleft()[0]

    def poll(self, timeout: int | None = None, flags: int = 0) -> int:
        return len(self.queue)

    def close(self, linger: int | None = None) -> None:
        self.queue.clear()


class StandInContext:
    """The ``zmq.Context`` the counted ends are made with: its sockets are ``StandInSocket``."""

    def __init__(self) -> None:
        self.peers: defaultdict[str, list[StandInSocket]] = defaultdict(list)

    def socket(self, kind: int) -> StandInSocket:
        return StandInSocket(self)


class InProcessFanout:
    """One step kind's core and its workers in this process: ``publish`` the step, ``take`` it
    (worker ``index`` receives and decodes it), ``settle`` it (checked, released)."""

    def __init__(
        self,
        sender: broadcast.Sender,
        receivers: list[broadcast.Receiver],
        message: tuple[Any, int],
        encode: Callable[[Any], list[Any]],
        decode: Callable[[list[Any]], Any],
        check: Callable[[Any, int], None],
    ) -> None:
        self.sender, self.receivers = sender, receivers
        self.step, self.checksum = message
        self.envelope = broadcast.Envelope(0, self.checksum)
        self.encode, self.decode, self.check = encode, decode, check

    def publish(self) -> None:
        self.sender.publish(self.envelope, lambda: self.encode(self.step), _alive)

    def take(self, index: int) -> Any:
        _, frames = self.receivers[index].receive()
        return self.decode(frames)

    def settle(self, index: int, decoded: Any) -> None:
        """ValueError unless ``decoded`` is the step sent; then the reader's slot given back."""
        self.check(decoded, self.checksum)
        receiver = self.receivers[index]
        receiver.release()
        wake = getattr(receiver, "wake", None)
        if wake is not None:
            wake.queue.clear()  # the ring's wake-ups, never waited for here: the flags were set

    def others(self) -> None:
        """Every worker but 0 takes and settles the waiting step."""
        for index in range(1, len(self.receivers)):
            self.settle(index, self.take(index))


def _alive() -> None:
    """Every worker is alive: they are this process."""


@contextlib.contextmanager
def in_process_fanout(
    kind: str,
    workers: int,
    message: tuple[Any, int],
    encode: Callable[[Any], list[Any]],
    decode: Callable[[list[Any]], Any],
    check: Callable[[Any, int], None],
) -> Iterator[InProcessFanout]:
    """A core and ``workers`` workers of ``kind`` in this process, over stand-in sockets; the
    ring's arena holds a step in each of its slots (here every step may carry the tensors)."""
    ctx = StandInContext()
    arena = shm.placed_bytes(encode(message[0])) * broadcast.SLOTS // 2  # make_route doubles it
    with transport.ipc_dir() as folder, contextlib.ExitStack() as ends:
        route = broadcast.make_route(kind, workers, Path(folder), arena)
        sender = broadcast.SENDERS[kind](route, ctx)
        ends.callback(sender.close)
        receivers = []
        for index in range(workers):
            receivers.append(broadcast.RECEIVERS[kind](route, ctx, index))
            ends.callback(receivers[-1].close)
        sender.attached()  # every reader mapped the ring: nothing outlives this process
        yield InProcessFanout(sender, receivers, message, encode, decode, check)


def measure(
    kind: str,
    workers: int,
    messages: dict[str, tuple[Any, int]],
    encode: Callable[[Any], list[Any]],
    decode: Callable[[list[Any]], Any],
    check: Callable[[Any, int], None],
    verification: Verification | None,
) -> Outcome:
    """One fan-out case counted: the core's and a worker's instructions per step of each kind in
    ``messages`` (``{"prefill": (step, checksum), "decode": ...}``; see the module's docstring)."""
    sides: dict[str, Callable[[], None]] = {}
    with contextlib.ExitStack() as stack:
        for step_kind, message in messages.items():
            path = stack.enter_context(in_process_fanout(kind, workers, message, encode, decode, check))
            path.publish()  # every end once, checked, before anything is counted
            path.settle(0, path.take(0))
            path.others()
            path.publish()  # between calls one step waits, published and not taken
            sides.update(_sides(path, *NAMES[step_kind]))
        counts, counted = instructions.per_call(sides, empty=instructions.skip_nothing, size=WINDOW)
    info = FanoutCountedInfo(
        verification=verification,
        transport=kind,
        workers=workers,
        calls_per_window=counted["calls_per_window"],
    )
    return Outcome({name: metrics.measured(name, [counts[name]]) for name in sides}, info)


def _sides(path: InProcessFanout, core_name: str, worker_name: str) -> dict[str, Callable[[], None]]:
    def core() -> None:
        with instructions.uncounted():
            path.settle(0, path.take(0))
            path.others()
        path.publish()

    def worker() -> None:
        decoded = path.take(0)
        with instructions.uncounted():
            path.settle(0, decoded)
            del decoded  # freed here, as a worker frees it after its check
            path.others()
            path.publish()

    return {core_name: core, worker_name: worker}
