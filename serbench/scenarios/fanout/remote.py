"""Fan-out workers on other hosts: the torch-dist group of a core and ``serbench fanout-worker``s.

Remote workers (``RemoteGroup``, ``serve``): over torch-dist the workers may
run on other hosts, under ``serbench fanout-worker``. The core listens at
``tcp://HOST:PORT`` (its ``Route.remote``): control there, gloo's store on
PORT+1, acks on PORT+2. Each ``serbench fanout-worker`` says hello with the
ranks it offers; the core hands each the case (``Control``, the settings it
rebuilds its ``Work`` from) and the worker indices it runs; it forks them
with the same ``_worker_main`` as a local group, and relays their pipe
messages (ready, done, error) and deaths to the core. The core stamps each
step's arrival on its own clock (``StampedAcks``): two hosts' clocks cannot
be subtracted. Both sides beat; a side silent too long ends the case (core)
or the session (worker host), which then waits for the next case.

Everything a worker does once forked (receive, decode, check, ack, report) is
``serbench.scenarios.fanout.workgroup``'s, shared with a local group; this module only enlists
the hosts, relays their workers' pipe messages and stamps arrivals.
"""

from __future__ import annotations

import contextlib
import queue
import secrets
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

import msgspec
import zmq

from serbench.model.errors import BroadcastError
from serbench.runtime.isolation import end_trees
from serbench.runtime.processes import exit_reason
from serbench.scenarios.fanout.broadcast import Ack, Acks, Route, TorchDist, clock, error_line, remote_route
from serbench.scenarios.fanout.workgroup import (
    READY_TIMEOUT_S,
    Group,
    Work,
    WorkerReport,
    file_message,
    fork_worker,
    set_up,
)

BEAT_S = 1.0  # remote workers: each side says it is there this often
SILENT_S = 10.0  # a remote side silent this long is gone
HELLO_S = 0.25  # an idle ``serbench fanout-worker`` says hello this often


class StampedAcks(Acks):
    """Remote workers' acks (over tcp://), each stamped on the core's clock by a thread as it
    arrives: ``held_at`` becomes the arrival of the worker's notice that it holds the step (sent
    before its check), or of the ack itself where none came (the handshake)."""

    def __init__(self, route: Route, ctx: zmq.Context) -> None:
        super().__init__(route, ctx)
        self.stamped: queue.SimpleQueue[Ack] = queue.SimpleQueue()
        self.running = True
        self.thread = threading.Thread(target=self._stamp, name="serbench-acks", daemon=True)
        self.thread.start()

    def _stamp(self) -> None:
        noticed: dict[tuple[int, int], float] = {}
        while self.running:
            for ack in super().arrivals(0.05):
                now = clock()
                if ack.notice:
                    noticed[ack.step, ack.worker] = now
                    continue
                ack.held_at = noticed.pop((ack.step, ack.worker), now)
                self.stamped.put(ack)

    def arrivals(self, timeout_s: float) -> list[Ack]:
        try:
            found = [self.stamped.get(timeout=timeout_s)]
        except queue.Empty:
            return []
        with contextlib.suppress(queue.Empty):
            while True:
                found.append(self.stamped.get_nowait())
        return found

    def close(self) -> None:
        self.running = False
        self.thread.join()
        super().close()


class Control(msgspec.Struct, omit_defaults=True):
    """A message between a core and a ``serbench fanout-worker`` on its control socket.

    The worker host: ``hello`` (``ranks`` it offers, its ``host``), ``accepted`` or ``refused``
    (``reason``) a case, ``worker`` (worker ``index`` said ``message`` on its pipe), ``died``
    (``reason``), ``beat``. The core: ``case`` (run workers ``first`` .. ``first + count - 1`` of
    ``workers``; ``case`` is what they build their ``Work`` from), ``go``, ``beat``, ``end``.
    Everything but a hello names the case's ``session``; a message of another session is stale.
    """

    kind: str
    session: str = ""
    ranks: int = 0
    host: str = ""
    first: int = 0
    count: int = 0
    workers: int = 0
    timeout_s: float = 0.0
    case: dict[str, Any] = {}
    index: int = -1
    message: list[Any] = []
    reason: str = ""


_encode_control = msgspec.msgpack.Encoder().encode
_decode_control = msgspec.msgpack.Decoder(Control).decode


