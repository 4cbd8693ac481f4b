"""The frontend's end of the engine protocol: a session over a link, with a forked or remote engine.

``open_link`` either forks an engine (``server.run_local``) bound on a
private ipc:// folder or loopback tcp://, or connects to one started with
``serbench engine``; it starts a session, yields the ``EngineLink``, and
ends the session on the way out, checking that the engine finished every
request. An error from the engine, its death or its silence raises
``EngineError``; a message the frontend did not expect raises
``IntegrityError``.

Over ``shm`` the link owns a shared-memory region (``serbench.links.shm``): a
request's large frames are placed there and referenced from its header;
the engine's ``release`` messages are taken in passing, and a request that
does not fit waits for them (backpressure).

With a multimodal cache (``cache``, docs/cache.md) the link carries the
frontend's half of it (``EngineLink.cache``, a ``serbench.links.cache.FrontendCache``);
over ``shm`` its object store is a second region, made and named the same
way, unlinked as soon as the engine has mapped it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

import zmq

from serbench.links import cache, shm, transport
from serbench.model.errors import EngineError, IntegrityError, ShmError
from serbench.runtime.isolation import kill_tree
from serbench.runtime.processes import FORK, exit_reason
from serbench.scenarios.engine.protocol import Control, control, parse_control

log = logging.getLogger("serbench.scenarios.engine")
clock = time.perf_counter
Sender = Callable[[zmq.Socket, list], Any]  # sends one message's frames (tests swap in faulty ones)

STARTUP_TIMEOUT_S = 10.0  # engine bound and answering `start`
STALL_TIMEOUT_S = 10.0  # no output at all while requests are unfinished: lost


class EngineLink:
    """The frontend's end of one session with an engine. Without sockets (None) its messages go
    only where ``send``'s ``sender`` hands them (the ipc path counted in one process,
    ``serbench.scenarios.ipc.counted``)."""

    def __init__(
        self,
        push: zmq.Socket | None,
        pull: zmq.Socket | None,
        where: str,
        proc: BaseProcess | None,
        placer: shm.Placer | None = None,
    ) -> None:
        self.push = push
        self.pull = pull
        self.where = where
        self.proc = proc
        self.placer = placer
        self.cache: cache.FrontendCache | None = None  # the frontend's half of a multimodal cache
        self.engine_cache: dict[str, int] = {}  # the engine's cache as its last ``checked`` said
        self.pending: deque[tuple[Control | None, list]] = deque()  # taken while waiting for room
        self.session = uuid.uuid4().hex
        self.frame_sizes = False  # the engine asked for each message's frame sizes in its header
        self.poller = zmq.Poller()
        if pull is not None:
            self.poller.register(pull, zmq.POLLIN)
        if proc is not None:
            self.poller.register(proc.sentinel, zmq.POLLIN)

    def send(
        self, kind: str, frames: Sequence[Any] = (), sender: Sender = transport.send, **data: Any
    ) -> None:
        """Send one message; over shm a request's large frames go to the region, the rest inline."""
        if self.placer is not None and kind == "request":
            placement = self._place(frames)
            frames = placement.inline
            if placement.refs:  # a request without large frames (text) places nothing, holds no block
                data["shm"] = [placement.block, placement.refs]
        if self.frame_sizes and frames:
            data["sizes"] = [memoryview(frame).nbytes for frame in frames]
        sender(self.push, [control(kind, self.session, **data), *frames])

    def _place(self, frames: Sequence[Any]) -> shm.Placement:
        """Place ``frames`` in the region, waiting for releases while it is full (messages that
        arrive meanwhile are kept for ``recv``)."""
        while (placement := self.placer.place(frames)) is None:
            got = self._receive(STALL_TIMEOUT_S)
            if got is None:
                raise EngineError(
                    f"shared memory full ({self.placer.ring.held_bytes} of {self.placer.region.size} bytes "
                    f"held) and nothing released for {STALL_TIMEOUT_S:g} s"
                )
            if not self._released(got):
                self.pending.append(got)
        return placement

    def _released(self, got: tuple[Control | None, list]) -> bool:
        """Take a ``release`` from the engine: that request's space is free again."""
        ctrl = got[0]
        if ctrl is None or ctrl.kind != "release":
            return False
        if self.placer is None:
            raise IntegrityError("the engine released shared memory this link never placed")
        try:
            self.placer.release(ctrl.data.get("block"))
        except ShmError as exc:
            raise IntegrityError(f"engine: {exc}") from None
        return True

    def recv(self, timeout_s: float) -> tuple[Control | None, list] | None:
        """The next message of this session (None header = the empty message), or None on timeout.

        Raises EngineError for an ``error`` from the engine or its death.
        """
        if self.pending:
            return self.pending.popleft()
        deadline = clock() + timeout_s
        while True:
            got = self._receive(max(deadline - clock(), 0.0))
            if got is None or not self._released(got):
                return got
            if clock() >= deadline:
                return None

    def _receive(self, timeout_s: float) -> tuple[Control | None, list] | None:
        """Like ``recv``, from the socket alone, ``release`` messages included."""
        deadline = clock() + timeout_s
        while True:
            remaining = deadline - clock()
            ready = dict(self.poller.poll(max(0, int(remaining * 1000))))
            if self.pull in ready:
                frames = self.pull.recv_multipart(copy=False)
                if transport.is_ping(frames):
                    return None, frames
                ctrl = parse_control(frames[0])
                if ctrl.session != self.session:
                    continue  # left over from an earlier session on a shared engine
                if ctrl.kind == "error":
                    raise EngineError(str(ctrl.data.get("message")))
                return ctrl, frames[1:]
            if self.proc is not None and not self.proc.is_alive():
                self.proc.join(1)
                raise EngineError(f"engine process died ({exit_reason(self.proc.exitcode)})")
            if remaining <= 0:
                return None

    def expect(self, kind: str, timeout_s: float) -> Control:
        """Wait for a message of ``kind``; anything else is an error."""
        got = self.recv(timeout_s)
        if got is None:
            raise EngineError(f"no {kind!r} from the engine at {self.where} within {timeout_s:g} s")
        ctrl, _ = got
        if ctrl is None or ctrl.kind != kind:
            raise IntegrityError(
                f"expected {kind!r} from the engine, got {ctrl.kind if ctrl else 'the empty message'!r}"
            )
        return ctrl


