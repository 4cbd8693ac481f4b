"""A POSIX shared-memory region beside ZeroMQ: payload frames placed once, referenced by (offset, length).

The frontend owns one region per session (docs/shm.md). For each message it writes the
serializer's large frames into the region — one copy, the only one on the way, made by several
threads at once (``Placer``) — and sends the rest over ZeroMQ with ``[frame index, offset,
length]`` references. The engine maps the same region read-only and decodes views of it; when
it is done with a request it says so (``release``), and only then may the frontend write there
again.

One ring, not a segment per request: a fresh segment's pages fault in on first touch
(docs/measurements/2026-12-02-shm.md), while a region made once is faulted in before anything
is timed (``MAP_POPULATE``). A ring with in-order reclaim (``Ring``) is the simplest allocator
that lets requests finish out of order; the frontend waits when it is full.

A segment is created under ``/dev/shm`` with mode 0600 and an unguessable name
(``serbench-shm-<pid>-<random>``); the frontend unlinks it as soon as the engine has mapped it,
so the memory goes when both processes do, however they end. Only a crash between create and
attach leaves a name behind; ``reclaim_orphans`` removes those whose creator is gone.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import re
import secrets
import stat
from collections import deque
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import psutil

from serbench.model.errors import ShmError

SHM_DIR = Path("/dev/shm")
PREFIX = "serbench-shm-"
NAME = re.compile(rf"{PREFIX}(\d+)-[0-9a-f]{{32}}")
ALIGN = 64  # each placed frame starts on a cache line
INLINE_BELOW = 64 * 1024  # smaller frames go over ZeroMQ, which copies them into its own message anyway
SPLIT_FROM = 1 << 20  # frames this large are copied by every copy thread, a slice each
MAX_COPY_THREADS = 4


def aligned(n: int) -> int:
    """``n`` bytes rounded up to a whole number of ``ALIGN``s: where the next placed frame starts."""
    return -(-n // ALIGN) * ALIGN


def _creator(name: str) -> int | None:
    match = NAME.fullmatch(name)
    return int(match.group(1)) if match else None


class Region:
    """One shared-memory segment mapped into this process.

    ``create`` makes a new one (this process writes it), ``attach`` maps an
    existing one read-only by name (after checking it is one of ours). With
    ``populate`` every page is faulted in now, so that no timed write pays it.
    """

    def __init__(self, name: str, mapping: mmap.mmap, owner: bool) -> None:
        self.name = name
        self.size = len(mapping)
        self.owner = owner
        self._mmap = mapping
        self.view = memoryview(mapping)

    @classmethod
    def create(cls, size: int, populate: bool = True) -> Region:
        if size <= 0:
            raise ShmError(f"a region needs at least one byte, asked for {size}")
        name = f"{PREFIX}{os.getpid()}-{secrets.token_hex(16)}"
        path = SHM_DIR / name
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            os.fchmod(fd, 0o600)  # whatever the umask: owner only
            os.ftruncate(fd, size)
            flags = mmap.MAP_SHARED | (mmap.MAP_POPULATE if populate else 0)
            mapping = mmap.mmap(fd, size, flags, mmap.PROT_READ | mmap.PROT_WRITE)
        except BaseException:
            path.unlink(missing_ok=True)
            raise
        finally:
            os.close(fd)
        return cls(name, mapping, owner=True)

    @classmethod
    def attach(cls, name: str, size: int, populate: bool = True) -> Region:
        """Map ``name`` read-only; ShmError unless it is a serbench segment of this user, of ``size``."""
        if not isinstance(name, str) or _creator(name) is None:
            raise ShmError(f"not a serbench shared-memory name: {name!r}")
        try:
            fd = os.open(SHM_DIR / name, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError as exc:
            raise ShmError(f"cannot open shared memory {name!r}: {exc.strerror} (another host?)") from None
        try:
            info = os.fstat(fd)
            if info.st_uid != os.getuid() or stat.S_IMODE(info.st_mode) & 0o077:
                raise ShmError(f"shared memory {name!r} is not private to this user")
            if info.st_size != size:
                raise ShmError(f"shared memory {name!r} has {info.st_size} bytes, expected {size}")
            flags = mmap.MAP_SHARED | (mmap.MAP_POPULATE if populate else 0)
            mapping = mmap.mmap(fd, size, flags, mmap.PROT_READ)
        finally:
            os.close(fd)
        return cls(name, mapping, owner=False)

    def unlink(self) -> None:
        """Remove the name: the memory stays while it is mapped, and nothing is left after."""
        (SHM_DIR / self.name).unlink(missing_ok=True)

    def close(self) -> None:
        """Unmap (and, for the owner, unlink). Views still held elsewhere keep the mapping until freed."""
        if self.owner:
            self.unlink()
        self.view.release()
        with contextlib.suppress(BufferError):  # a decoded tensor still views it: freed with the tensor
            self._mmap.close()

    def __enter__(self) -> Region:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass
class Block:
    """One message's space in the ring."""

    id: int
    offset: int
    length: int
    released: bool = False


