"""Median confidence intervals on synthetic samples with known distributions (no timings)."""

from __future__ import annotations

import numpy as np
import pytest

from serbench.model.stats import median_ci, relative_spread, summarize


def test_median_ci_covers_the_true_median_about_95_percent_of_the_time() -> None:
    rng = np.random.default_rng(1)
    true_median = np.log(2)  # exponential(1)
    hits = 0
    trials = 2000
    for _ in range(trials):
        low, high = median_ci(rng.exponential(1.0, 25))
        hits += low <= true_median <= high
    assert 0.93 <= hits / trials <= 0.995


def test_tiny_samples_fall_back_to_the_range() -> None:
    assert median_ci([3.0, 1.0, 2.0]) == (1.0, 3.0)
    with pytest.raises(ValueError):
        median_ci([])


@pytest.mark.parametrize("confidence", [0.9, 0.95, 0.99])
def test_the_interval_is_scipys_order_statistic_wherever_one_covers(confidence: float) -> None:
    from scipy.stats import binom

    for n in range(1, 60):
        rank = int(binom.ppf((1 - confidence) / 2, n, 0.5))
        values = [float(v) for v in range(n)]
        expected = (0.0, n - 1.0) if rank < 1 else (rank - 1.0, n - rank * 1.0)
        assert median_ci(values, confidence) == expected, n


def test_summarize_shape() -> None:
    metric = summarize([4, 1, 3, 2, 5], "s")
    assert metric.unit == "s" and metric.median == 3.0
    assert metric.values == [4.0, 1.0, 3.0, 2.0, 5.0] and metric.n == 5
    assert metric.ci_low <= 3.0 <= metric.ci_high
    assert metric.rounds is None and summarize([1, 2], "s", [1, 1]).rounds == [1, 1]


def test_relative_spread_grows_with_noise() -> None:
    rng = np.random.default_rng(2)
    quiet = relative_spread(rng.normal(100, 1, 50))
    noisy = relative_spread(rng.normal(100, 10, 50))
    assert quiet < noisy
