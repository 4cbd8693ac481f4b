"""The engine process: decodes requests, steps, and streams outputs back (docs/ipc.md).

An engine receives ``EngineCoreRequest``s, decodes them with the backend under test and streams
``EngineCoreOutputs`` back, one batched message per simulated scheduler step (one new token per
running request); the messages are those of ``serbench.scenarios.engine.protocol``. As in a
real serving engine, a receive thread decodes while the main thread steps, so a slow decode
shows up as late tokens for everybody. A session that names a device gets the stage of
``engine.staging`` after decode: a request is ready, and acknowledged, once on the device.

The engine keeps what it decoded until the request finishes; then a third thread checks it
against the request's checksum and drops it, so checking costs no step time and memory is freed
as a serving engine frees it (a request asking for an ``ack`` gets a ``checked`` message then).
A mismatch, a failed decode or a duplicate is an ``error``, which fails the case. Over shared
memory (``links.shm``) large frames are decoded in place and each check ends with ``release``;
a multimodal cache (``links.cache``) is resolved after decode, its hits checked by digest.

``run_local`` is the engine a frontend forks for one session (``engine.client``);
``serve_forever`` is ``serbench engine``'s, serving sessions one after another. An unsafe
backend (one that can run code from its input) is refused on a non-loopback address, and one
named by dotted path on any address, unless the engine was started with ``allow_unsafe``.
"""

from __future__ import annotations

import gc
import logging
import os
import queue
import signal
import threading
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import zmq

from serbench.links import cache, shm, transport
from serbench.links.transport import Addresses
from serbench.model.errors import CacheError, ShmError, TransportTimeout
from serbench.model.specs import parse_spec
from serbench.probes.heap import fresh_memory, release_free_memory
from serbench.runtime.processes import die_with_parent
from serbench.scenarios.engine.protocol import (
    DEFAULT_STEP_S,
    MAX_STEP_S,
    Control,
    clock,
    control,
    integrity_fault,
    parse_control,
    request_checksum,
)
from serbench.scenarios.engine.staging import Stager, Staging
from serbench.serializers import Serializer, attached, get_serializer, is_safe
from serbench.workloads import Running as Scheduled
from serbench.workloads import Workload, get_workload
from serbench.workloads.messages import EngineCoreRequest

log = logging.getLogger("serbench.scenarios.engine")

POLL_S = 0.2  # how often idle loops look at the stop flag
SEND_TIMEOUT_S = 10.0  # a frontend that takes no output for this long is gone


def fresh_receive_memory() -> None:
    """Keep glibc's mmap threshold at its default of 128 KiB (``heap.fresh_memory``), so that
    every large frame is received into freshly mapped memory and unmapped when freed, and
    hand back the free heap memory this process inherited (``heap.release_free_memory``).

    Left alone, glibc raises the threshold to the size of the last large block
    freed (up to 32 MiB): once a finished request is dropped, some of the next
    requests' frames come from heap memory a previous one left (no page
    faults) and others not, in a pattern set by frame sizes and arena history
    (images-32's ingress alternated between two levels). Fixed, each
    request pays for faulting its receive buffers in, as the first request of
    an engine does, and memory freed by the last request is what the kernel
    hands it. A frame served from a free heap block instead (one the parent
    left, or a request's after ``release_free_memory`` at its drop) faults in
    all the same: the trim gave its pages back.
    """
    fresh_memory()
    release_free_memory()


@dataclass(frozen=True)
class Unverified:
    """A decoded request waiting for its check, with what the frontend sent to check it by.

    The frames are kept only when the frontend sent their encoded checksum: on
    a mismatch they tell a transport fault from a codec bug."""

    request: EngineCoreRequest
    checksum: Any
    frames: list | None
    frames_checksum: int | None
    hits: list = field(default_factory=list)  # (reference, tensor) the cache resolved


@dataclass
class Session:
    """One frontend's run: its backend (one instance per thread), its device stage, the workload
    whose steps it streams (``start``'s ``workload``; one token per request when none is named)
    and what it sent."""

    id: str
    step_s: float
    decoder: Serializer
    encoder: Serializer
    workload: Workload = field(default_factory=Workload)
    stager: Stager | None = None
    seen: set[str] = field(default_factory=set)
    region: shm.Region | None = None  # the frontend's shared memory, mapped read-only
    cache: cache.EngineCache | None = None  # the session's multimodal cache (docs/cache.md)
    # Decoded, not yet finished and checked: the request, its shm block (None: not placed), ack asked.
    held: dict[str, tuple[Unverified, int | None, bool]] = field(default_factory=dict)


