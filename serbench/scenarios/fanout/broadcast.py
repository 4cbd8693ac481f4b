"""The second hop: one engine core broadcasts each step to N worker processes (docs/fanout.md).

A *transport* here is how one message reaches N readers (``KINDS``):

* ``zmq-each`` — one PUSH socket per worker, the same encoded frames sent N times (a naive core).
* ``zmq-pub`` — one PUB socket, N SUB sockets: one send call; libzmq queues the message
  (refcounted) on every subscriber's pipe, and its I/O thread writes it into each socket.
* ``shm-ring`` — a single writer, N readers (vLLM's broadcast queue): a ring of slots in shared
  memory with a ``written`` flag and one read flag per reader. Small frames go into the slot,
  larger ones (from ``OOB_FROM``) into an arena the core writes once and every worker decodes
  in place; a slot is written again only after every reader read it. Readers do not spin: each
  waits on a one-byte wakeup of its own (``wake_order``), re-checking every ``WAKE_POLL_S``.
  The writer's store order (slot, read flags, ``written``) holds on x86, as vLLM's relies on.
* ``torch-dist`` — ``torch.distributed`` over gloo, the core rank 0: the frame sizes, then one
  ``broadcast`` per frame as a uint8 tensor (as vLLM's ``broadcast_tensor_dict``).

Every transport carries, beside the backend's frames, an ``Envelope``: the step index and the
checksum the worker must find. A worker may keep a cache the core mirrors
(``workgroup.Work.resolve``), and its ack says what that cache did (``Resolution``). The worker
processes are ``fanout.workgroup``'s; workers on other hosts (torch-dist), ``fanout.remote``'s.
"""

from __future__ import annotations

import contextlib
import datetime
import mmap
import os
import secrets
import socket
import stat
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import urlsplit

import msgspec
import numpy as np
import psutil
import zmq

from serbench.links import shm
from serbench.links.endpoints import tcp_endpoint
from serbench.model.errors import BroadcastError, ShmError
from serbench.runtime import lazy
from serbench.serializers.base import quiet_readonly_views

torch = lazy.torch(__name__)  # imported on first use (serbench.runtime.lazy)

KINDS = ("zmq-each", "zmq-pub", "shm-ring", "torch-dist")
OOB_FROM = 64 * 1024  # shm-ring: frames this large leave the slot for the arena
SLOTS = 4
SLOT_BYTES = 1 << 20
WAKE_POLL_S = 0.005
PEER_GRACE_S = 2.0  # a gloo call failed: how long the group has to learn which worker died

clock = time.perf_counter  # CLOCK_MONOTONIC: one clock for every process of a host


class Envelope(msgspec.Struct, array_like=True, omit_defaults=True):
    """What travels beside a step's frames: the step, the checksum its decode must give, and the
    transport's own bookkeeping (shm-ring: arena references; torch-dist: frame sizes)."""

    step: int
    checksum: int = 0
    kind: str = "step"  # "step", "hello" (handshake), "stop"
    refs: list[list[int]] = []
    sizes: list[int] = []


_encode_envelope = msgspec.msgpack.Encoder().encode
_decode_envelope = msgspec.msgpack.Decoder(Envelope).decode
_slot_decoder = msgspec.msgpack.Decoder(tuple[Envelope, list[bytes]])


@dataclass(frozen=True)
class Route:
    """Everything a worker needs to open its end, fixed before the workers are forked."""

    kind: str
    workers: int
    folder: str  # private ipc folder (sockets)
    names: tuple[str, str] = ("", "")  # shm-ring: the flags and data regions' names
    slots: int = SLOTS
    slot_bytes: int = SLOT_BYTES
    arena_bytes: int = 0
    rendezvous: str = ""  # torch-dist: tcp://HOST:PORT of rank 0's store
    timeout_s: float = 30.0  # per step: a worker silent for longer has hung
    remote: str = ""  # remote workers: tcp://HOST:PORT where the core listens (``rendezvous_address``)
    cpus: tuple[int, ...] = ()  # ``placement``: the core's CPU, then each forked worker's; () unpinned

    @property
    def acks(self) -> str:
        return _endpoint(self.remote, 2) if self.remote else f"ipc://{self.folder}/acks"

    def endpoint(self, name: str) -> str:
        return f"ipc://{self.folder}/{name}"

    @property
    def flags_bytes(self) -> int:
        return self.slots * (1 + self.workers)

    @property
    def data_bytes(self) -> int:
        return self.slots * self.slot_bytes + self.arena_bytes


