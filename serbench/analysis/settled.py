"""When more samples would not change a comparison: its interval wholly inside the tie, or wholly outside.

A ratio between two rows is *settled* once its 95 % interval lies wholly within the metric's
practical tie of 1 (``ranking.tie_margin``: the rows tie, and will) or wholly beyond it (they
differ, and will); an interval that reaches across the margin's edge could still fall either
way. It is *out of reach* when even the rest of the budget could not settle it: its interval,
narrowed as the square root of the samples still to come, would still reach across the edge
(a sequential test's stop for futility). The runner asks ``group_done`` after each round of an
interleaved group, past the profile's own rounds, and visits a group no more once each of its
comparisons is settled or out of reach (``serbench.runner.visits.Stopping``);
``serbench.analysis.decision`` says of each decision whether its ratios were settled.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence

from serbench.analysis.estimates import Estimate, center_of, geometric_ratio
from serbench.analysis.ranking import headline_metric, measurements, tie_margin, yardsticks
from serbench.model.results import Record, Results
from serbench.model.stats import MIN_DISTRIBUTION, Measurement


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


def group_done(records: Sequence[Record], growth: float = 1.0) -> bool:
    """Whether visiting one group more could change none of its comparisons: every comparison
    between the rows of its ``records`` (the cases that differ only in backend, each its visits
    so far merged), in the scenario's headline metric, each row against each other with that
    row's ``tie_margin``, is settled, or beyond settling once the samples grow ``growth``-fold
    (the visits planned over those made; 1: none left). A failed record compares nothing; a
    group with one measured row has nothing left to compare. A row with fewer than
    ``MIN_DISTRIBUTION`` samples in a workload settles nothing yet: its interval would rest on a
    value, not a distribution; nor does a comparison without an interval."""
    data = Results(records=[rec for rec in records if rec.ok])
    if not data.records:
        return False
    scenario = data.records[0].scenario
    name = headline_metric(data, scenario)
    if name is None:
        return False
    measured = measurements(data, scenario, name)
    if any(m.n < MIN_DISTRIBUTION for row in measured.values() for m in row.values()):
        return False
    yardstick = yardsticks(data, scenario, name)
    rows = list(measured)
    comparisons = [
        list(_comparisons(name, measured[a], measured[b], yardstick.get(a, {}), yardstick.get(b, {})))
        for i, a in enumerate(rows)
        for b in rows[i + 1 :]
    ]
    return all(
        estimate is not None and (settled(estimate, margin) or not within_reach(estimate, margin, growth))
        for pair in comparisons
        for estimate, margin in pair
    )


def _comparisons(
    name: str,
    first: Mapping[str, Measurement],
    second: Mapping[str, Measurement],
    first_yardstick: Mapping[str, Measurement],
    second_yardstick: Mapping[str, Measurement],
) -> Iterator[tuple[Estimate | None, float]]:
    """Row ``second`` against ``first`` over the workloads both measured, with ``first``'s
    ``tie_margin``, and the reciprocal with ``second``'s; None for a ratio without an interval;
    nothing in common: nothing to compare."""
    common = [w for w in first if w in second]
    if not common:
        return
    margin, back_margin = (
        tie_margin(name, m, y, common) for m, y in ((first, first_yardstick), (second, second_yardstick))
    )
    estimate = geometric_ratio([(first[w], second[w]) for w in common], center_of(name))
    if estimate is None or estimate.low is None or estimate.high is None or estimate.low <= 0:
        yield None, margin
        return
    yield estimate, margin
    yield Estimate(1 / estimate.ratio, 1 / estimate.high, 1 / estimate.low, estimate.n), back_margin