@dataclass
class Running:
    """A request being generated: how many tokens it gets, the next one's position, and when
    the receive thread had it decoded (``clock()``; the frontend's ingress ends there)."""

    max_tokens: int
    decoded: float
    position: int = 0


def open_session(ctrl: Control, bind_address: str, allow_unsafe: bool, channel: Any = None) -> Session:
    """A session from a ``start`` header, its decoder given the ``channel`` the frontend shared
    before it forked this engine (``serializers.shared_channel``; None: none); ValueError says why
    it is refused. Its encoder is given none: outputs go back as frames, as vLLM's do."""
    spec = ctrl.data.get("backend")
    step_s = ctrl.data.get("step_s", DEFAULT_STEP_S)
    if not isinstance(spec, str) or not isinstance(step_s, (int, float)) or not 0 <= step_s <= MAX_STEP_S:
        raise ValueError(f"bad start message: backend={spec!r}, step_s={step_s!r}")
    if parse_spec(spec).is_dotted_path and not allow_unsafe:
        raise ValueError(
            f"refusing backend {spec!r} given by dotted path (building it imports and calls any "
            "function a client names); start the engine with --allow-unsafe-deserialization to accept it"
        )
    device, pin = ctrl.data.get("device"), ctrl.data.get("pin", "none")
    stager = Stager(Staging(device, pin)) if device is not None else None  # ValueError says why not
    decoder = attached(get_serializer(spec), channel)
    if not is_safe(decoder) and not allow_unsafe and not transport.is_loopback(bind_address):
        raise ValueError(
            f"refusing unsafe backend {spec!r} (it can run code from its input) on non-loopback "
            f"{bind_address}; start the engine with --allow-unsafe-deserialization to accept it"
        )
    workload = ctrl.data.get("workload")
    steps = get_workload(workload) if isinstance(workload, str) else Workload()
    cache.register(steps)  # a plugin's request type brings its cache walk (a remote engine's own)
    region = _attach(ctrl, bind_address)
    engine_cache = _cache(ctrl, bind_address, region is not None)
    return Session(
        ctrl.session,
        float(step_s),
        decoder,
        get_serializer(spec),
        steps,
        stager,
        region=region,
        cache=engine_cache,
    )


def _cache(ctrl: Control, bind_address: str, shared_frames: bool) -> cache.EngineCache | None:
    """The session's cache from ``start``'s ``cache`` (None: none); ValueError if it cannot be."""
    wanted = ctrl.data.get("cache")
    if wanted is None:
        return None
    if not isinstance(wanted, dict) or wanted.get("mode") not in ("lru", "shm"):
        raise ValueError(f"bad cache in start message: {wanted!r}")
    capacity = wanted.get("capacity")
    if type(capacity) is not int or capacity < 1:
        raise ValueError(f"bad cache capacity in start message: {capacity!r}")
    if wanted["mode"] == "lru":
        return cache.EngineCache("lru", capacity, own=cache.owned if shared_frames else None)
    if not transport.is_loopback(bind_address):
        raise ValueError(f"refusing a shared-memory cache on non-loopback {bind_address}: it is one host's")
    try:
        store = shm.Region.attach(wanted.get("name"), wanted.get("size"))
    except (ShmError, TypeError) as exc:
        raise ValueError(f"cache store: {exc}") from None
    return cache.EngineCache("shm", capacity, region=store)


def _attach(ctrl: Control, bind_address: str) -> shm.Region | None:
    """The region a ``start`` names, mapped read-only; ValueError if it cannot be."""
    shared = ctrl.data.get("shm")
    if shared is None:
        return None
    if not transport.is_loopback(bind_address):
        raise ValueError(f"refusing shared memory on non-loopback {bind_address}: it exists on one host only")
    if not isinstance(shared, dict):
        raise ValueError(f"bad shm in start message: {shared!r}")
    try:
        return shm.Region.attach(shared.get("name"), shared.get("size"))
    except (ShmError, TypeError) as exc:
        raise ValueError(str(exc)) from None