def placement(workers: int) -> tuple[int, ...]:
    """The CPU of the core, then of each of ``workers`` forked workers: each its own while there
    are enough of those this process may use, then round again from the core's.

    Unpinned, the kernel placed the processes as it pleased, and a step's time to the last worker
    moved from run to run with a worker waiting for its CPU (docs/measurements/fanout.md)."""
    available = sorted(os.sched_getaffinity(0))
    return tuple(available[i % len(available)] for i in range(workers + 1))


def wake_order(cpus: tuple[int, ...], workers: int) -> list[int]:
    """The order the ring's writer wakes its readers: those on CPUs of their own first, then
    those that share the core's (``placement``), each group by index.

    A reader woken on the core's CPU preempts the core's ZeroMQ I/O thread before it has written
    the other wakes, so woken first it holds the rest back by its whole step. One PUB socket for
    every reader wakes them in the order they subscribed, which changed from case to case: the
    slow mode came and went between runs (docs/measurements/fanout.md)."""
    if not cpus:
        return list(range(workers))
    return sorted(range(workers), key=lambda i: cpus[i + 1] == cpus[0])


def pin(cpu: int) -> None:
    """Run this thread, and the threads it starts from now on (ZeroMQ's I/O thread), on ``cpu``."""
    os.sched_setaffinity(0, {cpu})


def region_name() -> str:
    """A fresh serbench shared-memory name whose creator is this process (``shm.NAME``)."""
    return f"{shm.PREFIX}{os.getpid()}-{secrets.token_hex(16)}"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def rendezvous_address(text: str) -> str:
    """``tcp://HOST:PORT`` where a core meets remote workers, normalized; ValueError says what is
    wrong. HOST is the core host's address as the workers reach it (the core binds it: no
    wildcard); the core uses PORT, PORT+1 and PORT+2."""
    host, port = tcp_endpoint(text, ports=3)
    if host.strip("[]") in ("0.0.0.0", "::", "*"):
        raise ValueError(f"{text}: give the core's address as the workers reach it, not a wildcard")
    return f"tcp://{host}:{port}"


def _endpoint(address: str, offset: int) -> str:
    """``tcp://HOST:PORT`` → ``tcp://HOST:PORT+offset``."""
    host, _, port = address.rpartition(":")
    return f"{host}:{int(port) + offset}"


def remote_route(workers: int, address: str, timeout_s: float) -> Route:
    """The route of a torch-dist group whose core listens at ``address`` (``rendezvous_address``)."""
    return Route(
        "torch-dist", workers, "", rendezvous=_endpoint(address, 1), timeout_s=timeout_s, remote=address
    )


def make_route(
    kind: str, workers: int, folder: Path, arena_bytes: int = 0, timeout_s: float = 30.0, remote: str = ""
) -> Route:
    """A route for ``kind`` (with ``remote``, a torch-dist group of remote workers); ValueError for
    a kind this module does not know, or one that cannot reach another host."""
    if kind not in KINDS:
        raise ValueError(f"unknown broadcast transport {kind!r}; transports: {', '.join(KINDS)}")
    if remote:
        if kind != "torch-dist":
            raise ValueError(f"{kind} reaches workers on this host only; remote workers need torch-dist")
        return remote_route(workers, remote, timeout_s)
    names = (region_name(), region_name()) if kind == "shm-ring" else ("", "")
    rendezvous = f"tcp://127.0.0.1:{free_port()}" if kind == "torch-dist" else ""
    arena = shm.aligned(arena_bytes) * 2 if kind == "shm-ring" else 0  # two steps' worth: no wait on reuse
    return Route(
        kind,
        workers,
        str(folder),
        names,
        arena_bytes=arena,
        rendezvous=rendezvous,
        timeout_s=timeout_s,
        cpus=placement(workers),
    )