@contextlib.contextmanager
def _local_engine(
    kind: str, channel: Any = None
) -> Iterator[tuple[transport.Addresses, BaseProcess, Path | None]]:
    """Fork an engine bound on a private ipc folder or loopback tcp, given the backend's ``channel``
    (``serializers.shared_channel``; None: none); kill it and clean up after."""
    # The one use of the server's code on this side: it is what the forked child runs.
    # Imported here, not at the top, so that the client depends on the protocol alone
    # and only forking a local engine needs the server (imported before the fork, so
    # the child starts with it loaded, as before).
    from serbench.scenarios.engine.server import run_local

    private = kind in ("ipc", "shm")  # shm: control via ipc://
    with transport.ipc_dir() if private else contextlib.nullcontext() as folder:
        bind = (
            transport.ipc_addresses(folder)
            if folder
            else transport.Addresses("tcp://127.0.0.1:*", "tcp://127.0.0.1:*")
        )
        reader, writer = FORK.Pipe(duplex=False)
        proc = FORK.Process(
            target=run_local, args=(bind, folder, writer, os.getpid(), channel), name="serbench-engine"
        )
        proc.start()
        writer.close()
        try:
            if not reader.poll(STARTUP_TIMEOUT_S):
                raise EngineError(f"engine did not start within {STARTUP_TIMEOUT_S:g} s")
            try:
                status, payload = reader.recv()
            except EOFError:
                raise EngineError(f"engine process died at start ({exit_reason(proc.exitcode)})") from None
            if status != "ok":
                raise EngineError(payload)
            yield payload, proc, folder
        finally:
            reader.close()
            # Even after `done` it is killed, not awaited: it has nothing left to send,
            # and its own exit (freeing what it decoded) would cost the case time.
            kill_tree(proc.pid)
            proc.join(1)


