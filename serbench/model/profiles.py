"""Run profiles: ``quick`` (the default, a few minutes for everything) and ``full``."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any


@dataclass(frozen=True)
class Profile:
    """How hard to measure: samples per metric, time per sample, limits per case.

    ``options`` carries scenario settings given on the command line
    (e.g. the ipc request rate); scenarios read what they know.

    ``rounds``: how many interleaved rounds the runner measures the cases of an
    interleaved scenario in (``Scenario.interleaved``; each round visits every
    backend of a group in turn, see ``serbench.runner.matrix``). ``split``: set by the
    runner for one such visit, the number of visits the case's samples are
    spread over; a scenario takes ``share`` of each count it would measure in
    one process. 1 everywhere else (the gate, asv, a direct ``run_case``). ``sequential``: the
    runner stops visiting a group's backends once their comparisons are settled
    (``serbench.runner.visits``);
    ``full`` visits every round planned.
    """

    name: str
    samples: int
    min_sample_s: float
    max_metric_s: float
    case_timeout_s: float
    options: dict[str, Any] = field(default_factory=dict)
    rounds: int = 1
    split: int = 1
    sequential: bool = True

    def with_options(self, **options: Any) -> Profile:
        return replace(self, options={**self.options, **options})

    def share(self, count: int) -> int:
        """One visit's part of ``count`` samples: ``count / split`` rounded up, at least 1, so
        that the visits of a case together measure at least ``count``."""
        return max(1, math.ceil(count / self.split))


# Rounds: quick's 3 are the fewest whose paired ratio is a median, not a mean; every visit of a
# payload case pays its process and engine again, so more would lengthen a quick run
# (docs/measurements/2026-12-06-ipc-in-turns.md). full's 5 give its paired ratios five pairs.
PROFILES = {
    "quick": Profile("quick", samples=15, min_sample_s=0.002, max_metric_s=0.4, case_timeout_s=120, rounds=3),
    "full": Profile(
        "full",
        samples=60,
        min_sample_s=0.02,
        max_metric_s=5.0,
        case_timeout_s=900,
        rounds=5,
        sequential=False,
    ),
}
