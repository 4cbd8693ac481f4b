"""The ipc scenario under asv: TTFT and inter-token latency medians over real ZeroMQ, per case.

The scenario's medians under its quick-profile load, run once per commit in
``setup_cache``.
"""

from __future__ import annotations

from .common import ScenarioTracks, measure


class Ipc(ScenarioTracks):
    scenario = "ipc"

    def setup_cache(self) -> dict:
        return measure(self.scenario)

    setup_cache.timeout = 3600

    def track_ttft(self, cache: dict, backend: str, workload: str) -> float:
        return self.median(cache, backend, workload, "ttft_s")

    track_ttft.unit = "seconds"

    def track_itl(self, cache: dict, backend: str, workload: str) -> float:
        return self.median(cache, backend, workload, "itl_s")

    track_itl.unit = "seconds"
