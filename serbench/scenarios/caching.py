"""The cache dimension of the ipc, memory and fanout scenarios, and what they show of it (docs/cache.md).

``CACHE`` is the case dimension (``--cache none,lru,shm``); ``none`` is
stored as no field at all (``Case.cache`` None), so every case measured
before the dimension existed keeps its key, and a table shows it as it
did. ``CACHE_MB`` sizes both sides' caches. ``savings`` is the table that
says what a hit saves.
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from serbench.links import cache
from serbench.model.profiles import Profile
from serbench.model.results import Case, Results
from serbench.model.units import format_value
from serbench.model.views import MEDIAN, Figure, Table
from serbench.scenarios.base import Dimension, Option

CACHE = Dimension(
    "cache",
    "--cache",
    str,
    ("none",),
    "the multimodal cache of the ipc and memory scenarios (frontend → engine) and of fanout (core → "
    "workers): none (every tensor travels), lru (a mirrored LRU by content hash on both sides; a hit "
    "sends the hash) or shm (a shared-memory object store both sides map; a hit sends offset, length, "
    "hash); a list runs each",
    choices=cache.MODES,
)


def _megabytes(text: str) -> float:
    value = float(text)
    if not 0 < value < float("inf"):
        raise ValueError(f"must be a finite number > 0, got {text!r}")
    return value


CACHE_MB = Option(
    "--cache-mb",
    "cache_mb",
    _megabytes,
    "capacity of each side's multimodal cache in MB (default: two of the largest requests' tensors)",
)

FIGURE = Figure(
    "hits",
    "TTFT against the measured cache hit ratio, per backend and cache mode",
    (("ttft_s", MEDIAN), ("ttft_hit_s", MEDIAN), ("ttft_miss_s", MEDIAN), ("request_bytes", MEDIAN)),
)


def with_cache(cases: Iterable[Case]) -> list[Case]:
    """``cases`` with ``cache="none"`` as no field (None): the key of an uncached case."""
    return [msgspec.structs.replace(c, cache=None) if c.cache == "none" else c for c in cases]


def mode(case: Case) -> str:
    return case.cache or "none"


def capacity(profile: Profile, default: int) -> int:
    """Each side's cache in bytes: ``--cache-mb``, else ``default``."""
    megabytes = profile.options.get("cache_mb")
    return round(megabytes * 1e6) if megabytes else default


def savings(data: Results, scenario: str) -> list[Table]:
    """What a hit saves, per cached case that had hits and misses: TTFT and bytes to the engine of a
    miss and of a hit."""
    rows = []
    for r in data.of(scenario):
        m = r.metrics
        if not all(name in m for name in ("ttft_hit_s", "ttft_miss_s", "hit_ratio")):
            continue
        hit, miss = m["ttft_hit_s"].median, m["ttft_miss_s"].median
        rows.append(
            [
                r.case.row,
                r.workload,
                f"{m['hit_ratio'].median:.2f}",
                format_value(miss, "s"),
                format_value(hit, "s"),
                f"{format_value(miss - hit, 's')} ({hit / miss:.2f}×)",
            ]
        )
    if not rows:
        return []
    headers = ["backend", "workload", "hit ratio", "TTFT miss", "TTFT hit", "a hit saves (hit/miss)"]
    note = "a hit: every cached tensor of the request found; a miss: any tensor travelled (medians)"
    return [Table("what a cache hit saves", headers, rows, note)]