class Ring:
    """Offsets in a region of ``size`` bytes, handed out in order and reclaimed in order.

    ``allocate`` takes space after the newest block (wrapping to the start
    when the end is too short); ``release`` marks a block free, and space is
    reused only once every older block is free too. So a byte is never handed
    out twice while its block is held: reuse before release is impossible by
    construction.
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self.blocks: deque[Block] = deque()
        self.by_id: dict[int, Block] = {}
        self.head = 0  # end of the newest block
        self.next_id = 0

    @property
    def held_bytes(self) -> int:
        return sum(b.length for b in self.blocks if not b.released)

    def allocate(self, nbytes: int) -> Block | None:
        """A block of at least ``nbytes`` (aligned), or None while the ring is too full for it."""
        length = aligned(max(nbytes, 1))
        if length > self.size:
            raise ShmError(f"a message of {nbytes} bytes cannot fit a region of {self.size}")
        start = self._fit(length)
        if start is None:
            return None
        block = Block(self.next_id, start, length)
        self.next_id += 1
        self.blocks.append(block)
        self.by_id[block.id] = block
        self.head = start + length
        return block

    def _fit(self, length: int) -> int | None:
        if not self.blocks:
            return 0
        tail = self.blocks[0].offset
        if self.head > tail:  # live space is [tail, head): free at the end, then before tail
            if self.head + length <= self.size:
                return self.head
            return 0 if length <= tail else None
        return self.head if self.head + length <= tail else None  # wrapped: free is [head, tail)

    def release(self, block_id: int) -> None:
        """Give a block back; ShmError for an unknown or already released one."""
        block = self.by_id.pop(block_id, None)
        if block is None:
            raise ShmError(f"release of block {block_id!r}, which is not held")
        block.released = True
        while self.blocks and self.blocks[0].released:
            self.blocks.popleft()
        if not self.blocks:
            self.head = 0


Ref = list[int]  # [frame index, offset, length]


@dataclass(frozen=True)
class Placement:
    """A message placed in the region: its block, the references and the frames that go inline."""

    block: int
    refs: list[Ref]
    inline: list[Any]


def split(frames: Sequence[Any]) -> tuple[list[tuple[int, memoryview]], list[Any]]:
    """(the frames to place, with their index; the frames that go inline)."""
    placed, inline = [], []
    for index, frame in enumerate(frames):
        view = memoryview(frame)
        if view.nbytes >= INLINE_BELOW:
            placed.append((index, view.cast("B")))
        else:
            inline.append(frame)
    return placed, inline


def placed_bytes(frames: Sequence[Any]) -> int:
    """Region bytes a message's frames take (0: nothing to place)."""
    return sum(aligned(view.nbytes) for _, view in split(frames)[0])


Copy = tuple[memoryview, memoryview]  # (region bytes, frame bytes) of the same length


