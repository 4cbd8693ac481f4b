"""Caches of multimodal tensors by content hash, on both ends of either hop (docs/cache.md).

The first hop's ends are the frontend and the engine; the second hop's (the
fanout scenario) are the engine core, which plays the frontend's part
(``FrontendCache``), and each of its workers, which plays the engine's
(``EngineCache``): the same classes, the same rules.

Real traffic sends the same image again (chat turns, re-attached
screenshots); serving stacks answer with caches, and this module is the two
kinds serbench measures:

* ``lru``: the frontend and the engine each keep a bounded LRU of tensors by
  hash, the same capacity and the same order of lookups on both sides, so
  the frontend knows exactly what the engine holds (a mirrored cache, as
  vLLM's sender/receiver caches). On a hit the frontend sends a reference
  (the hash) instead of the tensor; the engine resolves it from its LRU, and
  a reference to a hash it no longer holds is an error (``CacheError``), never
  a guess.
* ``shm``: a single-writer shared-memory object store (``Store``): the
  frontend copies a tensor into a region both sides map on its first sight
  and sends (offset, length, hash) references, hit or miss; the engine makes
  tensors that view the region. Eviction is FIFO: the store is a ring, and
  space is taken back oldest entry first, never from an entry a request in
  flight still references (that tensor then travels inline, a miss).

``none`` is today's behaviour: every tensor travels every time.

The unit cached is one tensor field of one multimodal item at least
``MIN_BYTES`` large, keyed ``<item hash>/<field key>`` (the item hash is the
workload's ``mm_hashes`` entry, or the ``identifier`` of the vllm layout). A
reference travels *inside the backend's own message*, in place of the tensor:
a string leaf (``PREFIX`` + JSON of ``Ref``), which every backend carries as
it carries any string, pickle and msgpack alike. It names the tensor's
``digest`` (CRC of dtype, shape and bytes, computed by the frontend outside
the timed path): the engine compares the tensor it resolved with it after
the request (``verify_hits``), so a hit that returns the wrong tensor is an
integrity failure like a corrupted frame.
"""

from __future__ import annotations

import zlib
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import msgspec
import numpy as np

from serbench import lazy, shm
from serbench.workloads.messages import EngineCoreRequest, MultiModalKwargs, MultiModalKwargsItem
from serbench.workloads.tree import array_bytes, is_array

torch = lazy.torch(__name__)  # imported on first use (serbench.lazy)

MODES = ("none", "lru", "shm")
PREFIX = "\x00serbench-cache:"
MIN_BYTES = 1024  # smaller tensors travel inline: a reference would be about as large
ALIGN = 64


class CacheError(RuntimeError):
    """A reference the engine cannot resolve, or a cache used as it cannot be."""


class Ref(msgspec.Struct, array_like=True, omit_defaults=True):
    """What travels in place of a cached tensor: its key and digest, and in the shm store where
    it is and what it is (offset, length, dtype, shape)."""

    key: str
    digest: int
    offset: int = -1
    length: int = 0
    dtype: str = ""
    shape: list[int] = []
    serial: int = -1  # shm: which write of the store put it there (the engine tells hits by it)

    def leaf(self) -> str:
        return PREFIX + msgspec.json.encode(self).decode()


def is_ref(leaf: Any) -> bool:
    return isinstance(leaf, str) and leaf.startswith(PREFIX)


def parse_ref(leaf: str) -> Ref:
    """A reference from its leaf; CacheError if it is not one."""
    try:
        return msgspec.json.decode(leaf[len(PREFIX) :], type=Ref)
    except msgspec.DecodeError as exc:
        raise CacheError(f"malformed cache reference {leaf[:80]!r}: {exc}") from None


def cacheable(leaf: Any) -> bool:
    return is_array(leaf) and leaf.nbytes >= MIN_BYTES


def digest(leaf: torch.Tensor | np.ndarray) -> int:
    """CRC of a tensor's dtype, shape and bytes (``tree.payload_checksum`` of one leaf)."""
    crc = zlib.crc32(f"{leaf.dtype}{tuple(leaf.shape)}".encode())
    return zlib.crc32(array_bytes(leaf), crc)


