"""The bootstrap's draws are exact: the tabulated median positions against every resample of a
small round enumerated, and both ways of drawing a round's median against that distribution."""

import itertools
from collections import Counter
from fractions import Fraction

import numpy as np
import pytest

from serbench.analysis.resample import (
    TABULATED,
    Rounds,
    _beta_positions,
    _tabulated_positions,
    median_positions_pmf,
    pooled_centers,
    round_medians,
)


def enumerated_pmf(n: int) -> dict[tuple[int, int], Fraction]:
    """The positions of the two middle values of every one of the n^n resamples, counted."""
    counts = Counter()
    for draw in itertools.product(range(n), repeat=n):
        ordered = sorted(draw)
        counts[ordered[(n - 1) // 2], ordered[n // 2]] += 1
    return {pair: Fraction(count, n**n) for pair, count in counts.items()}


@pytest.mark.parametrize("n", range(1, 8))
def test_median_positions_are_those_of_every_resample(n):
    assert median_positions_pmf(n) == enumerated_pmf(n)


@pytest.mark.parametrize("draw", [_tabulated_positions, _beta_positions])
@pytest.mark.parametrize("n", [5, 6])
def test_both_draws_follow_the_exact_distribution(draw, n):
    draws = 40_000
    low, high = draw(n, draws, np.random.default_rng(7))
    seen = Counter(zip(low.tolist(), high.tolist(), strict=True))
    for pair, p in median_positions_pmf(n).items():
        expected = float(p) * draws
        assert abs(seen[pair] - expected) < 5 * (expected * (1 - float(p))) ** 0.5 + 1, pair
    assert set(seen) <= set(median_positions_pmf(n))


def test_round_medians_draw_each_round_by_its_own_size():
    small = np.array([1.0, 2.0, 3.0])
    large = np.arange(TABULATED + 10, dtype=float)
    rounds = Rounds([small, large])
    assert rounds.medians().tolist() == [2.0, float(np.median(large))]
    picks = np.array([[0, 1]] * 3000)
    drawn = round_medians(rounds, picks, np.random.default_rng(3))
    assert set(np.unique(drawn[:, 0])) <= {1.0, 2.0, 3.0}  # a resample's median is one of its values
    assert abs(drawn[:, 0].mean() - 2.0) < 0.05  # symmetric about the middle
    assert abs(drawn[:, 1].mean() - np.median(large)) < 0.5
    assert drawn[:, 1].min() >= large.min() and drawn[:, 1].max() <= large.max()


def test_pooled_draws_each_round_only_as_many_as_it_has():
    rounds = Rounds([np.array([1.0]), np.array([10.0, 10.0, 10.0])])
    picks = np.array([[0, 0], [1, 1], [0, 1]])

    def sample_count(rows):
        return np.sum(~np.isnan(rows), axis=-1)

    counted = pooled_centers(rounds, picks, np.random.default_rng(1), sample_count)
    assert counted.tolist() == [2, 6, 4]