def unavailable(kind: str) -> str | None:
    """Why ``kind`` cannot run here (None: it can)."""
    if kind == "torch-dist" and not torch.distributed.is_available():
        return "this torch has no torch.distributed"
    if kind == "torch-dist" and not torch.distributed.is_gloo_available():
        return "this torch has no gloo backend"
    return None


Encode = Callable[[], Sequence[Any]]  # the step's encode, called once per publish


def _nothing() -> list[Any]:
    return []


def _nbytes(frame: Any) -> int:
    return memoryview(frame).nbytes


# ---------------------------------------------------------------- the core's end


class Sender:
    """The core's end of a transport. ``publish`` sends one step to every worker and returns the
    bytes the core copied doing so (into the kernel, or into shared memory)."""

    def __init__(self, route: Route, ctx: zmq.Context) -> None:
        self.route = route
        self.ctx = ctx

    def open(self) -> None:
        """Called once the workers are forked (torch-dist's rendezvous needs them all)."""

    def attached(self) -> None:
        """Every worker has opened its end."""

    def publish(self, envelope: Envelope, encode: Encode, alive: Callable[[], None]) -> int:
        """Encode the step (``encode()``: once) and send it to every worker."""
        raise NotImplementedError

    def handshake(self, acks: Acks, alive: Callable[[], None]) -> None:
        """Until every worker answered a ``hello``: once (a connection delivers what was sent before
        it was made)."""
        self.publish(Envelope(-1, kind="hello"), _nothing, alive)
        acks.collect(-1, alive)

    def stop(self, alive: Callable[[], None]) -> None:
        self.publish(Envelope(-2, kind="stop"), _nothing, alive)
        self.stopped = True

    def close(self) -> None:
        pass


class ZmqEach(Sender):
    """One PUSH per worker; the frames sent once per worker."""

    def __init__(self, route: Route, ctx: zmq.Context) -> None:
        super().__init__(route, ctx)
        self.socks = []
        for index in range(route.workers):
            sock = ctx.socket(zmq.PUSH)
            sock.setsockopt(zmq.LINGER, 0)
            sock.bind(route.endpoint(f"each-{index}"))
            self.socks.append(sock)

    def publish(self, envelope: Envelope, encode: Encode, alive: Callable[[], None]) -> int:
        frames = encode()
        header = _encode_envelope(envelope)
        for sock in self.socks:
            sock.send_multipart([header, *frames], copy=False)
        return len(self.socks) * (len(header) + sum(map(_nbytes, frames)))

    def close(self) -> None:
        for sock in self.socks:
            sock.close(0)


class ZmqPub(Sender):
    """One PUB socket; every worker subscribes to everything."""

    def __init__(self, route: Route, ctx: zmq.Context) -> None:
        super().__init__(route, ctx)
        self.sock = ctx.socket(zmq.PUB)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.SNDHWM, 0)
        self.sock.bind(route.endpoint("pub"))

    def publish(self, envelope: Envelope, encode: Encode, alive: Callable[[], None]) -> int:
        frames = encode()
        header = _encode_envelope(envelope)
        self.sock.send_multipart([header, *frames], copy=False)
        # One message, queued on every subscriber's pipe; libzmq writes it into each one's socket.
        return self.route.workers * (len(header) + sum(map(_nbytes, frames)))

    def handshake(self, acks: Acks, alive: Callable[[], None]) -> None:
        """PUB drops what it sends before a subscription arrived: ``hello`` until all answered."""
        deadline = time.monotonic() + self.route.timeout_s
        while not acks.complete(-1):
            if time.monotonic() > deadline:
                raise BroadcastError(f"workers {acks.missing(-1)} never subscribed")
            self.publish(Envelope(-1, kind="hello"), _nothing, alive)
            acks.poll(-1, 0.02, alive)

    def close(self) -> None:
        self.sock.close(0)


