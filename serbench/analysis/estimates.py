"""Estimates of a ratio between two sets of samples: the centers, the bootstrap, the geometric mean.

What both kinds of comparison stand on: ``serbench.analysis.verdicts`` (base against head)
and ``serbench.analysis.ranking`` (rows of one run against each other). A ratio head/base
comes with a percentile-bootstrap interval from the raw samples (numpy, a fixed seed, so the
same files always give the same interval).

Samples from several processes (the gate's merged rounds, a run's visits: ``Measurement.rounds``)
are resampled round first, sample second, so a difference between processes widens the
interval instead of passing for a change. Rounds measured side by side pair: round ``i`` of
base and of head are drawn together, and a slow spell that hits both halves of a pair cancels.
A row is compared by its metric's center (``metrics.Metric.center``): the median, a trimmed
mean, or the lower quartile (``center_of``).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from serbench.analysis.resample import Rounds, pooled_centers, round_medians
from serbench.model.metrics import LOWER_QUARTILE, MEDIAN, TRIMMED_MEAN, metric
from serbench.model.stats import CONFIDENCE, Measurement

BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 20261129
# The trimmed mean's cut from each end, and the lower quartile's quantile (``metrics.Metric.center``):
# TTFT's requests fall in two modes a median jumps between; micro's slow spells only ever slow a
# sample (docs/measurements/2026-12-06-centers.md).
TRIM = 0.1
LOWER = 0.25
# A statistic over the last axis of an array of samples, NaN a missing sample (``medians``,
# ``trimmed_means``, ``lower_quartiles``): what a run's rows are compared by (``center_of``).
Center = Callable[[np.ndarray], np.ndarray]
# The power at which ``detectable`` states the smallest slowdown a comparison would catch.
POWER = 0.8


def _groups(measured: Measurement) -> list[np.ndarray]:
    """A metric's samples split by the round (process) that produced them; a round of none (a
    file written by hand) is no round."""
    values = np.asarray(measured.values, dtype=float)
    sizes = measured.rounds or [len(values)]
    if sum(sizes) != len(values):
        sizes = [len(values)]
    return [group for group in np.split(values, np.cumsum(sizes)[:-1]) if len(group)]


def _ordered(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row sorted over its last axis (NaN, a missing sample, last) and its count of samples.
    What ``_quantiles`` and ``trimmed_means`` index into, all rows at once: numpy's
    ``nanquantile`` takes a row at a time where there are NaNs, far slower on a bootstrap's
    rows."""
    ordered = np.sort(rows, axis=-1)
    return ordered, np.sum(~np.isnan(ordered), axis=-1)


def trimmed_means(rows: np.ndarray) -> np.ndarray:
    """Each row's mean over its last axis with ``TRIM`` of its values (NaN: none) cut from each
    end, as ``scipy.stats.trim_mean`` cuts them: ``int(TRIM * n)`` a side."""
    ordered, n = _ordered(rows)
    cut = (TRIM * n).astype(int)
    sums = np.concatenate([np.zeros((*ordered.shape[:-1], 1)), np.nancumsum(ordered, axis=-1)], axis=-1)
    upper = np.take_along_axis(sums, (n - cut)[..., None], axis=-1)[..., 0]
    lower = np.take_along_axis(sums, cut[..., None], axis=-1)[..., 0]
    with np.errstate(divide="ignore", invalid="ignore"):
        return (upper - lower) / (n - 2 * cut)


def _quantiles(rows: np.ndarray, q: float) -> np.ndarray:
    """Each row's ``q`` quantile over its last axis (NaN: none), interpolated between the two
    nearest samples as ``numpy.quantile`` does by default."""
    ordered, n = _ordered(rows)
    position = q * (n - 1)
    below = np.floor(position).astype(int)
    above = np.minimum(below + 1, n - 1)
    low = np.take_along_axis(ordered, below[..., None], axis=-1)[..., 0]
    high = np.take_along_axis(ordered, above[..., None], axis=-1)[..., 0]
    return low + (position - below) * (high - low)


def medians(rows: np.ndarray) -> np.ndarray:
    """Each row's median over its last axis, NaN a missing value."""
    return _quantiles(rows, 0.5)


def lower_quartiles(rows: np.ndarray) -> np.ndarray:
    """Each row's ``LOWER`` quantile over its last axis, NaN a missing value."""
    return _quantiles(rows, LOWER)


CENTERS: dict[str, Center] = {MEDIAN: medians, TRIMMED_MEAN: trimmed_means, LOWER_QUARTILE: lower_quartiles}


def center_of(name: str) -> Center:
    """What a run's rows are compared by in metric ``name`` (``metrics.Metric.center``)."""
    return CENTERS[metric(name).center]


