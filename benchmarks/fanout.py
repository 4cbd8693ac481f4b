"""The fan-out scenario under asv: engine core → N workers, per backend, workload and N.

The scenario's default broadcast transport, and worker counts 1 and 2 (what a
2-vCPU runner can measure) unless ``SERBENCH_ASV_WORKERS`` lists others. Medians of the scenario, run once
per commit in ``setup_cache``; skipped in a commit without the scenario.
"""

from __future__ import annotations

from typing import Any

from .common import (
    BACKENDS,
    PROFILES,
    SCENARIOS,
    WORKLOADS,
    CaseFailed,
    Unsupported,
    grid,
    medians,
    run_case,
    run_isolated,
)

# The worker counts (SERBENCH_ASV_WORKERS, e.g. "1 2 4 8" on a host with the cores for it).
WORKERS = [int(n) for n in grid("SERBENCH_ASV_WORKERS", ["1", "2"])]


class Fanout:
    params = [BACKENDS, WORKLOADS, WORKERS]
    param_names = ["backend", "workload", "workers"]

    def setup_cache(self) -> dict[tuple[str, str, int], Any]:
        if "fanout" not in SCENARIOS:
            return {}
        profile = PROFILES["quick"]
        chosen = {"workers": tuple(WORKERS)}
        outcomes: dict[tuple[str, str, int], Any] = {}
        for case in SCENARIOS["fanout"].cases(BACKENDS, WORKLOADS, chosen):
            try:
                outcome = medians(run_isolated(run_case, (case, profile), profile.case_timeout_s))
            except CaseFailed as exc:
                outcome = str(exc)
            outcomes[case.backend, case.workload, case.workers] = outcome
        return outcomes

    setup_cache.timeout = 3600

    def setup(self, cache: dict, backend: str, workload: str, workers: int) -> None:
        outcome = cache.get((backend, workload, workers))
        if outcome is None:
            raise NotImplementedError(f"no fanout case {backend} × {workload} workers={workers}")
        if isinstance(outcome, Unsupported):
            raise NotImplementedError(f"unsupported by the backend: {outcome}")

    def _median(self, cache: dict, backend: str, workload: str, workers: int, metric: str) -> float:
        outcome = cache[backend, workload, workers]
        if isinstance(outcome, str):
            raise RuntimeError(f"fanout {backend} × {workload} workers={workers} failed: {outcome}")
        return outcome.get(metric, float("nan"))

    def track_time_to_last_worker(self, cache: dict, backend: str, workload: str, workers: int) -> float:
        return self._median(cache, backend, workload, workers, "fanout_s")

    track_time_to_last_worker.unit = "seconds"

    def track_core_copied_bytes(self, cache: dict, backend: str, workload: str, workers: int) -> float:
        return self._median(cache, backend, workload, workers, "core_copied_bytes")

    track_core_copied_bytes.unit = "bytes"

    def track_encode_calls(self, cache: dict, backend: str, workload: str, workers: int) -> float:
        return self._median(cache, backend, workload, workers, "encode_calls")

    track_encode_calls.unit = "count"