def _map(name: str, size: int, writable: bool, create: bool = False) -> mmap.mmap:
    """A serbench segment mapped (created, mode 0600, when ``create``), every page faulted in."""
    path = shm.SHM_DIR / name
    flags = os.O_RDWR if writable else os.O_RDONLY
    fd = os.open(path, flags | os.O_NOFOLLOW | (os.O_CREAT | os.O_EXCL if create else 0), 0o600)
    try:
        if create:
            os.fchmod(fd, 0o600)
            os.ftruncate(fd, size)
        else:
            info = os.fstat(fd)
            if info.st_uid != os.getuid() or stat.S_IMODE(info.st_mode) & 0o077 or info.st_size != size:
                raise ShmError(f"shared memory {name!r} is not the private region of {size} bytes expected")
        prot = mmap.PROT_READ | (mmap.PROT_WRITE if writable else 0)
        return mmap.mmap(fd, size, mmap.MAP_SHARED | mmap.MAP_POPULATE, prot)
    except BaseException:
        if create:
            path.unlink(missing_ok=True)
        raise
    finally:
        os.close(fd)


class ShmRing(Sender):
    """The writer of the ring (module docstring): slots for headers, an arena for large frames."""

    def __init__(self, route: Route, ctx: zmq.Context) -> None:
        super().__init__(route, ctx)
        self.names = route.names
        self.flags_map = _map(route.names[0], route.flags_bytes, True, create=True)
        try:
            self.data_map = _map(route.names[1], route.data_bytes, True, create=True)
        except BaseException:
            self.unlink()
            raise
        self.flags = np.ndarray((route.slots, 1 + route.workers), np.uint8, self.flags_map)
        self.data = np.ndarray(route.data_bytes, np.uint8, self.data_map)
        self.arena = shm.Ring(route.arena_bytes) if route.arena_bytes else None
        self.blocks: list[int | None] = [None] * route.slots  # the arena block each slot references
        self.next = 0
        self.wakes = []  # in wake order
        for index in wake_order(route.cpus, route.workers):
            sock = ctx.socket(zmq.PUB)
            sock.setsockopt(zmq.LINGER, 0)
            sock.bind(route.endpoint(f"wake-{index}"))
            self.wakes.append(sock)

    def attached(self) -> None:
        self.unlink()  # every worker maps both: the memory goes with the last mapping

    def unlink(self) -> None:
        for name in self.names:
            (shm.SHM_DIR / name).unlink(missing_ok=True)

    def _claim(self, slot: int, alive: Callable[[], None]) -> None:
        """Wait until every reader has read what ``slot`` holds; give its arena block back."""
        deadline = time.monotonic() + self.route.timeout_s
        while self.flags[slot, 0] and not self.flags[slot, 1:].all():
            alive()
            if time.monotonic() > deadline:
                unread = [i for i, done in enumerate(self.flags[slot, 1:]) if not done]
                raise BroadcastError(f"worker(s) {unread} never read ring slot {slot}")
            time.sleep(0.0002)
        self.flags[slot, 0] = 0
        if self.blocks[slot] is not None:
            self.arena.release(self.blocks[slot])
            self.blocks[slot] = None

    def publish(self, envelope: Envelope, encode: Encode, alive: Callable[[], None]) -> int:
        frames = encode()
        slot = self.next % self.route.slots
        self._claim(slot, alive)
        copied, inline, refs = 0, [], []
        large = [(i, memoryview(f).cast("B")) for i, f in enumerate(frames) if _nbytes(f) >= OOB_FROM]
        if large:
            if self.arena is None:
                raise ShmError("a large frame and no arena: the route was sized for another message")
            block = self.arena.allocate(sum(shm.aligned(v.nbytes) for _, v in large))
            if block is None:
                raise ShmError("the arena is full although every slot was read")
            self.blocks[slot] = block.id
            base = self.route.slots * self.route.slot_bytes
            offset = block.offset
            for index, view in large:
                start = base + offset
                np.copyto(self.data[start : start + view.nbytes], np.frombuffer(view, np.uint8))
                refs.append([index, offset, view.nbytes])
                offset += shm.aligned(view.nbytes)
                copied += view.nbytes
        placed = {index for index, _ in large}
        inline = [memoryview(f).cast("B") for i, f in enumerate(frames) if i not in placed]
        body = msgspec.msgpack.encode((msgspec.structs.replace(envelope, refs=refs), inline))
        if len(body) + 8 > self.route.slot_bytes:
            raise ShmError(
                f"a step's in-slot part ({len(body)} bytes) exceeds a ring slot ({self.route.slot_bytes})"
            )
        start = slot * self.route.slot_bytes
        self.data[start : start + 8] = np.frombuffer(len(body).to_bytes(8, "little"), np.uint8)
        self.data[start + 8 : start + 8 + len(body)] = np.frombuffer(body, np.uint8)
        copied += len(body) + sum(
            len(f) for f in inline
        )  # small frames: into the body, the body into the slot
        self.flags[slot, 1:] = 0
        self.flags[slot, 0] = 1
        self.next += 1
        for sock in self.wakes:
            sock.send(b"")
        return copied

    def close(self) -> None:
        self.unlink()
        for sock in self.wakes:
            sock.close(0)
        self.flags = self.data = None  # type: ignore[assignment]
        for mapping in (self.flags_map, self.data_map):
            with contextlib.suppress(BufferError):
                mapping.close()