@dataclass
class Agent:
    """A ``serbench fanout-worker`` running some of a remote group's workers."""

    identity: bytes
    host: str
    indices: range
    heard: float  # ``time.monotonic()`` of its last message


@dataclass
class RemoteGroup(Group):
    """A group whose workers run under ``serbench fanout-worker``s: the core's control socket
    (bound at ``route.remote``), the agents that took the case, and what they relayed."""

    session: str = field(default_factory=lambda: secrets.token_hex(8))
    ctrl: zmq.Socket | None = None
    agents: list[Agent] = field(default_factory=list)
    inbox: dict[int, list[list[Any]]] = field(default_factory=dict)  # by worker: its messages
    dead: dict[int, str] = field(default_factory=dict)  # by worker: how it died
    beaten: float = 0.0

    def listen(self, ctx: zmq.Context) -> None:
        self.ctrl = ctx.socket(zmq.ROUTER)
        self.ctrl.setsockopt(zmq.LINGER, 1000)
        self.ctrl.bind(self.route.remote)

    def _send(self, agent: Agent, kind: str, **fields: Any) -> None:
        with contextlib.suppress(zmq.ZMQError):
            self.ctrl.send_multipart(
                [agent.identity, _encode_control(Control(kind, self.session, **fields))], zmq.NOBLOCK
            )

    def _messages(self, timeout_s: float) -> list[tuple[bytes, Control]]:
        """What arrives on the control socket within ``timeout_s``, this session's and hellos."""
        found = []
        if self.ctrl.poll(int(timeout_s * 1000), zmq.POLLIN):
            while self.ctrl.poll(0, zmq.POLLIN):
                frames = self.ctrl.recv_multipart()
                control = _control(frames[-1]) if len(frames) == 2 else Control("garbage")
                if control.kind != "garbage" and control.session in ("", self.session):
                    found.append((frames[0], control))
        return found

    def enlist(self, case: dict[str, Any]) -> None:
        """Hand the case to ``serbench fanout-worker``s that offer the ranks it needs (the first
        to say hello first); BroadcastError when too few offer within the route's timeout, or one
        refuses the case."""
        route, offered = self.route, {}
        deadline = time.monotonic() + route.timeout_s
        while sum(hello.ranks for hello in offered.values()) < route.workers:
            if time.monotonic() > deadline:
                raise BroadcastError(
                    f"{route.workers} remote worker(s) wanted, {sum(h.ranks for h in offered.values())} "
                    f"offered within {route.timeout_s:g} s: start `serbench fanout-worker --rendezvous "
                    f"{route.remote} --ranks {route.workers}` on the workers' host"
                )
            offered.update((i, c) for i, c in self._messages(0.1) if c.kind == "hello")
        first = 0
        for identity, hello in offered.items():
            count = min(hello.ranks, route.workers - first)
            if count <= 0:
                break
            agent = Agent(identity, hello.host, range(first, first + count), time.monotonic())
            self.agents.append(agent)
            self._send(agent, "case", first=first, count=count, workers=route.workers,
                       timeout_s=route.timeout_s, case=case)  # fmt: skip
            first += count
        waiting = {agent.identity for agent in self.agents}
        deadline = time.monotonic() + READY_TIMEOUT_S
        while waiting:
            if time.monotonic() > deadline:
                raise BroadcastError(
                    f"remote worker host(s) did not answer the case within {READY_TIMEOUT_S:g} s"
                )
            for identity, control in self._messages(0.1):
                agent = self._agent(identity)
                if agent is not None and control.kind == "refused":
                    raise BroadcastError(f"serbench fanout-worker on {agent.host}: {control.reason}")
                if control.kind == "accepted":
                    waiting.discard(identity)

    def _agent(self, identity: bytes) -> Agent | None:
        return next((agent for agent in self.agents if agent.identity == identity), None)

    def pump(self, timeout_s: float = 0.0) -> None:
        """File what the agents relayed; beat to them when one is due."""
        now = time.monotonic()
        if now - self.beaten >= BEAT_S:
            for agent in self.agents:
                self._send(agent, "beat")
            self.beaten = now
        for identity, control in self._messages(timeout_s):
            agent = self._agent(identity)
            if agent is None:
                continue
            agent.heard = time.monotonic()
            if control.kind == "worker":
                self.inbox.setdefault(control.index, []).append(control.message)
            elif control.kind == "died":
                self.dead[control.index] = control.reason
        for agent in self.agents:
            if time.monotonic() - agent.heard > SILENT_S:
                raise BroadcastError(
                    f"worker(s) {list(agent.indices)} on {agent.host}: their serbench fanout-worker "
                    f"silent for {SILENT_S:g} s (gone)"
                )

    def alive(self) -> None:
        self.pump()
        for index, report in enumerate(self.reports):
            for message in self.inbox.pop(index, []):
                file_message(index, report, message)
            if not report.finished and index in self.dead:
                raise BroadcastError(f"worker {index} died ({self.dead[index]})")

    def ready(self) -> None:
        """Every worker's baseline, once all are ready; BroadcastError for one that failed."""
        deadline = time.monotonic() + READY_TIMEOUT_S
        baselines: dict[int, int] = {}
        while len(baselines) < self.route.workers:
            if time.monotonic() > deadline:
                missing = sorted(set(range(self.route.workers)) - set(baselines))
                raise BroadcastError(f"worker(s) {missing} not ready within {READY_TIMEOUT_S:g} s")
            self.pump(0.05)
            self.failed_setup(baselines)
        hosts = {index: agent.host for agent in self.agents for index in agent.indices}
        self.reports = [WorkerReport(baselines[i], host=hosts[i]) for i in range(self.route.workers)]

    def failed_setup(self, baselines: dict[int, int]) -> None:
        """File the ready workers' baselines; BroadcastError for a worker that failed or died
        before it was ready."""
        for index in range(self.route.workers):
            for message in self.inbox.pop(index, []):
                if message[0] != "ready":
                    raise BroadcastError(f"worker {index}: {message[1]}")
                baselines[index] = message[1]
            if index in self.dead and index not in baselines:
                raise BroadcastError(f"worker {index} died during setup ({self.dead[index]})")

    def release(self) -> None:
        for agent in self.agents:
            self._send(agent, "go")

    def end(self) -> None:
        """Tell every agent the case is over (it ends what is left of its workers)."""
        if self.ctrl is None:
            return
        for agent in self.agents:
            self._send(agent, "end")
        self.ctrl.close()


