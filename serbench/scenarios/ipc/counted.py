"""The ipc path counted: each side's instructions per request, under callgrind (``--measure instructions``).

A wall clock on a busy VM cannot see a small change in the engine's receive path; the
instructions it executes can (``serbench.probes.instructions``, docs/instructions.md). This
counts, per request, the two halves of what the ipc scenario's processes do for one request:

* ``send_instructions`` — the frontend: the backend's encode, the message's header, over
  ``--transport shm`` the large frames copied into the region, up to the hand-off to the
  socket (``EngineLink.send``);
* ``receive_instructions`` — the engine: from the frames as the socket hands them over to the
  backend's decode and the cache's references filled in (``server.decode_request``).

Both run in the counting process over the frontend's and the engine's own code, linked by
handing the frames from one to the other: another process or thread would run at times the
scheduler picks and move the count. So ZeroMQ's own calls, the kernel and waiting are not
counted, and ``ipc`` and ``tcp`` count the same. The other side's half and the bit-for-bit check
of every decoded request run uncounted (``instructions.uncounted``), one message waiting between
two calls, so each call has exactly one uncounted part (``instructions.skip_nothing``). Not
counted (recorded unsupported, with why): cached cases, output workloads, a device stage and
``--engine``.
"""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Iterator
from typing import Any

from serbench.links import shm
from serbench.model import metrics
from serbench.model.errors import IntegrityError
from serbench.model.results import IpcCountedInfo
from serbench.probes import instructions
from serbench.scenarios.base import Outcome
from serbench.scenarios.engine.client import EngineLink
from serbench.scenarios.engine.protocol import control, frames_checksum, parse_control, request_checksum
from serbench.scenarios.engine.server import Session, decode_request, open_session
from serbench.serializers import Serializer, conformance, get_serializer
from serbench.workloads import get_workload
from serbench.workloads.messages import EngineCoreRequest

BIND = "ipc://serbench-counted"  # what the engine's session is told it is bound on: this host
# Instructions a window counts: half of micro's. Each counted call also runs the other side and
# the check, uncounted but under valgrind all the same, so a window of micro's size took three
# times its time; a text request's windows are still whole periods of 100 calls.
WINDOW = instructions.WINDOW_INSTRUCTIONS // 2


def not_counted(cache_mode: str, kind: str, engine: str | None, device: Any) -> str | None:
    """Why an ipc case cannot be counted, or None when it can."""
    if cache_mode != "none":
        return "instructions: a cached case is not counted (a hit depends on every request before it)"
    if kind != "request":
        return f"instructions: the ipc path is counted for request workloads, not {kind}"
    if engine:
        return "instructions: a separately started engine (--engine) is a process of its own, not counted"
    if device is not None:
        return "instructions: a device stage is not counted"
    return None


class InProcessSession:
    """Both sides of one session in this process: the frontend's link and the engine's session,
    with the messages the link handed over and not yet taken."""

    def __init__(
        self, link: EngineLink, session: Session, serializer: Serializer, request: Any, frames: list
    ) -> None:
        self.link = link
        self.session = session
        self.serializer = serializer
        self.request = request  # the one request every call sends
        self.checksum = request_checksum(request, session.workload)
        self.encoded = frames_checksum(frames)  # of its frames as encoded
        self.handed: deque[list] = deque()

    def hand_over(self, socket: Any, frames: list) -> None:
        """``EngineLink.send``'s sender: the message goes to the engine's side as received."""
        self.handed.append(frames)

    def send(self) -> None:
        """The frontend's half: encode and send, as the ipc load does (the checksums that go with
        the request in its header computed before, as the load's)."""
        frames = self.serializer.encode(self.request)
        self.link.send("request", frames, self.hand_over, checksum=self.checksum, encoded=self.encoded)

    def receive(self) -> tuple[Any, Any, list]:
        """The engine's half: the oldest message handed over, decoded as the engine holds it
        (and its frames, which the decoded request may view)."""
        frames = self.handed.popleft()
        ctrl = parse_control(frames[0])
        request, _ = decode_request(self.session, ctrl, frames[1:])
        return ctrl, request, frames

    def check(self, received: tuple[Any, Any, list]) -> None:
        """A received request checked against the one sent, bit for bit (``conformance.assert_same``:
        vectorised, a small share of a checksum's instructions, which under valgrind are time),
        then its shm space given back; IntegrityError if it is not the request sent."""
        ctrl, request, _ = received
        try:
            conformance.assert_same(self.request, request)
        except AssertionError as exc:
            raise IntegrityError(f"the engine decoded another request than the one sent: {exc}") from None
        placed = ctrl.data.get("shm")
        if placed is not None:
            self.link.placer.release(placed[0])


@contextlib.contextmanager
def in_process_session(
    backend: str, workload_spec: str, link_kind: str, request: Any
) -> Iterator[InProcessSession]:
    """A session between a frontend link and an engine session in this process, sending
    ``request``; over ``shm`` a region with room for three of it: the one waiting, the one
    being sent, and the ring's room to wrap."""
    workload = get_workload(workload_spec)
    serializer = get_serializer(backend)
    frames = serializer.encode(request)
    with contextlib.ExitStack() as stack:
        placer, extra = None, {}
        if link_kind == "shm":
            largest = shm.placed_bytes(frames)
            region = stack.enter_context(shm.Region.create(max(3 * largest, shm.INLINE_BELOW)))
            placer = stack.enter_context(shm.Placer(region))
            extra["shm"] = {"name": region.name, "size": region.size}
        if workload.request_type is not EngineCoreRequest:
            extra["workload"] = workload_spec  # the engine decodes a plugin's own request type
        link = EngineLink(None, None, BIND, None, placer)
        start = parse_control(control("start", link.session, backend=backend, **extra))
        session = open_session(start, BIND, True)
        if session.region is not None:
            stack.callback(session.region.close)
            region.unlink()  # both sides mapped it: nothing outlives this process
        yield InProcessSession(link, session, serializer, request, frames)


def workload_request(workload_spec: str) -> Any:
    """The request every call of a counted case sends: the workload's first."""
    return next(iter(get_workload(workload_spec).requests(1)))


def measure(backend: str, workload_spec: str, link_kind: str) -> Outcome:
    """One ipc case counted: instructions per request on each side (see the module's docstring)."""
    workload = get_workload(workload_spec)
    request = workload_request(workload_spec)
    verification = conformance.verify(get_serializer(backend), [request], "request", (backend, workload_spec))
    info = IpcCountedInfo(
        payload_bytes=workload.payload_bytes(), verification=verification, transport=link_kind
    )
    with in_process_session(backend, workload_spec, link_kind, request) as path:
        path.send()  # both halves once, checked, before anything is counted
        path.check(path.receive())
        path.send()  # between calls one message waits, sent and not taken

        def send() -> None:
            path.send()
            with instructions.uncounted():
                path.check(path.receive())

        def receive() -> None:
            received = path.receive()
            with instructions.uncounted():
                path.check(received)
                del received  # its memory freed here, as the engine frees it after its check
                path.send()

        sides = {"send_instructions": send, "receive_instructions": receive}
        counts, counted = instructions.per_call(sides, empty=instructions.skip_nothing, size=WINDOW)
        path.check(path.receive())
    info.calls_per_window = counted["calls_per_window"]
    sent = metrics.measured("send_instructions", [counts["send_instructions"]])
    received = metrics.measured("receive_instructions", [counts["receive_instructions"]])
    return Outcome({"send_instructions": sent, "receive_instructions": received}, info)