def map_items(request: EngineCoreRequest, fn: Callable[[str, Any], Any]) -> EngineCoreRequest:
    """``request`` with each multimodal field's data replaced by ``fn(key, data)``, the key
    ``<item hash>/<field key>``, in a fixed order (both sides walk it the same). Either layout;
    a request without multimodal items comes back as it is."""
    replace = msgspec.structs.replace
    if request.mm_features:
        features = [
            replace(f, data=[replace(e, data=fn(f"{f.identifier}/{e.key}", e.data)) for e in f.data])
            if f.data is not None
            else f
            for f in request.mm_features
        ]
        return replace(request, mm_features=features)
    if request.mm_inputs is None or not request.mm_hashes:
        return request
    hashes = iter(request.mm_hashes)
    by_modality = {}
    for modality, items in request.mm_inputs.items_by_modality.items():
        rebuilt = []
        for item in items:
            item_hash = next(hashes)
            fields = {k: replace(e, data=fn(f"{item_hash}/{k}", e.data)) for k, e in item.fields.items()}
            rebuilt.append(MultiModalKwargsItem(fields))
        by_modality[modality] = rebuilt
    return replace(request, mm_inputs=MultiModalKwargs(by_modality))


def digests(request: EngineCoreRequest, known: dict[str, int] | None = None) -> dict[str, int]:
    """Every cacheable tensor's digest by key (``known`` ones not computed again, and kept)."""
    found = known if known is not None else {}

    def take(key: str, leaf: Any) -> Any:
        if cacheable(leaf) and key not in found:
            found[key] = digest(leaf)
        return leaf

    map_items(request, take)
    return found


def all_refs(request: EngineCoreRequest, mode: str) -> EngineCoreRequest:
    """``request`` as an all-hit message (every cacheable tensor a reference): what the backend
    must round-trip before a cached case is timed."""

    def ref(key: str, leaf: Any) -> Any:
        if not cacheable(leaf):
            return leaf
        if mode != "shm":
            return Ref(key, 0).leaf()
        return Ref(key, 0, 0, leaf.nbytes, str(leaf.dtype), list(leaf.shape)).leaf()

    return map_items(request, ref)


# ---------------------------------------------------------------- the LRU, either side


@dataclass
class Lru:
    """A bounded LRU of tensors by key; an entry larger than the capacity is not kept."""

    capacity: int
    entries: OrderedDict[str, Any] = field(default_factory=OrderedDict)
    held_bytes: int = 0
    evictions: int = 0

    def get(self, key: str) -> Any | None:
        tensor = self.entries.get(key)
        if tensor is not None:
            self.entries.move_to_end(key)
        return tensor

    def put(self, key: str, tensor: Any) -> None:
        """Keep ``tensor`` as the newest entry (replacing one under the same key: a sender that sent
        a tensor its receiver holds leaves both LRUs in the same order), evicting the oldest."""
        if tensor.nbytes > self.capacity:
            return
        replaced = self.entries.pop(key, None)
        if replaced is not None:
            self.held_bytes -= replaced.nbytes
        self.entries[key] = tensor
        self.held_bytes += tensor.nbytes
        while self.held_bytes > self.capacity:
            _, old = self.entries.popitem(last=False)
            self.held_bytes -= old.nbytes
            self.evictions += 1


def owned(leaf: Any) -> Any:
    """A tensor that arrived whole, as the receiver's own memory: what an LRU keeps when the
    frames it views are a region the transport will write again (shared memory)."""
    return leaf.clone() if hasattr(leaf, "clone") else leaf.copy()


def mirror_disagreement(
    front: FrontendCache, evictions: int | None, receiver: str = "engine", sender: str = "frontend"
) -> str | None:
    """Why the sender's cache ``front`` and the receiver's that mirrors it (``evictions``: the
    receiver's count) disagree, or None: two lrus that saw the same keys in the same order evict
    the same number of tensors. The sides are named in the message."""
    if front.mode != "lru" or evictions == front.evictions:
        return None
    return (
        f"the {receiver}'s lru evicted {evictions} tensors, the {sender}'s {front.evictions}: "
        "the mirrored caches disagree"
    )


# ---------------------------------------------------------------- the shm object store, frontend side


@dataclass
class Entry:
    offset: int
    length: int
    serial: int
    pins: int = 0