def _joined(group: RemoteGroup, case: dict[str, Any]) -> Group:
    """The remote counterpart of ``_started``: enlist, then the gloo group, then ready."""
    route = group.route
    ctx = zmq.Context()
    group.acks = StampedAcks(route, ctx)
    group.sender = TorchDist(route, ctx)
    group.listen(ctx)
    group.enlist(case)
    try:
        group.sender.open()
    except (RuntimeError, BroadcastError) as exc:  # a worker says why it could not join, else gloo's error
        group.pump(0.5)
        group.failed_setup({})
        raise BroadcastError(
            f"the workers did not join the gloo group at {route.rendezvous}: {error_line(exc)}"
        ) from None
    group.ready()
    return group


def start(route: Route, case: dict[str, Any]) -> Group:
    """``workgroup.start`` for a route whose workers are remote (``route.remote``): enlist
    ``serbench fanout-worker``s and hand them ``case``, what they build their ``Work`` from."""
    return set_up(RemoteGroup(route), lambda group: _joined(group, case))


def serve(address: str, ranks: int, build: Callable[[dict[str, Any]], Work], stop: threading.Event,
          log: Callable[[str], None]) -> None:  # fmt: skip
    """``serbench fanout-worker``: run up to ``ranks`` workers of each case of a core listening at
    ``address`` (``rendezvous_address``), one case after another, until ``stop`` is set.
    ``build`` turns a case's settings into its ``Work``; whatever it raises refuses that case
    only, as a case whose workers fail ends that session only."""
    ctx = zmq.Context()
    ctrl = ctx.socket(zmq.DEALER)
    ctrl.setsockopt(zmq.IDENTITY, secrets.token_bytes(16))
    ctrl.setsockopt(zmq.LINGER, 0)
    ctrl.setsockopt(zmq.IMMEDIATE, 1)  # no hello piles up while no core listens
    ctrl.connect(address)
    hello = _encode_control(Control("hello", ranks=ranks, host=socket.gethostname()))
    try:
        while not stop.is_set():
            with contextlib.suppress(zmq.Again):
                ctrl.send(hello, zmq.NOBLOCK)
            if not ctrl.poll(int(HELLO_S * 1000), zmq.POLLIN):
                continue
            order = _control(ctrl.recv())
            if order.kind == "case":
                _serve_case(ctrl, address, order, build, stop, log)
    finally:
        ctrl.close(0)
        ctx.term()