def interface_toward(host: str) -> str:
    """The network interface this host reaches ``host`` through (``lo`` for itself on loopback):
    the one gloo must bind when GLOO_SOCKET_IFNAME does not say."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((host.strip("[]"), 9))  # no packet: the kernel only picks the route
        local = probe.getsockname()[0]
    for name, addresses in psutil.net_if_addrs().items():
        if any(a.address.split("%")[0] == local for a in addresses):
            return name
    raise BroadcastError(f"no interface holds {local}, the address toward {host}; set GLOO_SOCKET_IFNAME")


def _init_gloo(route: Route, rank: int) -> None:
    """Join the group: a local one on loopback, a remote one on the interface toward the core."""
    toward = urlsplit(route.remote).hostname if route.remote else None
    os.environ.setdefault("GLOO_SOCKET_IFNAME", interface_toward(toward) if toward else "lo")
    torch.distributed.init_process_group(
        "gloo",
        init_method=route.rendezvous,
        rank=rank,
        world_size=route.workers + 1,
        timeout=datetime.timedelta(seconds=route.timeout_s),
    )


def _as_tensor(frame: Any) -> torch.Tensor:
    """A frame as the uint8 tensor gloo sends: a view of the frame, read-only as a rule (torch's
    warning about that: ``quiet_readonly_views``, called by ``TorchDist.open``)."""
    return torch.frombuffer(memoryview(frame).cast("B"), dtype=torch.uint8)


class TorchDist(Sender):
    """Rank 0 of a gloo group: metadata, then every frame, each a ``broadcast``."""

    def open(self) -> None:
        _init_gloo(self.route, 0)
        quiet_readonly_views()  # ``_as_tensor`` views frames whatever the backend
        self.stopped = False

    def publish(self, envelope: Envelope, encode: Encode, alive: Callable[[], None]) -> int:
        frames = encode()
        sizes = [_nbytes(f) for f in frames]
        meta = _encode_envelope(msgspec.structs.replace(envelope, sizes=sizes))
        try:
            torch.distributed.broadcast(torch.tensor([len(meta)], dtype=torch.int64), src=0)
            torch.distributed.broadcast(_as_tensor(meta), src=0)
            for frame, size in zip(frames, sizes, strict=True):
                if size:
                    torch.distributed.broadcast(_as_tensor(frame), src=0)
        except RuntimeError as exc:  # gloo's errors (DistBackendError among them)
            _peer_lost(exc, alive)
        return self.route.workers * (8 + len(meta) + sum(sizes))  # gloo's root sends to every rank

    def close(self) -> None:
        if getattr(
            self, "stopped", False
        ):  # with a peer gone, gloo's teardown may wait for it: the process ends
            with contextlib.suppress(Exception):
                torch.distributed.destroy_process_group()


def _peer_lost(exc: BaseException, alive: Callable[[], None]) -> NoReturn:
    """A gloo call failed, as it does when a peer is gone: the worker that died (``alive`` raises
    once the group learns it, within ``PEER_GRACE_S``), else gloo's own first line."""
    deadline = time.monotonic() + PEER_GRACE_S
    while time.monotonic() < deadline:
        alive()
        time.sleep(0.05)
    raise BroadcastError(f"torch-dist broadcast failed: {error_line(exc)}") from None


