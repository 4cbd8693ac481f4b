"""Bootstrap draws from samples grouped in rounds: what serbench.analysis.estimates' intervals hold.

A round is the samples one process gave. The bootstrap draws whole rounds first (the caller's
``picks``: round indices, one row a resample) and samples within each drawn round second. Two
statistics are drawn here, both from their exact distribution and for every resample at once:

* ``round_medians``: the median of a resample of each drawn round, without building the
  resample. A round of n sorted values resampled with replacement has its median at
  ``(x[i] + x[j]) / 2`` for a pair of positions (i = j where n is odd) whose distribution
  depends on n alone: for rounds of up to ``TABULATED`` samples (the gate's rounds, a run's
  visits) it is tabulated once per n, exactly, and a draw costs one uniform; a larger round
  (an ipc case's ITL samples) draws the middle order statistic from its Beta distribution
  instead, O(1) a draw where building the resample would cost O(n log n).
* ``pooled_centers``: a center of all the samples of a resample, each drawn round's own samples
  drawn with replacement, as many as it has.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from fractions import Fraction

import numpy as np

# Rounds of at most this many samples draw their resampled median from a table of n^2 entries
# of exact fractions, costlier to build as n grows
# (docs/measurements/2026-12-06-compare-speed-and-ratio-noise.md).
TABULATED = 32


class Rounds:
    """Samples grouped in rounds, each round's sorted, one row a round (NaN after a shorter
    round's last), with how many each round has."""

    def __init__(self, groups: list[np.ndarray]) -> None:
        self.sizes = np.array([len(group) for group in groups])
        self.ordered = np.full((len(groups), self.sizes.max()), np.nan)
        for index, group in enumerate(groups):
            self.ordered[index, : len(group)] = np.sort(group)

    def __len__(self) -> int:
        return len(self.sizes)

    def medians(self) -> np.ndarray:
        """Each round's median."""
        rows = np.arange(len(self))
        return (self.ordered[rows, (self.sizes - 1) // 2] + self.ordered[rows, self.sizes // 2]) / 2


def round_medians(rounds: Rounds, picks: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """For each drawn round index in ``picks``, the median of a resample of that round's samples."""
    n = rounds.sizes[picks]
    low, high = np.empty(picks.shape, dtype=int), np.empty(picks.shape, dtype=int)
    for size in sorted(set(rounds.sizes.tolist())):  # a fixed order: a seed gives one interval
        chosen = n == size
        if not chosen.any():
            continue
        draw = _tabulated_positions if size <= TABULATED else _beta_positions
        low[chosen], high[chosen] = draw(int(size), int(chosen.sum()), rng)
    return (rounds.ordered[picks, low] + rounds.ordered[picks, high]) / 2


def _tabulated_positions(n: int, draws: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``draws`` pairs of sorted positions whose mean is the median of a resample of n values."""
    cumulative = _median_positions_cdf(n)
    flat = np.searchsorted(cumulative, rng.random(draws) * cumulative[-1], side="right")
    return np.divmod(np.minimum(flat, n * n - 1), n)


def _beta_positions(n: int, draws: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """As ``_tabulated_positions``, for any n: resampling n sorted values with replacement is
    ``x[ceil(n U) - 1]`` for n uniforms U, a monotone map, so the resample's k-th smallest
    value is ``x[ceil(n U_(k)) - 1]`` with U_(k) ~ Beta(k, n + 1 - k), and the next one above
    it lies a Beta(1, n - k) fraction of the rest of the way to 1."""
    k = (n + 1) // 2  # the (lower) middle order statistic
    low = rng.beta(k, n + 1 - k, draws)
    high = low if n % 2 else low + (1 - low) * rng.beta(1, n - k, draws)
    return tuple(np.clip(np.ceil(u * n).astype(int) - 1, 0, n - 1) for u in (low, high))


@functools.cache
def _median_positions_cdf(n: int) -> np.ndarray:
    """The cumulative distribution, over i * n + j, of the sorted positions (i, j) whose mean is
    the median of a resample of n values (``median_positions_pmf``)."""
    pmf = median_positions_pmf(n)
    return np.cumsum([float(pmf.get(divmod(flat, n), 0)) for flat in range(n * n)])


def median_positions_pmf(n: int) -> dict[tuple[int, int], Fraction]:
    """Exactly, the probability of each pair of sorted positions (i <= j) whose values' mean is
    the median of n values drawn with replacement from n: the resample's middle order
    statistics, the lower (rank k) and the upper (rank n - k + 1; the same one for odd n).

    With C(i) the count of draws at positions up to i (Binomial(n, (i + 1) / n)), the lower
    lies at or below i when C(i) >= k. For even n, both lie at or below i <= j when C(i) > k,
    or when C(i) = k and one of the n - k other draws, which fall above i, falls at or below j.
    """
    k = (n + 1) // 2
    reach_k = [_at_least(n, i, k) for i in range(n)]  # P(lower <= i)
    pass_k = [_at_least(n, i, k + 1) for i in range(n)]  # P(C(i) > k)

    @functools.cache
    def joint(i: int, j: int) -> Fraction:  # P(lower <= i, upper <= j)
        if i < 0 or j < 0:
            return Fraction(0)
        if n % 2:
            return reach_k[min(i, j)]
        if i >= j:  # the upper at or below j <= i: the lower too
            return pass_k[j]
        stay_above_j = Fraction(n - 1 - j, n - 1 - i) ** (n - k)
        return pass_k[i] + (reach_k[i] - pass_k[i]) * (1 - stay_above_j)

    pairs = ((i, j) for i in range(n) for j in range(i, n))
    pmf = {(i, j): joint(i, j) - joint(i - 1, j) - joint(i, j - 1) + joint(i - 1, j - 1) for i, j in pairs}
    return {pair: p for pair, p in pmf.items() if p}


def _at_least(n: int, i: int, m: int) -> Fraction:
    """P(at least m of n uniform draws from n positions fall at or below position i)."""
    below = i + 1
    return Fraction(sum(math.comb(n, c) * below**c * (n - below) ** (n - c) for c in range(m, n + 1)), n**n)


def pooled_centers(
    rounds: Rounds, picks: np.ndarray, rng: np.random.Generator, center: Callable[[np.ndarray], np.ndarray]
) -> np.ndarray:
    """For each row of drawn round indices in ``picks``, the ``center`` (over the last axis, NaN
    a missing sample) of all the samples of a resample: each drawn round's own samples drawn
    with replacement, as many as it has."""
    widest = rounds.ordered.shape[1]
    drawn_sizes = rounds.sizes[picks][..., None]  # (resamples, rounds, 1)
    positions = np.floor(rng.random((*picks.shape, widest)) * drawn_sizes).astype(int)
    values = rounds.ordered[picks[..., None], positions]
    values[np.arange(widest) >= drawn_sizes] = np.nan  # a smaller round draws only as many as it has
    return center(values.reshape(len(picks), -1))