def location(name: str, measured: Measurement) -> float:
    """The one value a row stands at in metric ``name`` when a run's rows are compared: the
    metric's center (``center_of``) of all its samples."""
    if not measured.values:
        return measured.median
    return float(center_of(name)(np.asarray(measured.values, dtype=float)))


def _ratio(head: np.ndarray, base: np.ndarray, paired: bool) -> np.ndarray:
    """The ratio statistic over the last axis (rounds) of per-round medians.

    Paired (rounds measured side by side): the median of the per-round
    ratios, so that drift between rounds cancels. Otherwise: the median
    round of head over the median round of base.
    """
    with np.errstate(divide="ignore", invalid="ignore"):
        if paired:
            return medians(head / base)
        return medians(head) / medians(base)


def ratio_estimate(
    base: Measurement,
    head: Measurement,
    confidence: float = CONFIDENCE,
    seed: int = BOOTSTRAP_SEED,
    side_by_side: bool = True,
    pooled: bool = False,
    center: Center = medians,
) -> tuple[float | None, float | None, float | None]:
    """Ratio head/base and its percentile-bootstrap interval, from the raw samples.

    One round per side: the ratio of medians, samples resampled. Several:
    rounds are resampled first and samples within them second; when both
    sides have the same number of rounds (the gate's interleaved A B / B A
    pairs) round ``i`` of base and of head are drawn together and the
    statistic is the median of per-round ratios — unless ``side_by_side`` is
    false: rounds of two separate runs were not measured together, so their
    order pairs nothing. ``pooled``: the statistic is the ratio of the
    ``center`` (``medians``, or the metric's own: ``center_of``) of all a
    side's samples instead (rounds still drawn together where they pair) — for
    a run's interleaved visits of a few requests each, where one visit's
    median is too noisy to stand for it (docs/architecture.md, "Measuring
    rules"), over the rounds both sides took (``_common_rounds``); where both
    sides' samples were taken in turn in those rounds (``Measurement.in_turn``),
    the median of the ratios of head's sample i to base's sample i instead,
    rounds and samples drawn together. The ratio is
    None for a zero base;
    the interval is (None, None) with fewer than two samples a side — no
    interval, no significance.
    """
    base_groups, head_groups = _groups(base), _groups(head)
    if pooled and side_by_side:
        base_groups, head_groups = _common_rounds(base_groups, head_groups)
        if base.in_turn and head.in_turn and list(map(len, base_groups)) == list(map(len, head_groups)):
            return _in_turn_estimate(base_groups, head_groups, confidence, seed)
    paired = side_by_side and len(base_groups) == len(head_groups)
    pooled = pooled and max(len(base_groups), len(head_groups)) > 1  # one round: the same statistic
    if pooled:
        ratio = float(center(np.concatenate(head_groups)) / center(np.concatenate(base_groups)))
    else:
        head_rounds, base_rounds = Rounds(head_groups), Rounds(base_groups)
        ratio = float(_ratio(head_rounds.medians()[None], base_rounds.medians()[None], paired)[0])
    if not math.isfinite(ratio):
        return None, None, None
    if min(sum(map(len, base_groups)), sum(map(len, head_groups))) < 2:
        return ratio, None, None
    rng = np.random.default_rng(seed)
    head_picks = rng.integers(len(head_groups), size=(BOOTSTRAP_RESAMPLES, len(head_groups)))
    base_picks = (
        head_picks if paired else rng.integers(len(base_groups), size=(BOOTSTRAP_RESAMPLES, len(base_groups)))
    )
    if pooled:
        heads = pooled_centers(Rounds(head_groups), head_picks, rng, center)
        bases = pooled_centers(Rounds(base_groups), base_picks, rng, center)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratios = heads / bases
    else:
        ratios = _ratio(
            round_medians(head_rounds, head_picks, rng), round_medians(base_rounds, base_picks, rng), paired
        )
    alpha = (1 - confidence) / 2
    low, high = np.nanquantile(ratios, [alpha, 1 - alpha])
    return ratio, float(low), float(high)


