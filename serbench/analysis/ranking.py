"""Rows of one run against each other: the ranking against a baseline, ties, and noise.

A row is a backend with its dimensions (``row_of``: a backend over shm ranks apart from it over
ipc). Within a scenario's headline metric (``metrics.Metric.headline``) each row's factor
against the baseline per workload, their geometric mean with its interval
(``estimates.geometric_ratio``), and ranks shared by rows not told apart (``tied``: some of the
interval lies within the metric's practical tie of 1, ``tie_margin``). ``serbench.analysis.decision``
chooses from the same measurements and ties; ``spreads`` says how well a run pinned its medians.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from serbench.analysis.estimates import Estimate, center_of, geometric_ratio, location
from serbench.model.metrics import COPY_TIE, metric
from serbench.model.results import Case, Results
from serbench.model.specs import SpecError, parse_spec
from serbench.model.stats import MIN_DISTRIBUTION, Measurement, relative_spread

# Two values without an interval (one reading a side: memory's quick profile) of a metric
# that declares no tolerance of its own tie within this: the resolution memory's copies are
# compared at (a hundredth of the payload).
NO_INTERVAL_TOLERANCE = 0.01

DEFAULT_BASELINE = "pickle"


def row_of(case: Case) -> Case:
    """The part of a case that makes a table's row: the case less its scenario (the table's)
    and workload (the column), so every other dimension (transport, workers, ...) tells rows
    apart. Labelled by ``Results.row_label`` and ``Results.safety_mark`` like any case."""
    fields = {name: getattr(case, name) for name in Case.__struct_fields__}
    return Case(**{**fields, "scenario": "", "workload": ""})


def spreads(data: Results) -> dict[str, dict[tuple[Case, str], float]]:
    """How well a run pinned its medians: per scenario, (case, metric) → the relative
    half-width of the median's CI, for every sampled metric with a distribution (at least
    ``stats.MIN_DISTRIBUTION`` samples)."""
    out: dict[str, dict[tuple[Case, str], float]] = {}
    for rec in data.of():
        for name, measured in rec.metrics.items():
            if not metric(name).exact and measured.n >= MIN_DISTRIBUTION:
                out.setdefault(rec.scenario, {})[rec.case, name] = relative_spread(measured.values)
    return out


def typical_spread(data: Results) -> float | None:
    """The typical (median) relative CI half-width over every metric ``spreads`` counts."""
    values = [v for per_scenario in spreads(data).values() for v in per_scenario.values()]
    return statistics.median(values) if values else None


def tie_tolerance(name: str) -> float:
    """How far apart two values of ``name`` without an interval may be and still tie: a count's
    own ``Metric.tolerance``, else ``NO_INTERVAL_TOLERANCE``."""
    facts = metric(name)
    return facts.tolerance if facts.counted else NO_INTERVAL_TOLERANCE


def tied(name: str, estimate: Estimate, margin: float | None = None) -> bool:
    """Whether two rows whose ratio in metric ``name`` is ``estimate`` tie: ``Estimate.tied``
    with the metric's tolerance without an interval and ``margin`` (``tie_margin``; by default
    the metric's ``Metric.practical_tie``)."""
    return estimate.tied(tie_tolerance(name), metric(name).practical_tie if margin is None else margin)


def tie_margin(
    name: str, base: Mapping[str, Measurement], yardstick: Mapping[str, Measurement], workloads: Sequence[str]
) -> float:
    """How far from 1 a ratio to a row over ``workloads`` in metric ``name`` must lie to tell
    two rows apart: ``Metric.practical_tie``, or on a workload where that row measured its
    ``Metric.tie_yardstick`` (``yardstick``, per workload; ``base``: its own measurements), the
    larger of it and ``COPY_TIE`` of the yardstick over the row's value; over several workloads,
    the geometric mean of the workloads' margins (as the ratio is of their ratios)."""
    facts = metric(name)
    margins = []
    for w in workloads:
        of_copy = 0.0
        if w in yardstick and w in base:
            of_copy = COPY_TIE * location(facts.tie_yardstick, yardstick[w]) / location(name, base[w])
        margins.append(max(facts.practical_tie, of_copy))
    if len(set(margins)) < 2:  # one margin for all: itself, exactly
        return margins[0] if margins else facts.practical_tie
    return math.exp(statistics.fmean(math.log1p(m) for m in margins)) - 1