class Store:
    """The frontend's side of the shared-memory object store: one writer, FIFO eviction.

    Entries are laid out as in a ring, in the order they were added: a new
    one goes after the newest (wrapping to the start when the end is too
    short), and the entries it overlaps, the oldest, are evicted. An entry
    referenced by a request still in flight is pinned; when room would
    need a pinned entry, ``put`` returns None and the tensor travels inline.
    """

    def __init__(self, region: shm.Region) -> None:
        self.region = region
        self.size = region.size
        self.entries: OrderedDict[str, Entry] = OrderedDict()  # oldest first
        self.head = 0
        self.evictions = 0
        self.writes = 0

    @property
    def held_bytes(self) -> int:
        return sum(e.length for e in self.entries.values())

    def get(self, key: str) -> Entry | None:
        return self.entries.get(key)

    def put(self, key: str, leaf: Any) -> Entry | None:
        """Copy ``leaf`` into the store; None when it cannot have room now."""
        length = leaf.nbytes
        span = -(-length // ALIGN) * ALIGN
        if span > self.size:
            return None
        start = self.head if self.head + span <= self.size else 0
        end = start + span
        doomed = [k for k, e in self.entries.items() if e.offset < end and start < e.offset + e.length]
        if any(self.entries[k].pins for k in doomed):
            return None
        for k in doomed:
            del self.entries[k]
            self.evictions += 1
        dst = np.frombuffer(self.region.view[start : start + length], np.uint8)
        np.copyto(dst, np.frombuffer(array_bytes(leaf), np.uint8))
        entry = Entry(start, length, self.writes)
        self.writes += 1
        self.entries[key] = entry
        self.head = start + span
        return entry


# ---------------------------------------------------------------- the frontend


@dataclass
class Prepared:
    """What the cache did to one request: lookups, hits, and bytes written to the store."""

    lookups: int = 0
    hits: int = 0
    stored_bytes: int = 0


class FrontendCache:
    """The frontend's cache: ``prepare`` swaps the tensors the engine holds for references.

    ``mode`` is ``lru`` or ``shm`` (with ``store``); ``done(request_id)`` unpins
    the store entries a request referenced, once the engine has checked it.
    """

    def __init__(self, mode: str, capacity: int, store: Store | None = None) -> None:
        if mode not in ("lru", "shm") or (mode == "shm") != (store is not None):
            raise CacheError(f"a frontend cache is lru, or shm with a store; not {mode!r}")
        self.mode = mode
        self.capacity = capacity
        self.lru = Lru(capacity) if mode == "lru" else None
        self.store = store
        self.pinned: dict[str, list[Entry]] = {}
        self.lookups = self.hits = 0

    @property
    def held_bytes(self) -> int:
        return self.lru.held_bytes if self.lru is not None else self.store.held_bytes

    @property
    def evictions(self) -> int:
        return self.lru.evictions if self.lru is not None else self.store.evictions

    def prepare(
        self, request: EngineCoreRequest, known: dict[str, int]
    ) -> tuple[EngineCoreRequest, Prepared]:
        """The message to send for ``request``: each cacheable tensor the engine holds (or, over
        shm, that fits the store) replaced by a reference; ``known`` holds their digests."""
        done = Prepared()
        pins: list[Entry] = []

        def swap(key: str, leaf: Any) -> Any:
            if not cacheable(leaf):
                return leaf
            done.lookups += 1
            if self.lru is not None:
                if self.lru.get(key) is not None:
                    done.hits += 1
                    return self.hit(key, leaf, Ref(key, known[key]))
                self.lru.put(key, leaf)
                return leaf
            entry = self.store.get(key)
            hit = entry is not None
            if not hit:
                entry = self.store.put(key, leaf)
                if entry is None:
                    return leaf  # no room that nothing in flight uses: it travels inline
                done.stored_bytes += entry.length
            entry.pins += 1
            pins.append(entry)
            ref = Ref(
                key, known[key], entry.offset, entry.length, str(leaf.dtype), list(leaf.shape), entry.serial
            )
            if not hit:
                return ref.leaf()
            done.hits += 1
            return self.hit(key, leaf, ref)

        message = map_items(request, swap)
        if pins:
            self.pinned.setdefault(request.request_id, []).extend(pins)
        self.lookups += done.lookups
        self.hits += done.hits
        return message, done

    def hit(self, key: str, leaf: Any, ref: Ref) -> str:
        """A hit: the reference that travels instead of ``leaf``."""
        return ref.leaf()

    def done(self, request_id: str) -> None:
        for entry in self.pinned.pop(request_id, ()):
            entry.pins -= 1


# ---------------------------------------------------------------- the engine


@dataclass
class Resolved:
    """What the engine's cache did to one request: its cacheable tensors (``lookups``), those it
    had before this request (``found``: its hits, as the engine measures them), and every tensor it
    resolved from a reference (to check against the references' digests)."""

    lookups: int = 0
    found: int = 0
    hits: list[tuple[Ref, Any]] = field(default_factory=list)


def _view(region: shm.Region, ref: Ref) -> torch.Tensor:
    if not (ref.offset >= 0 and ref.offset + ref.length <= region.size):
        raise CacheError(f"cache reference for {ref.key!r} is outside the store ({region.size} bytes)")
    dtype = getattr(torch, ref.dtype.removeprefix("torch."), None)
    if not isinstance(dtype, torch.dtype):
        raise CacheError(f"cache reference for {ref.key!r} names no dtype: {ref.dtype!r}")
    raw = torch.frombuffer(region.view[ref.offset : ref.offset + ref.length], dtype=torch.uint8)
    return raw.view(dtype).view(ref.shape)


class EngineCache:
    """The engine's cache: ``resolve`` swaps references for the tensors they name.

    ``lru``: an LRU mirroring the frontend's (same capacity, same walk), which
    keeps each tensor that arrives whole (``own`` makes it the engine's memory
    when the frames it views are not, as over a shared-memory transport);
    ``shm``: views of the mapped store.
    """

    def __init__(
        self,
        mode: str,
        capacity: int,
        region: shm.Region | None = None,
        own: Callable[[Any], Any] | None = None,
    ) -> None:
        if mode not in ("lru", "shm") or (mode == "shm") != (region is not None):
            raise CacheError(f"an engine cache is lru, or shm with a region; not {mode!r}")
        self.mode = mode
        self.lru = Lru(capacity) if mode == "lru" else None
        self.region = region
        self.own = own or (lambda leaf: leaf)
        self.seen: dict[str, tuple[int, int]] = {}  # shm: (serial, bytes) of each entry it has read
        self.lookups = self.hits = 0

    @property
    def held_bytes(self) -> int:
        return self.lru.held_bytes if self.lru is not None else sum(n for _, n in self.seen.values())

    @property
    def evictions(self) -> int:
        return self.lru.evictions if self.lru is not None else 0

    def resolve(self, request: EngineCoreRequest) -> tuple[EngineCoreRequest, Resolved]:
        """``request`` with every reference resolved; CacheError naming the request and the key
        for one that cannot be (evicted, never sent, or outside the store)."""
        done = Resolved()

        def take(key: str, leaf: Any) -> Any:
            if is_ref(leaf):
                ref = parse_ref(leaf)
                if ref.key != key:
                    raise CacheError(f"request {request.request_id!r}: reference to {ref.key!r} in {key!r}")
                done.lookups += 1
                done.found += self.lru is not None or self.seen.get(key, (None,))[0] == ref.serial
                tensor = self._lookup(ref)
                if tensor is None:
                    raise CacheError(
                        f"request {request.request_id!r} references {key!r}, which the engine's "
                        f"{self.mode} cache no longer holds (evicted or never sent): the two caches disagree"
                    )
                done.hits.append((ref, tensor))
                return tensor
            if cacheable(leaf):
                done.lookups += 1
                if self.lru is not None:
                    self.lru.put(key, self.own(leaf))
            return leaf

        resolved = map_items(request, take)
        self.lookups += done.lookups
        self.hits += done.found
        return resolved, done

    def _lookup(self, ref: Ref) -> Any | None:
        if self.lru is not None:
            return self.lru.get(ref.key)
        if ref.offset < 0:
            return None
        tensor = _view(self.region, ref)
        self.seen[ref.key] = (ref.serial, ref.length)
        return tensor


def verify_hits(request_id: str, hits: Iterable[tuple[Ref, Any]]) -> str | None:
    """Compare each resolved tensor with its reference's digest; why not, or None."""
    for ref, tensor in hits:
        actual = digest(tensor)
        if actual != ref.digest:
            return (
                f"request {request_id!r}: the cache resolved {ref.key!r} to a different tensor "
                f"(digest {actual:#010x}, referenced {ref.digest:#010x})"
            )
    return None