def _common_rounds(
    base: list[np.ndarray], head: list[np.ndarray]
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The rounds both sides took, in a run's interleaved visits: a backend visited no more (its
    comparison closed, ``serbench.analysis.settled``; its time spent, ``Scenario.revisit``) took
    its group's first rounds, which pair with the others' first."""
    taken = min(len(base), len(head))
    return base[:taken], head[:taken]


def paired_rounds(base: Measurement, head: Measurement) -> int:
    """How many rounds a run's comparison of the two pairs (``ratio_estimate`` pooled, side by
    side): the rounds both took, where each side was measured in several; 0 where none pair."""
    taken = len(_common_rounds(_groups(base), _groups(head))[0])
    return taken if taken > 1 else 0


def _in_turn_estimate(
    base_groups: list[np.ndarray], head_groups: list[np.ndarray], confidence: float, seed: int
) -> tuple[float | None, float | None, float | None]:
    """``ratio_estimate`` of samples taken in turn: the median of the per-sample ratios, its
    interval from resampling rounds and the ratios within them. A slow spell of the machine
    lasts milliseconds, about a sample: it slows both samples of a ratio or neither, where it
    would move one side's center and not the other's (docs/measurements)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = [head / base for base, head in zip(base_groups, head_groups, strict=True)]
    ratio = float(np.median(np.concatenate(ratios)))
    if not math.isfinite(ratio):
        return None, None, None
    if sum(map(len, ratios)) < 2:
        return ratio, None, None
    rng = np.random.default_rng(seed)
    picks = rng.integers(len(ratios), size=(BOOTSTRAP_RESAMPLES, len(ratios)))
    drawn = pooled_centers(Rounds(ratios), picks, rng, medians)
    alpha = (1 - confidence) / 2
    low, high = np.nanquantile(drawn, [alpha, 1 - alpha])
    return ratio, float(low), float(high)


def detectable(
    ratio: float | None, low: float | None, high: float | None, higher_is_better: bool
) -> float | None:
    """The smallest slowdown (0.02 = 2 %) that a comparison as noisy as this one tells from no
    change with probability ``POWER``: its minimum detectable effect. None without an interval.

    The interval's wider half (in log ratio) stands for ``z`` standard errors;
    a true slowdown is significant with probability ``POWER`` when it is
    ``z + z_power`` of them above 1 (the usual 2.8 standard errors at 95 % and
    80 %). The wider half, not the one on the slowdown's side: with few rounds
    the bootstrap's interval is lopsided (three pairs, one slow: ``[1.00,
    1.30]`` around 1.00), and its narrow side would claim a power the run did
    not have. What the machine lets the gate see, before the threshold's say:
    a slowdown below it cannot be told from noise in this run, whatever
    ``--max-regression`` is. (``higher_is_better`` does not change the width; it
    is kept for the callers that state it.)
    """
    if ratio is None or low is None or high is None or min(ratio, low, high) <= 0:
        return None
    half = max(math.log(ratio / low), math.log(high / ratio), 0.0)
    z = NormalDist().inv_cdf((1 + CONFIDENCE) / 2)
    return math.exp(half * (z + NormalDist().inv_cdf(POWER)) / z) - 1


@dataclass(frozen=True)
class Estimate:
    """A ratio head/base over ``n`` workloads — the geometric mean of one ratio per workload —
    and its 95 % interval (None without one)."""

    ratio: float
    low: float | None
    high: float | None
    n: int

    def tied(self, tolerance: float, margin: float) -> bool:
        """Not told apart from 1 by a difference that matters: some of the interval lies within
        ``margin`` of 1 (it holds 1, or a ratio that close); without an interval, the ratio is
        within ``tolerance``.

        One edge, where the interval meets the margin: a rule of two (the interval holds 1, or
        the point ratio is within the margin) flips when a noisy run's point crosses the margin
        while its interval still reaches into it, and two runs back to back then decide apart.
        """
        if self.low is None or self.high is None:
            return abs(math.log(self.ratio)) <= math.log1p(tolerance)
        return self.low <= 1 + margin and self.high * (1 + margin) >= 1


def geometric_ratio(
    pairs: Sequence[tuple[Measurement, Measurement]], center: Center = medians
) -> Estimate | None:
    """The geometric mean of head/base over ``pairs`` (base, head), one pair per workload, with
    an interval; None when no pair has a ratio (a zero base).

    Each workload's ratio and interval are ``ratio_estimate``'s (rounds paired where both
    sides have the same rounds, unpaired otherwise). The workloads were measured apart, so
    their log intervals add in quadrature: each side of the mean's interval is the root sum
    of squares of that side's log half-widths over the number of workloads. No interval when
    any workload has none.
    """
    estimates = [ratio_estimate(base, head, pooled=True, center=center) for base, head in pairs]
    found = [(r, low, high) for r, low, high in estimates if r is not None and r > 0]
    if not found:
        return None
    n = len(found)
    center = statistics.fmean(math.log(r) for r, _, _ in found)
    if any(low is None or high is None or low <= 0 for _, low, high in found):
        return Estimate(math.exp(center), None, None, n)
    below = math.sqrt(sum(math.log(r / low) ** 2 for r, low, _ in found)) / n
    above = math.sqrt(sum(math.log(high / r) ** 2 for r, _, high in found)) / n
    return Estimate(math.exp(center), math.exp(center - below), math.exp(center + above), n)
