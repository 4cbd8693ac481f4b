"""The memory scenario under asv: each side's peak RSS and the payload copies, per case.

These are ``track_`` benchmarks, not ``peakmem_``: asv's ``peakmem_`` is the
peak RSS of asv's own benchmark process, while the memory scenario measures a
separate frontend and engine process from the kernel. The numbers are the
scenario's medians, run once per commit in ``setup_cache``.
"""

from __future__ import annotations

from .common import ScenarioTracks, measure


class Memory(ScenarioTracks):
    scenario = "memory"

    def setup_cache(self) -> dict:
        return measure(self.scenario)

    setup_cache.timeout = 3600

    def track_peak_rss_engine(self, cache: dict, backend: str, workload: str) -> float:
        return self.median(cache, backend, workload, "peak_rss_engine_bytes")

    track_peak_rss_engine.unit = "bytes"

    def track_peak_rss_frontend(self, cache: dict, backend: str, workload: str) -> float:
        return self.median(cache, backend, workload, "peak_rss_frontend_bytes")

    track_peak_rss_frontend.unit = "bytes"

    def track_copies(self, cache: dict, backend: str, workload: str) -> float:
        return self.median(cache, backend, workload, "copies")

    track_copies.unit = "ratio"  # extra peak bytes / payload bytes, as the scenario reports it
