"""ZeroMQ plumbing between a frontend and an engine process (docs/architecture.md, "Scenarios").

Two one-way sockets, as a serving engine has them: requests go frontend → engine over
PUSH/PULL, outputs come back over a second PUSH/PULL pair. The engine binds both and the
frontend connects, so one engine (``serbench engine``) can serve frontends one after another.

Frames go with ``copy=False``: pyzmq keeps a reference to each sent buffer until libzmq has
written it, so a caller must not change a buffer before its send completed (``send(track=True)``
returns one tracker per frame: the last frame's alone says nothing about the others).

ipc:// endpoints live in a private folder (mode 0700, ``mkdtemp``): only this user can connect,
which matters when the backend unpickles what arrives. The folder goes as soon as both sides
are connected; one left by a killed process names it in its ``CREATOR`` file, and the next
``ipc_dir`` removes it once that process is gone.

The transports a local link can be (``KINDS``): ``ipc`` and ``tcp`` carry every frame through
ZeroMQ; ``shm`` places the payload frames in a shared-memory region (``serbench.links.shm``).
Three references live here too: the empty message's round trip (the transport's floor),
``UnixStream`` (the same bytes over a plain unix socket) and ``Memcpy`` (one copy of them in a
process): every transport's payload throughput is read against both limits.
"""

from __future__ import annotations

import contextlib
import ipaddress
import mmap
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import numpy as np
import psutil
import zmq

from serbench.links.endpoints import tcp_endpoint
from serbench.model.errors import TransportTimeout
from serbench.runtime.isolation import kill_tree
from serbench.runtime.processes import FORK

IPC_PREFIX = "serbench-ipc-"
CREATOR = "creator"  # the file in an ipc folder that holds its creating process's id
KINDS = ("ipc", "tcp", "shm")  # how a local frontend and engine are linked
DEFAULT_KIND = "ipc"
DEFAULT_BIND = "tcp://127.0.0.1:5555"  # where `serbench engine` listens unless told: loopback only
PING = b""  # the empty message: its round trip is the transport's own floor
LOOPBACK_NAMES = {"localhost"}


@dataclass(frozen=True)
class Addresses:
    """Where the engine listens: one endpoint for requests, one for outputs."""

    requests: str
    outputs: str


def remove_ipc_dir(folder: Path) -> None:
    """Remove an ipc folder and any socket file in it; gone already is fine."""
    shutil.rmtree(folder, ignore_errors=True)


def _creator(folder: Path) -> int | None:
    with contextlib.suppress(OSError, ValueError):
        return int((folder / CREATOR).read_text())
    return None


def reclaim_ipc_dirs() -> list[Path]:
    """Remove this user's ipc folders whose creating process is gone (killed before it could
    remove its own); the folders removed."""
    removed = []
    for folder in Path(tempfile.gettempdir()).glob(f"{IPC_PREFIX}*"):
        creator = _creator(folder)
        if creator is not None and not psutil.pid_exists(creator):
            remove_ipc_dir(folder)
            removed.append(folder)
    return removed


@contextlib.contextmanager
def ipc_dir() -> Iterator[Path]:
    """A fresh folder for ipc socket files, that only this user can enter, removed after the block.
    It names its creator (``CREATOR``, not in its name: a socket's path has 107 characters at
    most), so that ``reclaim_ipc_dirs``, run first, knows when a folder's creator is gone."""
    reclaim_ipc_dirs()
    folder = Path(tempfile.mkdtemp(prefix=IPC_PREFIX))
    (folder / CREATOR).write_text(str(os.getpid()))
    try:
        yield folder
    finally:
        remove_ipc_dir(folder)


def ipc_addresses(folder: Path) -> Addresses:
    """The two ipc:// endpoints inside ``folder``."""
    return Addresses(f"ipc://{folder}/requests", f"ipc://{folder}/outputs")


def tcp_addresses(url: str) -> Addresses:
    """``tcp://HOST:PORT`` → requests on PORT, outputs on PORT+1; ValueError if malformed."""
    host, port = tcp_endpoint(url, ports=2)
    return Addresses(f"tcp://{host}:{port}", f"tcp://{host}:{port + 1}")


def is_loopback(address: str) -> bool:
    """True for ipc:// and for tcp:// on a loopback host; a wildcard is not loopback."""
    parts = urlsplit(address)
    if parts.scheme == "ipc":
        return True
    host = parts.hostname or ""
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _socket(ctx: zmq.Context, kind: int, linger_ms: int) -> zmq.Socket:
    sock = ctx.socket(kind)
    sock.setsockopt(zmq.LINGER, linger_ms)
    return sock


def bind_engine(ctx: zmq.Context, addrs: Addresses, linger_ms: int = 1000) -> tuple[zmq.Socket, zmq.Socket]:
    """The engine's sockets, bound: (requests PULL, outputs PUSH)."""
    requests = _socket(ctx, zmq.PULL, linger_ms)
    outputs = _socket(ctx, zmq.PUSH, linger_ms)
    try:
        requests.bind(addrs.requests)
        outputs.bind(addrs.outputs)
    except zmq.ZMQError:
        requests.close(0)
        outputs.close(0)
        raise
    return requests, outputs


def connect_frontend(ctx: zmq.Context, addrs: Addresses, linger_ms: int = 0) -> tuple[zmq.Socket, zmq.Socket]:
    """The frontend's sockets, connected: (requests PUSH, outputs PULL)."""
    requests = _socket(ctx, zmq.PUSH, linger_ms)
    outputs = _socket(ctx, zmq.PULL, linger_ms)
    requests.connect(addrs.requests)
    outputs.connect(addrs.outputs)
    return requests, outputs


