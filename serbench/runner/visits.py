"""The order a run visits its cases in, and a case's visits merged into one record.

A scenario that measures its cases in rounds (``Scenario.rounds``: ipc, fanout,
micro) has the cases that differ only in their backend form a group; each
round visits every backend of the group in turn, the first of one round the
last of the next (A B C, B C A, C A B), each visit a fresh child measuring
``Profile.share`` of the case's samples, as the gate alternates base and head.
A slow spell of the machine then lands on every backend of a round instead of
on whichever case was running, and round ``i`` of two backends is a pair
(``serbench.analysis.estimates.ratio_estimate``). A scenario that measures a group
``together`` (micro) has each round of it in one child (``batches``). A case's
visits are merged into one record (``merged``); a scenario may end them early
(``Scenario.revisit``), and a run may stop visiting the backends of a group whose comparisons
more visits would not change (``Stopping``: a stopping rule the command line hands down, as a
sequential test stops).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import msgspec

from serbench.model import metrics
from serbench.model.profiles import Profile
from serbench.model.results import Backend, Case, Record, Results, merge
from serbench.scenarios import get_scenario

# The backends of a group that more visits could still tell something about (none: the group is done),
# given its records so far (each case's visits merged, with the run's backends) and how many-fold its
# samples could still grow (the rounds planned over those made): the analysis layer's rule
# (``serbench.analysis.settled.still_open``), handed down by the command.
StopRule = Callable[[Results, float], frozenset[str]]


@dataclass(frozen=True)
class Visit:
    """One child's measurement of a case: round ``round`` (from 0) of the ``rounds`` it is measured
    in (1: the case whole, in one visit)."""

    case: Case
    round: int = 0
    rounds: int = 1

    @property
    def together(self) -> bool:
        """Measured in one child with the other visits of its group's round (``Scenario.together``)."""
        return self.rounds > 1 and get_scenario(self.case.scenario).together


def group_of(case: Case) -> Case:
    """What the cases of one group share: the case less its backend."""
    return msgspec.structs.replace(case, backend="")


def visit_order(cases: list[Case], profile: Profile) -> list[Visit]:
    """The order a run measures ``cases`` in: each case in one visit, in turn, except those its
    scenario measures in rounds (``Scenario.rounds``): the cases that differ only in backend
    are a group, measured where its first case stands, round by round, each round every
    backend in turn, starting one later each round (A B C, B C A, C A B, A B C, ...)."""
    groups: dict[tuple[Case, int], list[Case]] = {}  # (the case less its backend, rounds) → cases
    for case in cases:
        rounds = get_scenario(case.scenario).rounds(case, profile)
        key = (case, 1) if rounds == 1 else (group_of(case), rounds)
        groups.setdefault(key, []).append(case)
    planned = []
    for (_, rounds), members in groups.items():
        for r in range(rounds):
            turn = r % len(members)
            planned.extend(Visit(case, r, rounds) for case in members[turn:] + members[:turn])
    return planned


def batches(planned: list[Visit]) -> Iterator[list[tuple[int, Visit]]]:
    """The visits in the order planned, with their index, one list per child: a visit alone, or
    the consecutive visits of one round of a group measured together (``Visit.together``)."""
    batch: list[tuple[int, Visit]] = []
    for index, visit in enumerate(planned):
        if batch and not (visit.together and _same_round(batch[-1][1], visit)):
            yield batch
            batch = []
        batch.append((index, visit))
    if batch:
        yield batch


def _same_round(first: Visit, second: Visit) -> bool:
    """The same round of the same group: the same case but for its backend."""
    return first.together and first.round == second.round and group_of(first.case) == group_of(second.case)


def revisited(visit: Visit, profile: Profile, done: list[Record]) -> bool:
    """Whether the case's scenario takes this visit after the ``done`` ones (``Scenario.revisit``)."""
    if not done:
        return True
    spent = sum(rec.duration_s for rec in done)
    return get_scenario(visit.case.scenario).revisit(visit.case, profile, len(done), spent)


def merged(recs: list[Record]) -> Record:
    """A case's record from its visits so far: ``results.merge`` of one document per visit, with
    each statistic of another metric (``ttft_p99_s`` of ``ttft_s``) taken again over every
    visit's samples: the visits share one case's requests out, and the p99 of all of them is not
    the median of each share's."""
    rec = merge([Results(records=[rec]) for rec in recs]).records[0]
    pooled = {
        name: metrics.statistic(name, rec.metrics[metric.statistic_of].values)
        for name, metric in metrics.METRICS.items()
        if metric.statistic_of in rec.metrics
    }
    kept = {name: m for name, m in rec.metrics.items() if name not in pooled}
    kept.update((name, m) for name, m in pooled.items() if m is not None)
    return msgspec.structs.replace(rec, metrics=kept)


class Stopping:
    """Which visits of a group a run takes no more because they would not change its comparisons:
    at the start of each round from the profile's ``rounds`` on (those always taken), ``rule`` is
    asked once of the group's records so far and of the rounds planned over those made, and
    the later rounds visit only the backends it names (one it left out once, never again); once
    it names none, the group's later rounds are left out. Without a rule, or for a profile that
    is not ``sequential``, every round planned is taken."""

    def __init__(self, rule: StopRule | None, profile: Profile, backends: dict[str, Backend]) -> None:
        self.rule = rule if profile.sequential else None
        self.backends = backends
        self.minimum = profile.rounds
        self.records: dict[Case, dict[Case, Record]] = {}  # group → case → its record so far
        self.asked: dict[Case, int] = {}  # group → the round the rule was last asked at
        self.open: dict[Case, frozenset[str]] = {}  # group → the backends the rule last left open

    def keep(self, case: Case, rec: Record) -> None:
        """``rec``: the record of ``case`` so far, its visits merged."""
        self.records.setdefault(group_of(case), {})[case] = rec

    def takes(self, visit: Visit) -> bool:
        """Whether the run takes ``visit``: its backend still open in its group."""
        if visit.rounds == 1:
            return True
        group = group_of(visit.case)
        done = self.open.get(group) == frozenset()
        fresh = visit.round >= self.minimum and self.asked.get(group) != visit.round
        if self.rule is not None and fresh and not done:
            self.asked[group] = visit.round
            so_far = Results(records=list(self.records.get(group, {}).values()), backends=self.backends)
            # a backend once closed stays so: its visits stay its group's first rounds, which
            # the analysis pairs with the others' first (``estimates.ratio_estimate``)
            still = self.rule(so_far, visit.rounds / visit.round)
            self.open[group] = still & self.open[group] if group in self.open else still
        return group not in self.open or visit.case.backend in self.open[group]
