"""Summaries of repeated measurements: median with a distribution-free CI.

The confidence interval of the median comes from order statistics (the
binomial distribution of how many samples fall below the true median), so it
assumes nothing about the shape of the timing distribution — timings on a
shared machine are skewed and multimodal.

scipy is imported when the first interval of 6 or more samples is computed,
not with this module: importing ``scipy.stats`` allocates a slightly
different number of objects from one process to the next, and a process that
counts instructions must reach its first case with the same heap every time
(docs/instructions.md); its counts, one per metric, never need scipy.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

CONFIDENCE = 0.95
# Fewer samples than this are shown as values, never as a distribution (no CI, no percentile).
MIN_DISTRIBUTION = 5


def median_ci(values: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Order-statistic interval that covers the true median with ``confidence``.

    With too few samples for that coverage, the full range is returned.
    """
    ordered = sorted(values)
    n = len(ordered)
    if n == 0:
        raise ValueError("no values")
    if 0.5**n >= (1 - confidence) / 2:  # even the lowest order statistic misses the median too often
        return ordered[0], ordered[-1]
    from scipy.stats import binom

    low_rank = int(binom.ppf((1 - confidence) / 2, n, 0.5))  # at least 1 here
    return ordered[low_rank - 1], ordered[n - low_rank]


def summarize(values: Sequence[float], unit: str) -> dict:
    """The results-file form of a metric: unit, raw values, median and its CI."""
    values = [float(v) for v in values]
    low, high = median_ci(values)
    return {
        "unit": unit,
        "values": values,
        "median": statistics.median(values),
        "ci_low": low,
        "ci_high": high,
    }


def relative_spread(values: Sequence[float]) -> float:
    """Half the CI width over the median: how noisy a metric was in this run."""
    low, high = median_ci(values)
    median = statistics.median(values)
    return (high - low) / (2 * median) if median else 0.0