class Engine:
    """A receive thread that decodes, a main thread that steps and sends outputs.

    The sockets are already bound; each is used by one thread only.
    """

    def __init__(
        self,
        requests: zmq.Socket,
        outputs: zmq.Socket,
        bind_address: str,
        allow_unsafe: bool = False,
        channel: Any = None,
    ) -> None:
        self.requests = requests
        self.channel = channel  # a forked engine's, for each session's decoder (``open_session``)
        self.outputs = outputs
        self.outputs.setsockopt(zmq.SNDTIMEO, int(SEND_TIMEOUT_S * 1000))
        self.bind_address = bind_address
        self.allow_unsafe = allow_unsafe
        self.events: queue.Queue[tuple] = queue.Queue()
        self.finished: queue.Queue[tuple] = queue.Queue()  # (session, request id | None = end): to check
        self.stopping = threading.Event()
        self.session: Session | None = None
        self.running: dict[str, Running] = {}

    def stop(self) -> None:
        """Ask both threads to finish (safe from a signal handler)."""
        self.stopping.set()

    # ---- receive thread -------------------------------------------------

    def _receive_loop(self) -> None:
        session: Session | None = None
        while not self.stopping.is_set():
            pinned = session is not None and session.stager is not None and session.stager.receives_pinned
            try:
                frames = (session.stager.receive if pinned else transport.recv)(self.requests, POLL_S)
            except TransportTimeout:
                continue
            except ValueError as exc:
                self.events.put(("error", session.id, f"engine could not receive a request: {exc}"))
                continue
            if transport.is_ping(frames):
                self.events.put(("pong",))
                continue
            try:
                ctrl = parse_control(frames[0])
            except ValueError:
                log.warning("ignored a message without a valid header")
                continue
            if ctrl.kind == "start":
                session = self._start(ctrl)
            elif session is None or ctrl.session != session.id:
                log.info(
                    "ignored %r for session %r (current: %r)", ctrl.kind, ctrl.session, session and session.id
                )
            elif ctrl.kind == "request":
                self._receive_request(session, ctrl, frames[1:])
            elif ctrl.kind == "end":
                self.finished.put((session, None))  # after the checks of the requests before it
            else:
                log.warning("ignored unknown message kind %r", ctrl.kind)

    def _start(self, ctrl: Control) -> Session | None:
        try:
            session = open_session(ctrl, self.bind_address, self.allow_unsafe, self.channel)
        except Exception as exc:
            self.events.put(("error", ctrl.session, f"engine refused the session: {exc}"))
            return None
        self.events.put(("start", session))
        return session

    def _receive_request(self, session: Session, ctrl: Control, frames: list) -> None:
        """Decode, stage on the device if the session has one, hand over to the scheduler
        (acknowledged if asked, with the stage's seconds), then check integrity."""
        placed = ctrl.data.get("shm")
        try:
            request, resolved = decode_request(session, ctrl, frames)
            decoded = clock()
        except CacheError as exc:
            self.events.put(("error", session.id, f"engine cache: {exc}"))
            return
        except Exception as exc:
            self.events.put(
                ("error", session.id, f"engine could not decode a request: {type(exc).__name__}: {exc}")
            )
            return
        if not isinstance(request, session.workload.request_type):
            self.events.put(
                ("error", session.id, f"engine decoded a {type(request).__name__}, not a request")
            )
            return
        about = session.workload.about(request)
        rid = about.request_id
        if rid in session.seen:
            self.events.put(("error", session.id, f"request {rid!r} arrived twice (duplicated message)"))
            return
        session.seen.add(rid)
        ready: dict[str, Any] = {}
        if session.stager is not None:
            try:
                staged = session.stager.stage(request)
            except Exception as exc:
                self.events.put(("error", session.id, f"engine could not stage {rid!r}: {exc}"))
                return
            request, ready["to_device_s"] = staged.request, staged.seconds
            decoded = clock()  # with a device, the request is held once it is there
        ack = bool(ctrl.data.get("ack"))
        hits = []
        if resolved is not None:
            hits = resolved.hits
            ready.update(cache_lookups=resolved.lookups, cache_hits=resolved.found)
        if ack:
            self.events.put(("ack", session.id, rid, ready))
        encoded = ctrl.data.get("encoded")
        kept = frames if encoded is not None else None
        entry = Unverified(request, ctrl.data.get("checksum"), kept, encoded, hits)
        session.held[rid] = (entry, None if placed is None else placed[0], ack)
        self.events.put(("request", session.id, rid, about.max_tokens, decoded))

    def _check(self, session: Session, entry: Unverified) -> None:
        """Report a request whose decoded payload differs from the one sent, and why."""
        rid = session.workload.about(entry.request).request_id
        wrong_hit = cache.verify_hits(rid, entry.hits)
        if wrong_hit is not None:
            self.events.put(("error", session.id, f"integrity: {wrong_hit}"))
            return
        actual = request_checksum(entry.request, session.workload)
        if actual != entry.checksum:
            message = (
                f"request {rid!r} decoded differs from the one sent: payload "
                f"checksum {actual:#010x}, sent {entry.checksum!r}; "
                f"{integrity_fault(entry.frames or (), entry.frames_checksum)}"
            )
            self.events.put(("error", session.id, message))

    # ---- check thread: each finished request, and the end of a session ----

    def _check_loop(self) -> None:
        """Check each finished request and drop it (its memory is freed; over shm its space is
        released, an acked request is reported ``checked``); end a session after its checks."""
        while not self.stopping.is_set():
            try:
                session, rid = self.finished.get(timeout=POLL_S)
            except queue.Empty:
                continue
            if rid is None:
                session.held.clear()  # only requests that never finished are left
                if session.region is not None:
                    session.region.close()
                if session.cache is not None and session.cache.region is not None:
                    session.cache.region.close()
                self.events.put(("end", session.id))
                continue
            entry, block, ack = session.held.pop(rid)
            self._check(session, entry)
            del entry  # the last references to its memory (over shm: views of its space) on this side
            release_free_memory()  # what it left in the heap faults in afresh for the next one
            if block is not None:
                self.events.put(("release", session.id, block))
            if ack:
                held = {}
                if session.cache is not None:
                    held = {
                        "cache_bytes": session.cache.held_bytes,
                        "cache_evictions": session.cache.evictions,
                    }
                self.events.put(("checked", session.id, rid, held))

    # ---- main thread: scheduler ----------------------------------------

    def serve(self, sessions: int | None = None) -> None:
        """Run until stopped, or until ``sessions`` sessions have ended.

        What exists now is moved out of the cyclic collector's reach
        (``gc.freeze``, as vLLM's engine does after start-up): with torch loaded
        a full collection walks ~10^5 objects and stalls a request for ms.
        """
        gc.freeze()
        fresh_receive_memory()
        receiver = threading.Thread(target=self._receive_loop, name="engine-receive", daemon=True)
        checker = threading.Thread(target=self._check_loop, name="engine-check", daemon=True)
        receiver.start()
        checker.start()
        ended = 0
        try:
            while not self.stopping.is_set() and (sessions is None or ended < sessions):
                for event in self._next_events():
                    ended += self._handle(event)
                if self.running:
                    self._step()
        finally:
            self.stopping.set()
            receiver.join()
            checker.join()

    def _next_events(self) -> list[tuple]:
        """Every event so far; when idle, wait (briefly) for the first one."""
        events = []
        if not self.running:
            try:
                events.append(self.events.get(timeout=POLL_S))
            except queue.Empty:
                return events
        while True:
            try:
                events.append(self.events.get_nowait())
            except queue.Empty:
                return events

    def _handle(self, event: tuple) -> int:
        """Act on one event from the receive thread; 1 if it ended a session."""
        kind, *rest = event
        current = self.session.id if self.session else None
        if kind == "pong":
            self._send([transport.PING])
        elif kind == "start":
            self.session, self.running = rest[0], {}
            stager = self.session.stager
            self._send([control("ready", self.session.id, sizes=bool(stager and stager.receives_pinned))])
        elif kind == "error":
            self._send([control("error", rest[0], message=rest[1])])
        elif rest[0] != current:
            return 0  # left over from a session that has been replaced
        elif kind == "request":
            self.running[rest[1]] = Running(max(1, rest[2]), rest[3])
        elif kind == "ack":
            self._send([control("ack", current, request_id=rest[1], **rest[2])])
        elif kind == "release":
            self._send([control("release", current, block=rest[1])])
        elif kind == "checked":
            self._send([control("checked", current, request_id=rest[1], **rest[2])])
        elif kind == "end":
            self._send([control("done", current, unfinished=len(self.running))])
            self.session, self.running = None, {}
            return 1
        return 0

    def _step(self) -> None:
        """One simulated forward pass, then the workload's step for every running request
        (``Workload.step``: one token each, and logprobs for an output workload).

        The outputs header stamps when encoding began (``sent``) and, for each
        request getting its first token, when it was decoded and when this step
        (the first to schedule it) began (``first``).
        """
        session = self.session
        began = clock()
        time.sleep(session.step_s)
        scheduled = []
        first = {}
        for rid, state in list(self.running.items()):
            if state.position == 0:
                first[rid] = [state.decoded, began]
            last = state.position + 1 >= state.max_tokens
            scheduled.append(Scheduled(rid, state.position, last))
            state.position += 1
            if last:
                del self.running[rid]
                self.finished.put((session, rid))
        message = session.workload.step(scheduled)
        if hasattr(message, "timestamp"):  # serbench's and vLLM's steps say when; SGLang's do not
            message.timestamp = time.time()
        sent = clock()
        try:
            frames = session.encoder.encode(message)
        except Exception as exc:
            self._send([control("error", session.id, message=f"engine could not encode outputs: {exc}")])
            self.running = {}
            return
        self._send([control("outputs", session.id, sent=sent, first=first), *frames])

    def _send(self, frames: list) -> None:
        """Send on the outputs socket; a frontend that stopped taking them loses its session."""
        try:
            transport.send(self.outputs, frames)
        except zmq.Again:
            log.warning("frontend took no output for %g s: session dropped", SEND_TIMEOUT_S)
            self.session, self.running = None, {}