def _control(body: bytes) -> Control:
    """A control message; garbage reads as one that asks nothing."""
    try:
        return _decode_control(body)
    except msgspec.DecodeError:
        return Control("garbage")


def _reply(ctrl: zmq.Socket, order: Control, kind: str, **fields: Any) -> None:
    with contextlib.suppress(zmq.Again):
        ctrl.send(_encode_control(Control(kind, order.session, **fields)), zmq.NOBLOCK)


def _serve_case(ctrl: zmq.Socket, address: str, order: Control, build: Callable[[dict[str, Any]], Work],
                stop: threading.Event, log: Callable[[str], None]) -> None:  # fmt: skip
    """One case: build its work, fork its workers, relay until they end, the core ends the case
    or falls silent, or ``stop``."""
    indices = range(order.first, order.first + order.count)
    try:
        work = build(order.case)
    except Exception as exc:
        reason = f"{type(exc).__name__}: {exc}"[:300]
        log(f"refused a case: {reason}")
        _reply(ctrl, order, "refused", reason=reason)
        return
    log(f"case {order.session}: workers {list(indices)} of {order.workers}: {order.case}")
    _reply(ctrl, order, "accepted")
    route = remote_route(order.workers, address, order.timeout_s)
    procs: list[Any] = []
    conns: list[Connection] = []
    try:
        for index in indices:
            proc, conn = fork_worker(route, index, work)
            procs.append(proc)
            conns.append(conn)
        _relay(ctrl, order, dict(zip(indices, zip(procs, conns, strict=True), strict=True)), stop, log)
    finally:
        for conn in conns:
            conn.close()
        end_trees([p.pid for p in procs if p.pid is not None], grace_s=1.0)
        for proc in procs:
            proc.join(1)


def _relay(ctrl: zmq.Socket, order: Control, workers: dict[int, tuple[Any, Connection]],
           stop: threading.Event, log: Callable[[str], None]) -> None:  # fmt: skip
    """Pass the core's ``go`` to the workers and their messages and deaths to the core, beating,
    until every worker ended, the core says ``end`` or is silent past the case's timeout."""
    poller = zmq.Poller()
    poller.register(ctrl, zmq.POLLIN)
    for proc, conn in workers.values():
        poller.register(conn.fileno(), zmq.POLLIN)
        poller.register(proc.sentinel, zmq.POLLIN)
    heard = beaten = time.monotonic()
    running = dict(workers)
    while running and not stop.is_set():
        poller.poll(int(BEAT_S * 500))
        now = time.monotonic()
        if now - beaten >= BEAT_S:
            _reply(ctrl, order, "beat")
            beaten = now
        while ctrl.poll(0, zmq.POLLIN):
            control = _control(ctrl.recv())
            if control.session != order.session:
                continue
            heard = now
            if control.kind == "end":
                return
            if control.kind == "go":  # the core's release; the wire keeps the tag older hosts send
                for _, conn in running.values():
                    conn.send("start")
        if now - heard > order.timeout_s + SILENT_S:
            log(f"case {order.session}: the core silent for {now - heard:.0f} s; ending it")
            return
        for index, (proc, conn) in list(running.items()):
            ended, message = "", None
            if conn.poll(0):
                with contextlib.suppress(EOFError, OSError):
                    message = conn.recv()
            if message is not None:
                _reply(ctrl, order, "worker", index=index, message=list(message))
                ended = "" if message[0] == "ready" else message[0]
            elif not proc.is_alive():
                proc.join(0.1)
                ended = "died"
                _reply(ctrl, order, "died", index=index, reason=exit_reason(proc.exitcode))
            if ended:
                log(f"case {order.session}: worker {index} {ended}")
                poller.unregister(conn.fileno())
                poller.unregister(proc.sentinel)
                del running[index]