def _shares(copies: Sequence[Copy], parts: int) -> list[list[Copy]]:
    """``copies`` cut into ``parts`` lists of about equal bytes: every frame of ``SPLIT_FROM``
    bytes or more in ``parts`` slices, one to each list; smaller frames to the first list."""
    shares: list[list[Copy]] = [[] for _ in range(parts)]
    for dst, src in copies:
        if src.nbytes < SPLIT_FROM:
            shares[0].append((dst, src))
            continue
        step = -(-src.nbytes // parts)
        for part, start in enumerate(range(0, src.nbytes, step)):
            shares[part].append((dst[start : start + step], src[start : start + step]))
    return shares


def _copy(share: Sequence[Copy]) -> None:
    for dst, src in share:  # numpy copies without the GIL, so the parts run at once
        np.copyto(np.frombuffer(dst, np.uint8), np.frombuffer(src, np.uint8))


class Placer:
    """The frontend's side of a region: place a message's frames, take releases back.

    A message's bytes are copied by ``threads`` threads at once (this one and a
    pool of the rest; by default one per CPU this process may run on, up to
    ``MAX_COPY_THREADS``): two cores copy faster than one, and the copy is the
    whole of shm's cost (docs/measurements/2026-12-02-shm.md). Close
    it (or use it as a context manager) to end the pool.
    """

    def __init__(self, region: Region, threads: int | None = None) -> None:
        self.region = region
        self.ring = Ring(region.size)
        self.threads = max(1, threads or min(MAX_COPY_THREADS, len(os.sched_getaffinity(0))))
        self._pool = ThreadPoolExecutor(self.threads - 1, "serbench-shm-copy") if self.threads > 1 else None

    def place(self, frames: Sequence[Any]) -> Placement | None:
        """Copy the large frames into the region; None while there is no room (wait for releases)."""
        placed, inline = split(frames)
        if not placed:
            return Placement(-1, [], inline)
        block = self.ring.allocate(sum(aligned(view.nbytes) for _, view in placed))
        if block is None:
            return None
        refs, copies, offset = [], [], block.offset
        for index, view in placed:
            copies.append((self.region.view[offset : offset + view.nbytes], view))
            refs.append([index, offset, view.nbytes])
            offset += aligned(view.nbytes)
        self._write(copies)
        return Placement(block.id, refs, inline)

    def _write(self, copies: Sequence[Copy]) -> None:
        first, *rest = _shares(copies, self.threads)
        running = [self._pool.submit(_copy, share) for share in rest if share] if self._pool else []
        _copy(first)
        for done in running:
            done.result()

    def release(self, block_id: int) -> None:
        self.ring.release(block_id)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()

    def __enter__(self) -> Placer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def gather(view: memoryview, refs: Any, inline: Sequence[Any]) -> list[Any]:
    """The message's frames in order: inline ones as received, placed ones as views of the region.

    ValueError for references that are malformed or point outside the region.
    """
    frames = list(inline)
    if not isinstance(refs, list):
        raise ValueError(f"shared-memory references must be a list, got {type(refs).__name__}")
    for ref in sorted(refs, key=lambda r: r[0] if isinstance(r, list) and r else -1):
        if not (isinstance(ref, list) and len(ref) == 3 and all(type(v) is int for v in ref)):
            raise ValueError(f"bad shared-memory reference {ref!r}: expected [index, offset, length]")
        index, offset, length = ref
        if not (0 <= index <= len(frames) and offset >= 0 and length >= 0 and offset + length <= len(view)):
            raise ValueError(f"shared-memory reference {ref!r} is outside the region ({len(view)} bytes)")
        frames.insert(index, view[offset : offset + length])
    return frames


def leftovers() -> list[Path]:
    """This user's serbench segments under ``SHM_DIR`` (named, so not yet unlinked)."""
    found = []
    for path in SHM_DIR.glob(f"{PREFIX}*"):
        with contextlib.suppress(OSError):
            if _creator(path.name) is not None and path.lstat().st_uid == os.getuid():
                found.append(path)
    return found


def reclaim_orphans() -> list[str]:
    """Unlink segments whose creating process is gone (a crash before attach); their names."""
    reclaimed = []
    for path in leftovers():
        creator = _creator(path.name)
        if creator is not None and not psutil.pid_exists(creator):
            path.unlink(missing_ok=True)
            reclaimed.append(path.name)
    return reclaimed