def decode_request(session: Session, ctrl: Control, frames: list) -> tuple[Any, cache.Resolved | None]:
    """A request message's frames (after its header) as the engine holds the request: its
    shared-memory references gathered, decoded by the session's backend, its cache references
    filled in (with what the cache resolved; None without a cache). Raises what those raise
    (``CacheError`` for a reference the cache cannot resolve)."""
    placed = ctrl.data.get("shm")
    if placed is not None:
        frames = _placed_frames(session, placed, frames)
    request = session.decoder.decode(frames, session.workload.request_type)
    if session.cache is None or not isinstance(request, session.workload.request_type):
        return request, None
    return session.cache.resolve(request)


def _placed_frames(session: Session, placed: Any, inline: list) -> list:
    """A request's frames from its shm references (ValueError if they are not usable)."""
    if session.region is None:
        raise ValueError("request references shared memory, but the session has none")
    if not (isinstance(placed, list) and len(placed) == 2 and type(placed[0]) is int):
        raise ValueError(f"bad shm field {placed!r}: expected [block, references]")
    return shm.gather(session.region.view, placed[1], inline)


# ---- the engine process of a local ipc case ---------------------------------


def _end_with(parent: int, folder: Path | None) -> None:
    """Exit on SIGTERM, sent too when the frontend that started us dies, removing the ipc folder."""

    def on_term(signum: int, frame: Any) -> None:
        if folder is not None:
            transport.remove_ipc_dir(folder)
        os._exit(128 + signum)

    signal.signal(signal.SIGTERM, on_term)
    die_with_parent(parent, signal.SIGTERM)


