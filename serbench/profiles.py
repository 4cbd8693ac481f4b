"""Run profiles: ``quick`` (the default, a few minutes for everything) and ``full``."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any


@dataclass(frozen=True)
class Profile:
    """How hard to measure: samples per metric, time per sample, limits per case.

    ``options`` carries scenario settings given on the command line
    (e.g. the ipc request rate); scenarios read what they know.
    """

    name: str
    samples: int
    min_sample_s: float
    max_metric_s: float
    case_timeout_s: float
    options: dict[str, Any] = field(default_factory=dict)

    def with_options(self, **options: Any) -> Profile:
        return replace(self, options={**self.options, **options})


PROFILES = {
    "quick": Profile("quick", samples=15, min_sample_s=0.002, max_metric_s=0.4, case_timeout_s=120),
    "full": Profile("full", samples=60, min_sample_s=0.02, max_metric_s=5.0, case_timeout_s=900),
}
