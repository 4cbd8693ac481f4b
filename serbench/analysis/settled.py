"""When more samples would not change a comparison: its interval wholly inside the tie, or wholly outside.

A ratio between two rows is *settled* once its 95 % interval lies wholly within the metric's
practical tie of 1 (``ranking.tie_margin``: the rows tie, and will) or wholly beyond it (they
differ, and will); an interval that reaches across the margin's edge could still fall either
way. The runner asks ``group_settled`` after each round of an interleaved group, past the
profile's own rounds, and visits a settled group no more (``serbench.runner.visits.Stopping``),
as a sequential test stops; ``serbench.analysis.decision`` says of each decision whether its
ratios were settled.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

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


def group_settled(records: Sequence[Record]) -> bool:
    """Whether every comparison between the rows of one group's ``records`` (the cases that differ
    only in backend, each its visits so far merged) is settled in the scenario's headline metric,
    each row against each other with that row's ``tie_margin`` (``_pair_settled``). A failed
    record compares nothing; a group with one measured row has nothing left to compare. A row
    with fewer than ``MIN_DISTRIBUTION`` samples in a workload settles nothing yet: its interval
    would rest on a value, not a distribution."""
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
    return all(
        _pair_settled(name, measured[a], measured[b], yardstick.get(a, {}), yardstick.get(b, {}))
        for i, a in enumerate(rows)
        for b in rows[i + 1 :]
    )


def _pair_settled(
    name: str,
    first: Mapping[str, Measurement],
    second: Mapping[str, Measurement],
    first_yardstick: Mapping[str, Measurement],
    second_yardstick: Mapping[str, Measurement],
) -> bool:
    """Row ``second`` against ``first`` over the workloads both measured, settled with
    ``first``'s ``tie_margin``, and the reciprocal with ``second``'s; nothing in common: nothing
    to settle."""
    common = [w for w in first if w in second]
    if not common:
        return True
    estimate = geometric_ratio([(first[w], second[w]) for w in common], center_of(name))
    if estimate is None or estimate.low is None or estimate.high is None or estimate.low <= 0:
        return False
    back = Estimate(1 / estimate.ratio, 1 / estimate.high, 1 / estimate.low, estimate.n)
    margin, back_margin = (
        tie_margin(name, m, y, common) for m, y in ((first, first_yardstick), (second, second_yardstick))
    )
    return settled(estimate, margin) and settled(back, back_margin)
