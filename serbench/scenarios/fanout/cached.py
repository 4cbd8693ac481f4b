"""A cached fan-out's two halves (``--cache lru|shm``, docs/cache.md): the core keeps the sender's
cache, each worker the receiver's (``serbench.links.cache``, the first hop's caches).

The core sends each cached tensor the workers hold as a reference (``CoreCache.prepare``); each
worker resolves the references before it stamps the step and checks every tensor it resolved
against the reference's digest (``WorkerCache``); the core tallies the workers' acks, which must
agree with one another and with its own half (``CoreCache.account``). Both halves take a step's
new requests, which the case's ``Schedule`` reads out of a step and puts back, whatever its form.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from serbench.links import cache, shm
from serbench.model.errors import CacheError
from serbench.scenarios.fanout import broadcast
from serbench.scenarios.fanout.steps import check_step


class WorkerCache:
    """A worker's half of a cached fan-out: the receiver's cache (``cache.EngineCache``), made
    empty before the fork (each worker has its own copy), and the check of what it resolved."""

    def __init__(self, mode: str, capacity: int, region: shm.Region | None, own: bool) -> None:
        self.cache = cache.EngineCache(mode, capacity, region, own=cache.owned if own else None)
        self.hits: list[tuple[cache.Ref, Any]] = []  # the last step's tensors resolved from references

    def resolve(self, requests: list[Any]) -> tuple[list[Any], broadcast.Resolution]:
        """A step's new ``requests`` with every reference swapped for the tensor it names, and
        what the cache did; CacheError for a reference the cache cannot resolve (evicted)."""
        resolved_requests, lookups, found, self.hits = [], 0, 0, []
        for request in requests:
            resolved, done = self.cache.resolve(request)
            resolved_requests.append(resolved)
            lookups, found = lookups + done.lookups, found + done.found
            self.hits += done.hits
        held = self.cache
        resolution = broadcast.Resolution(lookups, found, held.held_bytes, held.evictions)
        return resolved_requests, resolution

    def check(self, decoded: Any, checksum: int, kind: type) -> None:
        """ValueError unless every tensor resolved is the one its reference names (digest) and the
        whole step is the one sent, of type ``kind`` (``check_step``)."""
        wrong = cache.verify_hits(f"step {getattr(decoded, 'step', '?')}", self.hits)
        if wrong is not None:
            raise ValueError(wrong)
        check_step(decoded, checksum, kind)


@dataclass
class CoreCache:
    """The core's half of a cached fan-out: the sender's cache (``cache.FrontendCache``), the
    tensors' digests (computed outside the timing), and the tally of the workers' acks, which
    must agree with one another and with the core (their caches mirror its)."""

    front: cache.FrontendCache
    region: shm.Region | None = None
    known: dict[str, int] = field(default_factory=dict)
    lookups: int = 0  # over every prefill step sent, the warm-up round's too
    hits: int = 0  # as the workers resolved them
    workers: list[broadcast.Resolution] = field(default_factory=list)  # each one's latest

    def digests(self, requests: list[Any]) -> None:
        for request in requests:
            cache.digests(request, self.known)

    def prepare(self, requests: list[Any]) -> tuple[list[Any], cache.Prepared]:
        """A step's new ``requests`` as sent: their cached tensors the workers hold as references."""
        total, sent = cache.Prepared(), []
        for request in requests:
            message, done = self.front.prepare(request, self.known)
            sent.append(message)
            total.lookups += done.lookups
            total.hits += done.hits
            total.stored_bytes += done.stored_bytes
        return sent, total

    def account(
        self, step: int, request_ids: list[str], acks: list[broadcast.Ack], prepared: cache.Prepared
    ) -> None:
        """Tally what the workers' caches did with step ``step`` and release the store entries of
        its new requests (``request_ids``); CacheError when a worker's count differs from
        another's, or from the core's."""
        first = acks[0].cache
        for ack in acks:
            seen = ack.cache
            if seen is None or (seen.lookups, seen.hits) != (first.lookups, first.hits):
                raise CacheError(
                    f"step {step}: worker {ack.worker}'s cache resolved {seen and seen.hits} of "
                    f"{seen and seen.lookups} tensors, worker {acks[0].worker}'s {first.hits} of "
                    f"{first.lookups}: the workers' caches disagree"
                )
        if first.lookups != prepared.lookups:
            raise CacheError(
                f"step {step}: the workers met {first.lookups} cacheable tensors, the core {prepared.lookups}"
            )
        self.lookups += first.lookups
        self.hits += first.hits
        self.workers = [ack.cache for ack in acks]
        for request_id in request_ids:
            self.front.done(request_id)

    def mirrored(self) -> None:
        """CacheError unless every worker's lru evicted what the core's did."""
        for index, held in enumerate(self.workers):
            disagreement = cache.mirror_disagreement(self.front, held.evictions, f"worker {index}", "core")
            if disagreement is not None:
                raise CacheError(disagreement)


def core_and_worker_caches(
    mode: str, capacity: int, transport_kind: str
) -> tuple[CoreCache | None, WorkerCache | None]:
    """Both halves of a case's cache (None, None for ``none``). Over ``shm`` the store is made
    here and unlinked at once: the workers inherit its mapping through fork. A worker's lru keeps
    its own copy of a tensor that arrived over the ring, whose arena the core writes again."""
    if mode == "none":
        return None, None
    region = None
    if mode == "shm":
        region = shm.Region.create(capacity, populate=False)
        region.unlink()
    front = cache.FrontendCache(mode, capacity, cache.Store(region) if region else None)
    return CoreCache(front, region), WorkerCache(mode, capacity, region, own=transport_kind == "shm-ring")
