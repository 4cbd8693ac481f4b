"""When the gate measures a case no more: every row of it settled, as a sequential test stops.

After each paired round the gate compares what both sides measured so far
(``analysis.verdicts.compare``, the rounds paired) and stops measuring a case
once each of its rows is settled (``MetricComparison.settled``: a regression,
no change or a change within tolerance whose interval lies wholly beyond or
wholly within the tolerance, on at least ``verdicts.MIN_PAIRS`` pairs) or is
beyond deciding within ``--rounds`` (``MetricComparison.beyond_deciding``: an
inconclusive row whose noise needs more rounds than are left to give it any
verdict). The cases still open take the remaining rounds, up to ``--rounds``;
the verdicts are the same rule's as a gate that took every round, on the rounds
taken.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from serbench.analysis.verdicts import MIN_PAIRS, compare
from serbench.model import results
from serbench.model.results import Case, Results


@dataclass(frozen=True)
class Stopping:
    """The thresholds the gate judges by (``--max-regression``, ``--metric-threshold``): a row is
    settled against the threshold it will be judged against."""

    max_regression: float = 0.10
    overrides: Mapping[str, float] = field(default_factory=dict)

    def settled_cases(self, runs: Sequence[Sequence[Results]], planned: int) -> set[Case]:
        """The cases of base's and head's rounds so far (``runs``) that need no more of the
        ``planned`` rounds: every row of theirs settled, or beyond deciding within them. A case on
        one side only, or failed on both, has no row to wait for once it has the floor of rounds."""
        base, head = (results.merge(side) for side in runs)
        comparison = compare(base, head, self.max_regression, dict(self.overrides), side_by_side=True)
        open_cases = {r.case for r in comparison.rows if not r.settled and not r.beyond_deciding(planned)}
        rounds: dict[Case, int] = {}
        for record in (*base.records, *head.records):
            rounds[record.case] = min(rounds.get(record.case, record.rounds or 0), record.rounds or 0)
        return {case for case, n in rounds.items() if n >= MIN_PAIRS and case not in open_cases}