def send(sock: zmq.Socket, frames: Sequence[Any], track: bool = False) -> list[zmq.MessageTracker]:
    """Send ``frames`` as one multipart message without copying them.

    With ``track``, frames go one by one and the result holds a tracker for
    every frame: wait on all of them before reusing any sent buffer.
    """
    if not track:
        sock.send_multipart(frames, copy=False)
        return []
    last = len(frames) - 1
    return [
        sock.send(frame, zmq.SNDMORE if i < last else 0, copy=False, track=True)
        for i, frame in enumerate(frames)
    ]


def recv(sock: zmq.Socket, timeout_s: float | None = None) -> list[zmq.Frame]:
    """One multipart message as zero-copy frames; TransportTimeout if none in time."""
    if timeout_s is not None and not sock.poll(int(timeout_s * 1000), zmq.POLLIN):
        raise TransportTimeout(f"nothing received within {timeout_s:g} s")
    return sock.recv_multipart(copy=False)


def is_ping(frames: Sequence[Any]) -> bool:
    """Whether a received message is the empty message."""
    return len(frames) == 1 and memoryview(frames[0]).nbytes == 0


def round_trip(push: zmq.Socket, pull: zmq.Socket, timeout_s: float) -> float:
    """Seconds for an empty message to go out and an empty reply to come back.

    The other side must answer ``PING`` with ``PING`` (the engine does); any
    other message in between is an error, since the floor must be measured
    on a quiet link.
    """
    start = time.perf_counter()
    send(push, [PING])
    reply = recv(pull, timeout_s)
    elapsed = time.perf_counter() - start
    if not is_ping(reply):
        raise RuntimeError("expected an empty reply to the empty message, got a message with content")
    return elapsed


def round_trip_floor(push: zmq.Socket, pull: zmq.Socket, count: int, timeout_s: float = 5.0) -> list[float]:
    """``count`` empty-message round trips: the transport floor, in seconds."""
    return [round_trip(push, pull, timeout_s) for _ in range(count)]


def _unix_reader(sock: socket.socket, other_end: socket.socket, size: int) -> None:
    """Child side of the unix-socket stream: read messages of ``size`` bytes, ack each with one byte.

    It closes its copy of the writer's end first, so that the writer's death (even kill -9) ends
    it: otherwise it would wait forever, holding every pipe it inherited (the runner's among them).
    """
    other_end.close()
    while True:
        with fresh_mapping(size) as memory, memoryview(memory) as view:
            got = 0
            while got < size:
                n = sock.recv_into(view[got:])
                if n == 0:
                    return
                got += n
        sock.sendall(b"k")


def fresh_mapping(size: int) -> mmap.mmap:
    """``size`` bytes of memory no page of which is faulted in yet, of the kind the engine
    receives a large frame into: glibc maps such a block on its own (``heap.fresh_memory``)
    where no free chunk of its heap holds it, anonymous and private, with no huge-page
    advice, and its 4 KiB pages fault in as the bytes arrive.

    Not a numpy array: numpy advises huge pages for its large ones, and on a VM that hands
    free memory to its host those fault in slowly after a rest and fast right after a free,
    where 4 KiB pages fault in alike either way: the reference read by what the memory had
    last done, not by its socket (docs/measurements/2026-12-07-fresh-pages.md).
    """
    return mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE)


class UnixStream:
    """The same bytes over a plain unix socket to another process: the reference for ipc GB/s.

    No framing library in between: each ``sample()`` is send-all → the reader
    has every byte (in fresh memory) → one-byte ack. The reader stays up, so
    samples can be interleaved with the measurement they are compared to.
    """

    def __init__(self, frames: Sequence[Any]) -> None:
        self.views = [memoryview(frame).cast("B") for frame in frames]
        size = sum(v.nbytes for v in self.views)
        self.sock, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.reader = FORK.Process(target=_unix_reader, args=(child, self.sock, size))
        self.reader.start()
        child.close()

    def sample(self) -> float:
        """Seconds to stream the bytes once."""
        start = time.perf_counter()
        for view in self.views:
            self.sock.sendall(view)
        if self.sock.recv(1) != b"k":
            raise RuntimeError("unix-socket reader ended early")
        return time.perf_counter() - start

    def close(self) -> None:
        """Stop the reader process and close the socket."""
        self.sock.close()
        kill_tree(self.reader.pid)
        self.reader.join(5)

    def __enter__(self) -> UnixStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Memcpy:
    """One plain copy of the same bytes into memory faulted in beforehand: the reference for shm GB/s.

    A transport that places the payload in shared memory once cannot beat
    this; one that streams it through a socket pays it at least twice (into
    and out of the kernel).
    """

    def __init__(self, frames: Sequence[Any]) -> None:
        self.sources = [np.frombuffer(memoryview(frame).cast("B"), np.uint8) for frame in frames]
        self.target = np.ones(sum(s.nbytes for s in self.sources), np.uint8)  # ones: every page faulted in

    def sample(self) -> float:
        """Seconds to copy the bytes once."""
        start = time.perf_counter()
        offset = 0
        for source in self.sources:
            np.copyto(self.target[offset : offset + source.nbytes], source)
            offset += source.nbytes
        return time.perf_counter() - start
