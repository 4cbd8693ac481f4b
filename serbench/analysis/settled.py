"""When more samples would not change a comparison: its interval wholly inside the tie, or wholly outside.

A ratio between two rows is *settled* once its 95 % interval lies wholly within the metric's
practical tie of 1 (``ranking.tie_margin``: the rows tie, and will) or wholly beyond it (they
differ, and will); an interval that reaches across the margin's edge could still fall either
way. It is *out of reach* when even the rest of the budget could not settle it: its interval,
narrowed as the square root of the samples still to come, would still reach across the edge
(a sequential test's stop for futility). The runner asks ``group_done`` after each round of an
interleaved group, past the profile's own rounds, and visits a group no more once each
comparison its decision reads (every row against the best) is settled or out of reach
(``serbench.runner.visits.Stopping``); ``serbench.analysis.decision`` says of each decision
whether its ratios were settled.
"""

from __future__ import annotations

import math

from serbench.analysis.estimates import Estimate, center_of, geometric_ratio
from serbench.analysis.ranking import (
    best_row,
    headline_metric,
    is_variant,
    measurements,
    tie_margin,
    yardsticks,
)
from serbench.model.results import Results
from serbench.model.stats import MIN_DISTRIBUTION


def settled(estimate: Estimate, margin: float) -> bool:
    """Whether ``estimate``'s interval lies wholly within ``margin`` of 1 or wholly beyond it;
    never without an interval."""
    if estimate.low is None or estimate.high is None:
        return False
    inside = estimate.low >= 1 / (1 + margin) and estimate.high <= 1 + margin
    outside = estimate.high < 1 / (1 + margin) or estimate.low > 1 + margin
    return inside or outside


def within_reach(estimate: Estimate, margin: float, growth: float) -> bool:
    """Whether ``estimate`` could be settled once its samples grow ``growth``-fold: its interval,
    each side narrowed by the square root of ``growth`` about its ratio, would be ``settled``."""
    if estimate.low is None or estimate.high is None or estimate.low <= 0:
        return False
    shrink = 1 / math.sqrt(growth)
    low = estimate.ratio * (estimate.low / estimate.ratio) ** shrink
    high = estimate.ratio * (estimate.high / estimate.ratio) ** shrink
    return settled(Estimate(estimate.ratio, low, high, estimate.n), margin)


def group_done(group: Results, growth: float = 1.0) -> bool:
    """Whether visiting one group more could change none of the comparisons its decision reads:
    ``group`` holds its records (the cases that differ only in backend, each its visits so far
    merged) and the run's backends. Each row but a variant (``ranking.is_variant``) against the
    group's best (``ranking.best_row``), in the scenario's headline metric with the best's
    ``tie_margin``, is settled, or beyond settling once the samples grow ``growth``-fold (the
    visits planned over those made; 1: none left). A failed record compares nothing; a group
    with one measured row has nothing left to compare. A row with fewer than
    ``MIN_DISTRIBUTION`` samples settles nothing yet: its interval would rest on a value, not a
    distribution; nor does a comparison without an interval."""
    data = Results(records=[rec for rec in group.records if rec.ok], backends=group.backends)
    if not data.records:
        return False
    scenario = data.records[0].scenario
    name = headline_metric(data, scenario)
    if name is None:
        return False
    measured = {row: m for row, m in measurements(data, scenario, name).items() if not is_variant(row)}
    if any(m.n < MIN_DISTRIBUTION for row in measured.values() for m in row.values()):
        return False
    workloads = sorted({w for row in measured.values() for w in row})
    rows = {row: m for row, m in measured.items() if all(w in m for w in workloads)}
    if len(rows) < 2:
        return True
    best = best_row(data, name, rows, workloads)
    margin = tie_margin(name, rows[best], yardsticks(data, scenario, name).get(best, {}), workloads)
    for row in rows:
        if row == best:
            continue
        estimate = geometric_ratio([(rows[best][w], rows[row][w]) for w in workloads], center_of(name))
        if estimate is None or estimate.low is None:
            return False
        if not settled(estimate, margin) and within_reach(estimate, margin, growth):
            return False
    return True