@contextlib.contextmanager
def _region(kind: str, engine_url: str | None, size: int) -> Iterator[shm.Region | None]:
    """The session's shared-memory region over ``shm`` (None otherwise), closed after.

    Refused for an engine on another host: a region exists on one machine only.
    """
    if kind != "shm":
        yield None
        return
    if engine_url and not transport.is_loopback(engine_url):
        raise EngineError(f"--transport shm needs the engine on this host, not {engine_url}")
    for name in shm.reclaim_orphans():
        log.warning("removed shared memory %s left by a crashed earlier run", name)
    with shm.Region.create(max(size, shm.INLINE_BELOW)) as region:  # small messages place nothing
        yield region


@contextlib.contextmanager
def _cache_store(mode: str | None, capacity: int, engine_url: str | None) -> Iterator[shm.Region | None]:
    """The shm cache's object store (None for another mode), closed after; refused for an engine
    on another host."""
    if mode != "shm":
        yield None
        return
    if engine_url and not transport.is_loopback(engine_url):
        raise EngineError(f"--cache shm needs the engine on this host, not {engine_url}")
    with shm.Region.create(capacity) as region:
        yield region


@contextlib.contextmanager
def open_link(
    backend: str,
    step_s: float,
    engine_url: str | None = None,
    local_transport: str = transport.DEFAULT_KIND,
    shm_bytes: int = 0,
    staging: dict[str, str] | None = None,
    workload: str | None = None,
    cache_mode: str | None = None,
    cache_bytes: int = 0,
    channel: Any = None,
) -> Iterator[tuple[EngineLink, bool]]:
    """A started session with an engine; yields (link, engine is local).

    With ``engine_url`` (tcp://HOST:PORT) the engine is one started with
    ``serbench engine``; without, one is forked for this session, linked by
    ``local_transport`` (``transport.KINDS``). Over ``shm`` (which also works
    with an engine started on this host) the requests' large frames go
    through a region of ``shm_bytes``. ``staging`` (``device``, ``pin``)
    asks the engine to stage each request on a device after decode
    (``serbench.scenarios.engine.staging``); the engine refuses a session it cannot stage.
    ``workload`` names the workload whose steps the engine streams (an output
    workload's logprobs and layout). ``cache_mode`` (``lru``, ``shm``; None: no cache) gives
    both sides a multimodal cache of ``cache_bytes`` (``serbench.links.cache``). ``channel`` (a
    backend's ``serializers.shared_channel``) goes to the forked engine's decoder; an engine
    started apart cannot share one.
    """
    with contextlib.ExitStack() as stack:
        proc, folder = None, None
        if engine_url:
            if channel is not None:
                raise EngineError(
                    f"backend {backend!r} shares a channel with the engine it forks, not {engine_url}"
                )
            addrs = transport.tcp_addresses(engine_url)
        else:
            addrs, proc, folder = stack.enter_context(_local_engine(local_transport, channel))
        # Made after the fork, so the engine maps it only as it attaches: read-only.
        region = stack.enter_context(_region(local_transport, engine_url, shm_bytes))
        store = stack.enter_context(_cache_store(cache_mode, cache_bytes, engine_url))
        ctx = zmq.Context()
        stack.callback(ctx.term)
        push, pull = transport.connect_frontend(ctx, addrs)
        stack.callback(pull.close)
        stack.callback(push.close)
        placer = stack.enter_context(shm.Placer(region)) if region else None
        link = EngineLink(push, pull, addrs.requests, proc, placer)
        extra = {"workload": workload} if workload else {}
        if region:
            extra["shm"] = {"name": region.name, "size": region.size}
        if cache_mode in ("lru", "shm"):
            extra["cache"] = {"mode": cache_mode, "capacity": cache_bytes}
            if store:
                extra["cache"].update(name=store.name, size=store.size)
            link.cache = cache.FrontendCache(cache_mode, cache_bytes, cache.Store(store) if store else None)
        link.send("start", backend=backend, step_s=step_s, **(staging or {}), **extra)
        link.frame_sizes = bool(link.expect("ready", STARTUP_TIMEOUT_S).data.get("sizes"))
        if folder:
            transport.remove_ipc_dir(folder)  # both sides connected: the socket files are not needed
        if region:
            region.unlink()  # both sides mapped it: from now on nothing outlives the two processes
        if store:
            store.unlink()
        yield link, proc is not None
        link.send("end")
        done = link.expect("done", STALL_TIMEOUT_S)
        if done.data.get("unfinished"):
            raise IntegrityError(f"engine ended with {done.data['unfinished']} request(s) still running")
