"""Summaries of repeated measurements: median with a distribution-free CI.

The confidence interval of the median comes from order statistics (the
binomial distribution of how many samples fall below the true median), so it
assumes nothing about the shape of the timing distribution — timings on a
shared machine are skewed and multimodal.

The binomial quantile is computed exactly, with integers, rather than with
``scipy.stats.binom`` (which the tests hold it to): importing ``scipy.stats``
would cost every case's process, which is forked before anything imports it,
and allocates a slightly different number of objects from one process to the
next, which a process that counts instructions cannot have (docs/instructions.md).
"""

from __future__ import annotations

import functools
import statistics
from collections.abc import Sequence
from fractions import Fraction

import msgspec

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
    low_rank = _binomial_half_quantile((1 - confidence) / 2, n)
    if low_rank < 1:  # even the lowest order statistic misses the median too often
        return ordered[0], ordered[-1]
    return ordered[low_rank - 1], ordered[n - low_rank]


@functools.cache  # a run asks it of the same few sample counts hundreds of times
def _binomial_half_quantile(q: float, n: int) -> int:
    """The smallest k with P(X <= k) >= q for X ~ Binomial(n, 1/2) (scipy's ``binom.ppf``), exactly."""
    target, below, ways = Fraction(q) * 2**n, 0, 1  # ways: C(n, k)
    for k in range(n + 1):
        below += ways
        if below >= target:
            return k
        ways = ways * (n - k) // (k + 1)
    return n


class Measurement(msgspec.Struct, omit_defaults=True):
    """One metric of one case: its raw samples and their summary, as the results file holds it.

    ``rounds``: when the samples came from several processes (the gate merges
    its rounds), how many each gave, in order; None for one process.
    ``in_turn``: the samples were taken in one process with those of the other backends of its
    run's group, one sample of each in turn (``Scenario.together``): sample i of a round was
    taken beside theirs, so a ratio between them pairs sample by sample
    (``compare.ratio_estimate``).
    """

    unit: str
    values: list[float]
    median: float
    ci_low: float
    ci_high: float
    rounds: list[int] | None = None
    in_turn: bool = False

    @property
    def n(self) -> int:
        return len(self.values)


def summarize(values: Sequence[float], unit: str, rounds: list[int] | None = None) -> Measurement:
    """Samples as a ``Measurement``: unit, raw values, median and its CI."""
    values = [float(v) for v in values]
    low, high = median_ci(values)
    return Measurement(unit, values, statistics.median(values), low, high, rounds)


def relative_spread(values: Sequence[float]) -> float:
    """Half the CI width over the median: how noisy a metric was in this run."""
    low, high = median_ci(values)
    median = statistics.median(values)
    return (high - low) / (2 * median) if median else 0.0