def error_line(exc: BaseException) -> str:
    """An error's first line, at most 300 characters: what a one-line failure reason quotes."""
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]


SENDERS: dict[str, type[Sender]] = {
    "zmq-each": ZmqEach,
    "zmq-pub": ZmqPub,
    "shm-ring": ShmRing,
    "torch-dist": TorchDist,
}


# ---------------------------------------------------------------- a worker's end


class Receiver:
    """A worker's end: ``receive`` one step (its envelope and frames), ``release`` it when done."""

    def __init__(self, route: Route, ctx: zmq.Context, index: int) -> None:
        self.route, self.ctx, self.index = route, ctx, index

    def _wait(self, sock: zmq.Socket) -> None:
        if not sock.poll(int(self.route.timeout_s * 1000), zmq.POLLIN):
            raise BroadcastError(
                f"worker {self.index}: nothing from the core within {self.route.timeout_s:g} s"
            )

    def receive(self) -> tuple[Envelope, list[Any]]:
        raise NotImplementedError

    def release(self) -> None:
        pass

    def close(self) -> None:
        pass


class ZmqReceiver(Receiver):
    def __init__(self, route: Route, ctx: zmq.Context, index: int) -> None:
        super().__init__(route, ctx, index)
        if route.kind == "zmq-pub":
            self.sock = ctx.socket(zmq.SUB)
            self.sock.setsockopt(zmq.RCVHWM, 0)
            self.sock.setsockopt(zmq.SUBSCRIBE, b"")
            self.sock.connect(route.endpoint("pub"))
        else:
            self.sock = ctx.socket(zmq.PULL)
            self.sock.connect(route.endpoint(f"each-{index}"))
        self.sock.setsockopt(zmq.LINGER, 0)

    def receive(self) -> tuple[Envelope, list[Any]]:
        self._wait(self.sock)
        header, *frames = self.sock.recv_multipart(copy=False)
        return _decode_envelope(memoryview(header)), frames

    def close(self) -> None:
        self.sock.close(0)


class RingReceiver(Receiver):
    def __init__(self, route: Route, ctx: zmq.Context, index: int) -> None:
        super().__init__(route, ctx, index)
        self.flags_map = _map(route.names[0], route.flags_bytes, True)
        self.data_map = _map(route.names[1], route.data_bytes, False)
        self.flags = np.ndarray((route.slots, 1 + route.workers), np.uint8, self.flags_map)
        self.data = memoryview(self.data_map)
        self.arena = self.data[route.slots * route.slot_bytes :]
        self.wake = ctx.socket(zmq.SUB)
        self.wake.setsockopt(zmq.SUBSCRIBE, b"")
        self.wake.setsockopt(zmq.LINGER, 0)
        self.wake.connect(route.endpoint(f"wake-{index}"))
        self.next = 0

    def receive(self) -> tuple[Envelope, list[Any]]:
        slot, me = self.next % self.route.slots, 1 + self.index
        deadline = time.monotonic() + self.route.timeout_s
        while not (self.flags[slot, 0] and not self.flags[slot, me]):
            if time.monotonic() > deadline:
                raise BroadcastError(
                    f"worker {self.index}: nothing in the ring within {self.route.timeout_s:g} s"
                )
            if self.wake.poll(int(WAKE_POLL_S * 1000), zmq.POLLIN):
                while self.wake.poll(0, zmq.POLLIN):
                    self.wake.recv()
        start = slot * self.route.slot_bytes
        length = int.from_bytes(self.data[start : start + 8], "little")
        envelope, inline = _slot_decoder.decode(self.data[start + 8 : start + 8 + length])
        return envelope, shm.gather(self.arena, envelope.refs, inline)

    def release(self) -> None:
        self.flags[self.next % self.route.slots, 1 + self.index] = 1
        self.next += 1

    def close(self) -> None:
        self.wake.close(0)


