"""The ipc scenario under asv: TTFT, its ingress part, egress and inter-token latency medians
over real ZeroMQ, per case.

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

    def track_ingress(self, cache: dict, backend: str, workload: str) -> float:
        """Just before encode → the engine holds the decoded request (NaN before this metric existed)."""
        return self.median(cache, backend, workload, "ingress_s")

    track_ingress.unit = "seconds"

    def track_egress(self, cache: dict, backend: str, workload: str) -> float:
        """Engine encode → frontend decoded, per outputs message."""
        return self.median(cache, backend, workload, "egress_s")

    track_egress.unit = "seconds"