def yardsticks(data: Results, scenario: str, name: str) -> dict[Case, dict[str, Measurement]]:
    """``measurements`` of metric ``name``'s ``Metric.tie_yardstick`` ({} for a metric without
    one): what ``tie_margin`` reads beside a row's own."""
    facts = metric(name)
    return measurements(data, scenario, facts.tie_yardstick) if facts.tie_yardstick else {}


def is_variant(row: Case) -> bool:
    """A backend spec with options (``threshold=inf``, memory's zero-copy-off variants): a
    setting of a backend rather than a backend to choose, ranked apart and never chosen."""
    try:
        return bool(parse_spec(row.backend).options)
    except SpecError:
        return False


def is_memory(name: str) -> bool:
    """A metric of memory (bytes, or copies of the payload), read as × the baseline, lower is
    better, rather than as a speed-up."""
    facts = metric(name)
    return facts.unit in ("bytes", "ratio") and not facts.higher_is_better


def has_payload(data: Results, scenario: str, workload: str) -> bool:
    """Whether the workload carries tensors (``Info.payload_bytes`` not 0): a memory metric of one
    without (text) is the process's own noise, not the backend's copies."""
    sizes = {r.info.payload_bytes for r in data.of(scenario) if r.workload == workload and r.info}
    return sizes != {0}


def measurements(data: Results, scenario: str, name: str) -> dict[Case, dict[str, Measurement]]:
    """Per row (``row_of``), per workload, the metric's measurement in the scenario's cases that
    ran (a zero or negative median left out: it has no ratio)."""
    out: dict[Case, dict[str, Measurement]] = {}
    for rec in data.of(scenario):
        measured = rec.metrics.get(name)
        if measured is not None and measured.median > 0:
            out.setdefault(row_of(rec), {})[rec.workload] = measured
    return out


def is_safe(data: Results, row: Case) -> bool:
    """Declared safe; undeclared counts as unsafe (``results.Backend.safe``)."""
    return data.backend(row).safe is True


def best_row(
    data: Results, name: str, rows: Mapping[Case, Mapping[str, Measurement]], workloads: Sequence[str]
) -> Case:
    """The row a decision measures the others against: of the safe ``rows`` (every row where none
    is safe), the one of the lowest (a rate: highest) geometric mean over ``workloads`` of where
    each stands (``estimates.location``: the metric's center of its samples)."""
    candidates = [row for row in rows if is_safe(data, row)] or list(rows)
    sign = -1 if metric(name).higher_is_better else 1

    def standing(row: Case) -> float:
        return sign * sum(math.log(location(name, rows[row][w])) for w in workloads)

    return min(candidates, key=standing)


def better(name: str, estimate: Estimate, margin: float | None = None) -> bool:
    """Whether head is better than base by ``estimate`` (head/base) and told apart from it
    (``tied`` with ``margin``)."""
    if tied(name, estimate, margin):
        return False
    return estimate.ratio > 1 if metric(name).higher_is_better else estimate.ratio < 1


@dataclass(frozen=True)
class Ranked:
    """One row against the baseline in one scenario's headline metric.

    ``row`` is the backend with its dimensions (``row_of``: a backend over
    shm ranks apart from it over ipc), for ``Results.row_label``. ``factors``
    maps a workload to the row's factor against the baseline: for a speed, the
    speed-up (baseline / row of a time, row / baseline of a rate; above 1 is
    better); for memory (``is_memory``), × the baseline's (below 1 is better).
    ``geomean`` is their geometric mean with its interval over the workloads in
    the mean (``Estimate.n``; memory leaves out workloads without a payload).
    ``rank`` is shared by rows not told apart (``tied``), numbered as in sport
    (1, 1, 3); ``variant`` rows (``is_variant``) are ranked in a group of their own.
    """

    row: Case
    factors: dict[str, float]
    geomean: Estimate | None
    rank: int = 0
    tied: bool = False
    variant: bool = False

    @property
    def backend(self) -> str:
        """The backend spec."""
        return self.row.backend

    @property
    def n(self) -> int:
        """Workloads in the geometric mean."""
        return 0 if self.geomean is None else self.geomean.n

    @property
    def place(self) -> str:
        """The rank as a table shows it: ``1``, ``2=`` for a tie, ``v1`` in the variants' group."""
        return f"{'v' if self.variant else ''}{self.rank}{'=' if self.tied else ''}"


