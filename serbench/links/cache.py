"""Caches of multimodal tensors by content hash, on both ends of either hop (docs/cache.md).

The first hop's ends are the frontend and the engine; the second hop's (fanout) are the engine
core, which plays the frontend's part (``FrontendCache``), and each worker, which plays the
engine's (``EngineCache``): the same classes, the same rules. Real traffic sends the same image
again, and serving stacks answer with caches; these are the two kinds serbench measures:

* ``lru``: each end keeps a bounded LRU of tensors by hash, mirrored (same capacity, same
  order of lookups), so on a hit the frontend sends a reference instead of the tensor; a
  reference the engine no longer holds is an error (``CacheError``), never a guess.
* ``shm``: a single-writer shared-memory ring (``Store``) the frontend copies a tensor into on
  first sight; every request sends references into it, and space is taken back oldest first,
  never from an entry a request in flight still references (that tensor travels inline).

``none`` sends every tensor every time. A request type's ``Walk`` says what its cached units
are (serbench's own, ``TENSORS``: each tensor field of an item, of at least ``MIN_BYTES``; a
plugin registers its own, ``register``). A reference travels *inside the backend's own
message* as a string (``PREFIX`` + JSON of ``Ref``), so every backend carries it; it names the
payload's digest (``tree.payload_checksum``), which the engine checks after the request
(``verify_hits``): a hit that returns the wrong tensor is an integrity failure.
"""

from __future__ import annotations

import copy
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import msgspec
import numpy as np

from serbench.links import shm
from serbench.model.errors import CacheError
from serbench.runtime import lazy
from serbench.workloads import Workload
from serbench.workloads.messages import EngineCoreRequest, MultiModalKwargs, MultiModalKwargsItem
from serbench.workloads.tree import array_bytes, is_array, payload_bytes, payload_checksum

torch = lazy.torch(__name__)  # imported on first use (serbench.runtime.lazy)

MODES = ("none", "lru", "shm")
PREFIX = "\x00serbench-cache:"
MIN_BYTES = 1024  # smaller tensors travel inline: a reference would be about as large


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


def cacheable(payload: Any) -> bool:
    """A payload worth a reference: a tensor, or a plugin's item of them (a mapping, as vLLM's
    ``MultiModalKwargsItem``), of at least ``MIN_BYTES``."""
    if is_array(payload):
        return payload.nbytes >= MIN_BYTES
    return isinstance(payload, Mapping) and payload_bytes(payload) >= MIN_BYTES


class Walk(Protocol):
    """How the caches meet one request type: where its cached units (payloads) are, where a
    reference travels in place of one, and what the shm store holds of one."""

    def map(self, request: Any, fn: Callable[[str, Any], Any]) -> Any:
        """``request`` with each payload, or the reference string sent in its place, replaced by
        ``fn(key, it)``: a payload, or a reference string (then sent in its place). A fixed order:
        both sides walk a request the same."""
        ...

    def stored(self, payload: Any) -> Any:
        """The array the shm store holds of ``payload``."""
        ...

    def loaded(self, array: Any) -> Any:
        """The payload of an array the store holds (``stored``'s inverse; it may view the array)."""
        ...


class Tensors:
    """serbench's own requests: each multimodal field's tensor is a payload, keyed ``<item
    hash>/<field key>`` (either layout), its reference a string leaf in the tensor's place; the
    store holds the tensor."""

    def map(self, request: EngineCoreRequest, fn: Callable[[str, Any], Any]) -> EngineCoreRequest:
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

    def stored(self, payload: Any) -> Any:
        return payload

    def loaded(self, array: Any) -> Any:
        return array


TENSORS = Tensors()
WALKS: dict[type, Walk] = {EngineCoreRequest: TENSORS}  # by request type; plugins' by ``register``


def register(workload: Workload) -> None:
    """Let the caches walk ``workload``'s requests: a plugin's request type brings its walk as
    ``workload.cache_walk`` (serbench's own requests have theirs). Called where a process builds
    the workload it caches, before it forks the other side."""
    walk = getattr(workload, "cache_walk", None)
    if walk is not None:
        WALKS[workload.request_type] = walk


def walk_of(request: Any) -> Walk:
    """The walk of ``request``'s type; CacheError for a type no workload registered."""
    walk = WALKS.get(type(request))
    if walk is None:
        kind = type(request)
        raise CacheError(
            f"the cache cannot walk {kind.__module__}.{kind.__qualname__} requests (none registered)"
        )
    return walk


def digests(request: Any, known: dict[str, int] | None = None) -> dict[str, int]:
    """Every cacheable payload's digest by key (``known`` ones not computed again, and kept)."""
    found = known if known is not None else {}

    def take(key: str, leaf: Any) -> Any:
        if cacheable(leaf) and key not in found:
            found[key] = payload_checksum(leaf)
        return leaf

    walk_of(request).map(request, take)
    return found


def all_refs(request: Any, mode: str) -> Any:
    """``request`` as an all-hit message (every cacheable payload a reference): what the backend
    must round-trip before a cached case is timed."""
    walk = walk_of(request)

    def ref(key: str, leaf: Any) -> Any:
        if not cacheable(leaf):
            return leaf
        if mode != "shm":
            return Ref(key, 0).leaf()
        array = walk.stored(leaf)
        return Ref(key, 0, 0, array.nbytes, str(array.dtype), list(array.shape)).leaf()

    return walk.map(request, ref)