def run_local(
    bind: Addresses, folder: Path | None, report: Connection, parent: int, channel: Any = None
) -> None:
    """Entry point of a forked engine: bind, report the bound endpoints, serve one session (its
    decoder given the frontend's ``channel``, if it shared one)."""
    _end_with(parent, folder)
    ctx = zmq.Context()
    try:
        requests, outputs = transport.bind_engine(ctx, bind)
    except zmq.ZMQError as exc:
        report.send(("error", f"engine could not bind {bind.requests}: {exc}"))
        ctx.term()
        return
    bound = Addresses(requests.LAST_ENDPOINT.decode(), outputs.LAST_ENDPOINT.decode())
    report.send(("ok", bound))
    try:
        # The frontend that forked this engine chose the backend, so any spec it names is accepted.
        Engine(requests, outputs, bind.requests, allow_unsafe=True, channel=channel).serve(sessions=1)
    finally:
        requests.close()
        outputs.close()
        ctx.term()
        if folder is not None:
            transport.remove_ipc_dir(folder)


# ---- the standalone engine (serbench engine) --------------------------------


def serve_forever(bind_url: str, allow_unsafe: bool) -> None:
    """The standalone engine: serve sessions one after another until SIGINT/SIGTERM.

    ``bind_url`` is tcp://HOST:PORT (requests on PORT, outputs on PORT+1).
    Raises ValueError for a URL that is not one and zmq.ZMQError when it
    cannot bind; the caller says so to the user. Logs to ``serbench.scenarios.engine``
    (the caller configures logging).
    """
    addrs = transport.tcp_addresses(bind_url)
    ctx = zmq.Context()
    requests, outputs = transport.bind_engine(ctx, addrs, linger_ms=0)
    engine = Engine(requests, outputs, addrs.requests, allow_unsafe)
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: engine.stop())
    log.info("listening: requests %s, outputs %s", addrs.requests, addrs.outputs)
    if allow_unsafe and not transport.is_loopback(addrs.requests):
        log.warning("unsafe backends accepted on a non-loopback address: anyone who can connect can run code")
    try:
        engine.serve()
    finally:
        requests.close()
        outputs.close()
        ctx.term()
        log.info("stopped")