class DistReceiver(Receiver):
    def __init__(self, route: Route, ctx: zmq.Context, index: int) -> None:
        super().__init__(route, ctx, index)
        _init_gloo(route, index + 1)

    def receive(self) -> tuple[Envelope, list[Any]]:
        length = torch.empty(1, dtype=torch.int64)
        torch.distributed.broadcast(length, src=0)
        meta = torch.empty(int(length.item()), dtype=torch.uint8)
        torch.distributed.broadcast(meta, src=0)
        envelope = _decode_envelope(meta.numpy().data)
        frames: list[Any] = []
        for size in envelope.sizes:
            frame = torch.empty(size, dtype=torch.uint8)
            if size:
                torch.distributed.broadcast(frame, src=0)
            frames.append(frame.numpy().data)
        return envelope, frames

    def close(self) -> None:
        with contextlib.suppress(Exception):
            torch.distributed.destroy_process_group()


RECEIVERS: dict[str, type[Receiver]] = {
    "zmq-each": ZmqReceiver,
    "zmq-pub": ZmqReceiver,
    "shm-ring": RingReceiver,
    "torch-dist": DistReceiver,
}


# ---------------------------------------------------------------- acknowledgements


class Resolution(msgspec.Struct, array_like=True):
    """What a worker's cache did with one step: the cacheable tensors it had (``lookups``), how many
    it resolved from a reference (``hits``), and what the cache holds and has evicted after it."""

    lookups: int = 0
    hits: int = 0
    held_bytes: int = 0
    evictions: int = 0


class Ack(msgspec.Struct, array_like=True):
    """A worker's answer to one step: when it held the decoded step, what its check found, and
    with a cache what the cache did."""

    worker: int
    step: int
    held_at: float  # ``clock()`` right after decode (and, with a cache, resolve)
    error: str = ""  # the step failed its check: why
    cache: Resolution | None = None
    notice: bool = False  # a remote worker's word that it holds the step, sent before its check


_decode_ack = msgspec.msgpack.Decoder(Ack).decode


class Acks:
    """The core's PULL socket that every worker's acknowledgements arrive on."""

    def __init__(self, route: Route, ctx: zmq.Context) -> None:
        self.route = route
        self.sock = ctx.socket(zmq.PULL)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.bind(route.acks)
        self.got: dict[int, dict[int, Ack]] = {}

    def missing(self, step: int) -> list[int]:
        return [w for w in range(self.route.workers) if w not in self.got.get(step, {})]

    def complete(self, step: int) -> bool:
        return not self.missing(step)

    def arrivals(self, timeout_s: float) -> list[Ack]:
        """The acks that arrive within ``timeout_s`` (none: an empty list)."""
        if not self.sock.poll(int(timeout_s * 1000), zmq.POLLIN):
            return []
        found = []
        while self.sock.poll(0, zmq.POLLIN):
            found.append(_decode_ack(self.sock.recv()))
        return found

    def poll(self, step: int, timeout_s: float, alive: Callable[[], None]) -> None:
        """Take what arrives within ``timeout_s``; BroadcastError for a worker that reported a
        wrong step or died."""
        alive()
        for ack in self.arrivals(timeout_s):
            if ack.error:
                raise BroadcastError(f"worker {ack.worker}, step {ack.step}: {ack.error}")
            self.got.setdefault(ack.step, {}).setdefault(ack.worker, ack)

    def collect(self, step: int, alive: Callable[[], None]) -> list[Ack]:
        """Every worker's ack of ``step``; BroadcastError when one is silent past the route's timeout."""
        deadline = time.monotonic() + self.route.timeout_s
        while not self.complete(step):
            if time.monotonic() > deadline:
                raise BroadcastError(
                    f"worker(s) {self.missing(step)} did not acknowledge step {step} "
                    f"within {self.route.timeout_s:g} s (hung)"
                )
            self.poll(step, 0.05, alive)
        return [self.got[step][w] for w in range(self.route.workers)]

    def close(self) -> None:
        self.sock.close(0)
