"""When more samples would not change a comparison: its interval wholly inside the tie, or wholly outside.

A ratio between two rows is *settled* once its 95 % interval lies wholly within the metric's
practical tie of 1 (``ranking.tie_margin``: the rows tie, and will) or wholly beyond it (they
differ, and will); an interval that reaches across the margin's edge could still fall either
way. It is *out of reach* when the rest of the budget is more likely than not to leave it
unsettled (``within_reach``: its conditional power, a sequential test's stop for futility).
The runner asks ``still_open`` before each round of an interleaved group, past the profile's
own rounds, and visits only the backends whose comparison (every row against the best) is
neither settled nor out of reach, with the best, until none is
(``serbench.runner.visits.Stopping``); ``serbench.analysis.decision`` says of each decision
whether its ratios were settled.
"""

from __future__ import annotations

import math
from statistics import NormalDist

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
from serbench.model.stats import CONFIDENCE, MIN_DISTRIBUTION

_Z = NormalDist().inv_cdf((1 + CONFIDENCE) / 2)  # an interval's half-width in standard errors


def settled(estimate: Estimate, margin: float) -> bool:
    """Whether ``estimate``'s interval lies wholly within ``margin`` of 1 or wholly beyond it;
    never without an interval."""
    if estimate.low is None or estimate.high is None:
        return False
    inside = estimate.low >= 1 / (1 + margin) and estimate.high <= 1 + margin
    outside = estimate.high < 1 / (1 + margin) or estimate.low > 1 + margin
    return inside or outside


def within_reach(estimate: Estimate, margin: float, growth: float) -> bool:
    """Whether ``estimate`` is more likely than not to be ``settled`` once its samples grow
    ``growth``-fold (its conditional power, as a sequential test stops for futility): then its
    interval has narrowed by the square root of ``growth``, and its ratio has moved as much as the
    samples to come can move it (in log, normal about today's, with the standard error the
    interval shows times the root of the share still to come, 1 - 1/``growth``)."""
    if estimate.low is None or estimate.high is None or estimate.low <= 0:
        return False
    center = math.log(estimate.ratio)
    below, above = math.log(estimate.ratio / estimate.low), math.log(estimate.high / estimate.ratio)
    spread = max(below, above) / _Z * math.sqrt(max(0.0, 1 - 1 / growth))
    if spread == 0:
        return settled(estimate, margin)
    below, above = below / math.sqrt(growth), above / math.sqrt(growth)
    edge = math.log1p(margin)
    moved = NormalDist(center, spread)
    inside = max(0.0, moved.cdf(edge - above) - moved.cdf(-edge + below))
    beyond = 1 - moved.cdf(edge + below) + moved.cdf(-edge - above)
    return inside + beyond > 0.5


def still_open(group: Results, growth: float = 1.0) -> frozenset[str]:
    """The backends of ``group`` that more visits could still tell something about; none once
    visiting the group more could change none of the comparisons its decision reads. ``group``
    holds its records (the cases that differ only in backend, each its visits so far merged) and
    the run's backends. A comparison is each row but a variant (``ranking.is_variant``) against
    the group's best (``ranking.best_row``), in the scenario's headline metric with the best's
    ``tie_margin``; it is closed once settled, or beyond settling once the samples grow
    ``growth``-fold (the visits planned over those made; 1: none left). While any is open, every
    backend but those of the closed ones stays open: the best and the variants with the open.
    A failed record compares nothing; a group with one measured row has nothing left to
    compare. A row with fewer than ``MIN_DISTRIBUTION`` samples closes nothing yet: its
    interval would rest on a value, not a distribution; nor does a comparison without one."""
    everyone = frozenset(rec.backend for rec in group.records)
    data = Results(records=[rec for rec in group.records if rec.ok], backends=group.backends)
    if not data.records:
        return everyone
    scenario = data.records[0].scenario
    name = headline_metric(data, scenario)
    if name is None:
        return everyone
    measured = {row: m for row, m in measurements(data, scenario, name).items() if not is_variant(row)}
    if any(m.n < MIN_DISTRIBUTION for row in measured.values() for m in row.values()):
        return everyone
    workloads = sorted({w for row in measured.values() for w in row})
    rows = {row: m for row, m in measured.items() if all(w in m for w in workloads)}
    if len(rows) < 2:
        return frozenset()
    best = best_row(data, name, rows, workloads)
    margin = tie_margin(name, rows[best], yardsticks(data, scenario, name).get(best, {}), workloads)
    closed = set()
    for row in rows:
        if row == best:
            continue
        estimate = geometric_ratio([(rows[best][w], rows[row][w]) for w in workloads], center_of(name))
        if estimate is None or estimate.low is None:
            continue
        if settled(estimate, margin) or not within_reach(estimate, margin, growth):
            closed.add(row.backend)
    if len(closed) == len(rows) - 1:
        return frozenset()
    return everyone - closed