# ---------------------------------------------------------------- the LRU, either side


@dataclass
class Lru:
    """A bounded LRU of payloads by key (sized by their arrays); one larger than the capacity is
    not kept."""

    capacity: int
    entries: OrderedDict[str, Any] = field(default_factory=OrderedDict)
    held_bytes: int = 0
    evictions: int = 0

    def get(self, key: str) -> Any | None:
        tensor = self.entries.get(key)
        if tensor is not None:
            self.entries.move_to_end(key)
        return tensor

    def put(self, key: str, payload: Any) -> None:
        """Keep ``payload`` as the newest entry (replacing one under the same key: a sender that sent
        a payload its receiver holds leaves both LRUs in the same order), evicting the oldest."""
        size = payload_bytes(payload)
        if size > self.capacity:
            return
        replaced = self.entries.pop(key, None)
        if replaced is not None:
            self.held_bytes -= payload_bytes(replaced)
        self.entries[key] = payload
        self.held_bytes += size
        while self.held_bytes > self.capacity:
            _, old = self.entries.popitem(last=False)
            self.held_bytes -= payload_bytes(old)
            self.evictions += 1


def owned(payload: Any) -> Any:
    """A payload that arrived whole, as the receiver's own memory: what an LRU keeps when the
    frames it views are a region the transport will write again (shared memory). A plugin's
    payload (vLLM's item) is copied whole, its tensors with it."""
    if is_array(payload):
        return payload.clone() if hasattr(payload, "clone") else payload.copy()
    return copy.deepcopy(payload)


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
    dtype: str  # of the array stored
    shape: list[int]
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
        """Copy the array ``leaf`` into the store; None when it cannot have room now."""
        length = leaf.nbytes
        span = shm.aligned(length)
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
        entry = Entry(start, length, self.writes, str(leaf.dtype), list(leaf.shape))
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

    def prepare(self, request: Any, known: dict[str, int]) -> tuple[Any, Prepared]:
        """The message to send for ``request``: each cacheable payload the engine holds (or, over
        shm, that fits the store) replaced by a reference; ``known`` holds their digests."""
        done = Prepared()
        pins: list[Entry] = []
        walk = walk_of(request)

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
                entry = self.store.put(key, walk.stored(leaf))
                if entry is None:
                    return leaf  # no room that nothing in flight uses: it travels inline
                done.stored_bytes += entry.length
            entry.pins += 1
            pins.append(entry)
            ref = Ref(key, known[key], entry.offset, entry.length, entry.dtype, entry.shape, entry.serial)
            if not hit:
                return ref.leaf()
            done.hits += 1
            return self.hit(key, leaf, ref)

        message = walk.map(request, swap)
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
    """What the engine's cache did to one request: its cacheable payloads (``lookups``), those it
    had before this request (``found``: its hits, as the engine measures them), and every payload
    it resolved from a reference (to check against the references' digests)."""

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

    def resolve(self, request: Any) -> tuple[Any, Resolved]:
        """``request`` with every reference resolved; CacheError naming the request and the key
        for one that cannot be (evicted, never sent, or outside the store)."""
        done = Resolved()
        walk = walk_of(request)

        def take(key: str, leaf: Any) -> Any:
            if is_ref(leaf):
                ref = parse_ref(leaf)
                if ref.key != key:
                    raise CacheError(f"request {request.request_id!r}: reference to {ref.key!r} in {key!r}")
                done.lookups += 1
                done.found += self.lru is not None or self.seen.get(key, (None,))[0] == ref.serial
                held = self._lookup(ref)
                if held is None:
                    raise CacheError(
                        f"request {request.request_id!r} references {key!r}, which the engine's "
                        f"{self.mode} cache no longer holds (evicted or never sent): the two caches disagree"
                    )
                payload = held if self.lru is not None else walk.loaded(held)
                done.hits.append((ref, payload))
                return payload
            if cacheable(leaf):
                done.lookups += 1
                if self.lru is not None:
                    self.lru.put(key, self.own(leaf))
            return leaf

        resolved = walk.map(request, take)
        self.lookups += done.lookups
        self.hits += done.found
        return resolved, done

    def _lookup(self, ref: Ref) -> Any | None:
        """What the cache holds under ``ref``: the payload (lru), the array stored of it (shm)."""
        if self.lru is not None:
            return self.lru.get(ref.key)
        if ref.offset < 0:
            return None
        tensor = _view(self.region, ref)
        self.seen[ref.key] = (ref.serial, ref.length)
        return tensor


def verify_hits(request_id: str, hits: Iterable[tuple[Ref, Any]]) -> str | None:
    """Compare each resolved payload with its reference's digest; why not, or None."""
    for ref, tensor in hits:
        actual = payload_checksum(tensor)
        if actual != ref.digest:
            return (
                f"request {request_id!r}: the cache resolved {ref.key!r} to a different tensor "
                f"(digest {actual:#010x}, referenced {ref.digest:#010x})"
            )
    return None