def headline_metric(data: Results, scenario: str) -> str | None:
    """The scenario's ranking metric (``metrics.Metric.headline``) present in ``data``."""
    present = {n for r in data.of(scenario) for n in r.metrics}
    return next((n for n in present if metric(n).headline), None)


def _factor_pair(name: str, row: Measurement, base: Measurement) -> tuple[Measurement, Measurement]:
    """(base, head) for ``ratio_estimate`` so that head/base is the row's factor (``Ranked``)."""
    speed_of_time = not is_memory(name) and not metric(name).higher_is_better
    return (row, base) if speed_of_time else (base, row)


def _ranks(
    name: str,
    rows: list[Ranked],
    measured: dict[Case, dict[str, Measurement]],
    yardstick: dict[Case, dict[str, Measurement]],
    in_mean: set[str],
) -> list[Ranked]:
    """``rows`` (best first) with ranks: a row not told apart from the leader of the rank before
    it (``tied`` on their geometric ratio over the workloads of the mean both have, with the
    leader's ``tie_margin``: ``yardstick`` as ``yardsticks`` gives it)
    shares its rank; any other opens a rank of its own, at its position."""
    out: list[Ranked] = []
    lead = -1  # index in ``out`` of the current rank's first row
    for position, row in enumerate(rows, 1):
        if lead >= 0 and row.geomean is not None:
            first = measured[out[lead].row]
            common = [w for w in measured[row.row] if w in first and w in in_mean]
            apart = geometric_ratio([(first[w], measured[row.row][w]) for w in common], center_of(name))
            margin = tie_margin(name, first, yardstick.get(out[lead].row, {}), common)
            if apart is not None and tied(name, apart, margin):
                out[lead] = replace(out[lead], tied=True)
                out.append(replace(row, rank=out[lead].rank, tied=True))
                continue
        lead = len(out)
        out.append(replace(row, rank=position))
    return out


def ranking(data: Results, scenario: str, baseline: str = DEFAULT_BASELINE) -> list[Ranked]:
    """Rows (``row_of``) best first by the geometric mean of their factor against the baseline
    across workloads, in the scenario's headline metric, ties sharing a rank (``Ranked``);
    variants after the backends, ranked among themselves; [] without the baseline or metric.
    The baseline is a row as ``Case.row`` writes it: a spec over the default transport
    (``pickle``), or over another (``pickle@shm``)."""
    name = headline_metric(data, scenario)
    if name is None:
        return []
    measured = measurements(data, scenario, name)
    base = next((per_workload for row, per_workload in measured.items() if row.row == baseline), None)
    if not base:
        return []
    memory = is_memory(name)
    in_mean = {w for w in base if not memory or has_payload(data, scenario, w)}
    rows = []
    for row, per_workload in measured.items():
        pairs = {w: _factor_pair(name, m, base[w]) for w, m in per_workload.items() if w in base}
        factors = {w: location(name, head) / location(name, base_m) for w, (base_m, head) in pairs.items()}
        geomean = geometric_ratio([pair for w, pair in pairs.items() if w in in_mean], center_of(name))
        rows.append(Ranked(row, factors, geomean, variant=is_variant(row)))

    def order(r: Ranked) -> tuple[bool, bool, float]:
        if r.geomean is None:
            return r.variant, True, 0.0
        return r.variant, False, r.geomean.ratio if memory else -r.geomean.ratio

    rows.sort(key=order)
    groups = [[r for r in rows if r.variant == variant] for variant in (False, True)]
    yardstick = yardsticks(data, scenario, name)
    return [ranked for group in groups for ranked in _ranks(name, group, measured, yardstick, in_mean)]
