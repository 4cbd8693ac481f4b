"""The decision of a run: for each workload shape, the safe backends to use, and why.

What a user runs serbench for is an answer: which serializer (and transport) to use. For each
workload *shape* (``shape``: text, few images, many images, outputs, tensor, …) and each
scenario's headline metric (``metrics.Metric.headline``), the decision names the *safe* rows
(``ranking.row_of``; ``results.Backend.safe`` declared true) that are best within the run's own
noise: the best one, and every other whose ratio to it has an interval reaching within the
metric's practical tie of 1 (``ranking.tied``, ``ranking.tie_margin``) — ties are shown as ties.
The ratios and intervals are ``estimates.geometric_ratio``'s. Unsafe rows that beat the chosen
set beyond noise are listed apart as faster but unsafe, never chosen; variants
(``ranking.is_variant``) are not candidates.

Data and its wording: ``serbench.analysis.summary`` gathers both into a run's summary, which
every presenter prints alike.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from serbench.analysis.estimates import TRIM, Estimate, center_of, geometric_ratio
from serbench.analysis.ranking import (
    Ranked,
    best_row,
    better,
    has_payload,
    headline_metric,
    is_memory,
    is_safe,
    is_variant,
    measurements,
    tie_margin,
    tie_tolerance,
    tied,
    yardsticks,
)
from serbench.analysis.settled import settled
from serbench.model.metrics import COPY_TIE, LOWER_QUARTILE, MEDIAN, PRACTICAL_TIE, TRIMMED_MEAN, metric
from serbench.model.results import Case, Results
from serbench.model.specs import SpecError, parse_spec
from serbench.model.stats import MIN_DISTRIBUTION, Measurement
from serbench.model.units import UNITLESS, format_number, scale_for

# ``images-N`` with at most this many images is "few images", more is "many images": a fixed
# cut between the default matrix's images-4 and images-32, so each falls in a shape of its own.
FEW_IMAGES = 8

# The shapes serbench's own workloads fall into, in the order a decision lists them.
SHAPES = ("text", "few images", "many images", "outputs", "tensor")

_COUNTED = re.compile(r"([a-z]+)-(\d+)")


def shape(workload: str) -> str:
    """The shape of a workload spec: ``text`` (``text-…``), ``few images`` (``images-N``,
    N ≤ ``FEW_IMAGES``), ``many images`` (N above it), ``outputs`` (``outputs-B``), ``tensor``
    (``tensor-N``); any other ``family-N`` its family, anything else its name up to the first
    hyphen (``text-sonnet``: text). Options (``:profile=…``) do not change the shape."""
    try:
        name = parse_spec(workload).name
    except SpecError:
        name = workload
    counted = _COUNTED.fullmatch(name)
    if counted is None:
        return name.split("-", 1)[0]
    family, count = counted.group(1), int(counted.group(2))
    if family == "images":
        return "few images" if count <= FEW_IMAGES else "many images"
    return family


@dataclass(frozen=True)
class RatioToBest:
    """A row against the best safe row of its decision: ``estimate`` is this row / the best
    (the geometric mean over the shape's workloads, with its interval)."""

    row: Case
    estimate: Estimate


@dataclass(frozen=True)
class Decision:
    """What to use for one shape in one scenario's headline metric.

    ``chosen``: the best safe row first (its own ratio, 1), then the safe rows tied with
    it; ``runner_up``: the best safe row told apart from it (None when there is none);
    ``unsafe``: the unsafe rows better than the best safe one beyond noise, best first;
    ``best``: the best's measurement per workload; ``margin``: how far from 1 a ratio to it
    told a row apart (``ranking.tie_margin``). ``missing`` says why nothing is chosen
    (the lists are empty then). ``workers``: the worker count the rows ran with
    (``Case.workers``): a setting of the deployment, not a choice, so each count is decided
    apart.
    """

    shape: str
    scenario: str
    metric: str
    workloads: list[str]
    workers: int | None = None
    chosen: list[RatioToBest] = field(default_factory=list)
    runner_up: RatioToBest | None = None
    unsafe: list[RatioToBest] = field(default_factory=list)
    best: dict[str, Measurement] = field(default_factory=dict)
    margin: float = PRACTICAL_TIE
    missing: str = ""
    settled: bool | None = None

    @property
    def where(self) -> str:
        """The scenario, and the worker count where rows have one."""
        return self.scenario + ("" if self.workers is None else f" workers={self.workers}")

    @property
    def tie(self) -> bool:
        """More than one safe row is best within noise."""
        return len(self.chosen) > 1


def decide(
    data: Results, scenario: str, name: str, group: str, workloads: list[str], workers: int | None = None
) -> Decision:
    """The decision for one shape (``group``, measured on ``workloads``) in the scenario's metric
    ``name``: candidates are the rows with ``workers`` measured on every one of the workloads,
    less variants."""
    rows = {
        row: per_workload
        for row, per_workload in measurements(data, scenario, name).items()
        if row.workers == workers and not is_variant(row) and all(w in per_workload for w in workloads)
    }
    safe = [row for row in rows if is_safe(data, row)]
    if not safe:
        unsafe = ", ".join(sorted(data.row_label(row) for row in rows))
        reason = f"no safe backend measured (unsafe only: {unsafe})" if unsafe else "no backend measured"
        return Decision(group, scenario, name, workloads, workers, missing=reason)

    def against(base: Case, row: Case) -> Estimate:
        estimate = geometric_ratio([(rows[base][w], rows[row][w]) for w in workloads], center_of(name))
        assert estimate is not None  # ``measurements`` keeps positive medians only
        return estimate

    sign = -1 if metric(name).higher_is_better else 1
    best = best_row(data, name, rows, workloads)
    ratios = sorted(
        (RatioToBest(row, against(best, row)) for row in rows if row != best),
        key=lambda s: sign * s.estimate.ratio,
    )
    margin = tie_margin(name, rows[best], yardsticks(data, scenario, name).get(best, {}), workloads)
    level = [s for s in ratios if is_safe(data, s.row) and tied(name, s.estimate, margin)]
    apart = [s for s in ratios if is_safe(data, s.row) and s not in level]
    unsafe = [s for s in ratios if not is_safe(data, s.row) and better(name, s.estimate, margin)]
    intervals = all(s.estimate.low is not None for s in ratios)
    return Decision(
        group,
        scenario,
        name,
        workloads,
        workers,
        chosen=[RatioToBest(best, Estimate(1.0, 1.0, 1.0, len(workloads))), *level],
        runner_up=apart[0] if apart else None,
        unsafe=unsafe,
        best={w: rows[best][w] for w in workloads},
        margin=margin,
        settled=all(settled(s.estimate, margin) for s in ratios) if intervals else None,
    )


def _shape_order(group: str) -> tuple[int, str]:
    known = SHAPES.index(group) if group in SHAPES else len(SHAPES)
    return known, group


def decisions(data: Results) -> list[Decision]:
    """Every decision of a run: per shape (``SHAPES`` first, in that order), per scenario with a
    headline metric (in the run's order). A memory metric (``ranking.is_memory``) leaves out
    the workloads without a payload (text): the shape says so instead of choosing."""
    out = []
    for scenario in data.scenarios():
        name = headline_metric(data, scenario)
        if name is None:
            continue
        groups: dict[tuple[str, int | None], list[str]] = {}
        for rec in data.of(scenario):
            workloads = groups.setdefault((shape(rec.workload), rec.workers), [])
            if rec.workload not in workloads:
                workloads.append(rec.workload)
        for (group, workers), workloads in groups.items():
            kept = [w for w in workloads if not is_memory(name) or has_payload(data, scenario, w)]
            if not kept:
                reason = "not decided: no tensor payload, the peak is the process's own"
                out.append(Decision(group, scenario, name, workloads, workers, missing=reason))
                continue
            out.append(decide(data, scenario, name, group, kept, workers))
    order = {scenario: i for i, scenario in enumerate(data.scenarios())}
    return sorted(out, key=lambda d: (_shape_order(d.shape), order[d.scenario], d.workers or 0))


def _measured(m: Measurement) -> str:
    """A median in its unit, named so (the ratios beside it may be of another center), its 95 %
    interval and n; a few samples (under ``MIN_DISTRIBUTION``) only the value and n."""
    factor, unit = scale_for(m.unit, m.median)
    shown = "" if unit in UNITLESS else f" {unit}"
    value = f"{format_number(m.median / factor)}{shown}"
    if m.n < MIN_DISTRIBUTION:
        return f"{value} (n={m.n})"
    return f"median {value} [{format_number(m.ci_low / factor)}, {format_number(m.ci_high / factor)}] n={m.n}"


def _ratio(value: float) -> str:
    """A ratio with two decimals (``1.00``, ``0.97``), whole from 100 on."""
    return f"{value:.2f}" if abs(value) < 100 else f"{value:.0f}"


def interval_text(estimate: Estimate) -> str:
    """``[1.03, 1.21]``: an estimate's 95 % interval; "" without one."""
    return "" if estimate.low is None else f"[{_ratio(estimate.low)}, {_ratio(estimate.high)}]"


def ratio_text(estimate: Estimate) -> str:
    """``×1.12 [1.03, 1.21]``: a ratio to the best and its interval (none without one)."""
    return f"×{_ratio(estimate.ratio)} {interval_text(estimate)}".rstrip()


def chosen_text(decision: Decision, data: Results) -> str:
    """The rows to use: ``a``, or ``a = b = c (tied)``; or why there are none."""
    if decision.missing:
        return decision.missing
    names = " = ".join(data.row_label(s.row) for s in decision.chosen)
    return f"{names} (tied)" if decision.tie else names


def reasons(decision: Decision, data: Results) -> list[str]:
    """One line of why, in parts (joined with "; "): the metric and the best's median, interval
    and n per workload (named a median: the ratios are of ``estimates.center_of``); each tied
    row's ratio to it with its interval; the runner-up's, which its interval tells apart. []
    for a decision without a choice."""
    if decision.missing:
        return []
    several = len(decision.workloads) > 1
    best = ", ".join((f"{w} " if several else "") + _measured(m) for w, m in decision.best.items())
    parts = [f"{metric(decision.metric).label}: {data.row_label(decision.chosen[0].row)} {best}"]
    parts += [f"{data.row_label(s.row)} {ratio_text(s.estimate)}" for s in decision.chosen[1:]]
    after = decision.runner_up
    if after is not None:
        parts.append(f"next {data.row_label(after.row)} {ratio_text(after.estimate)}")
    estimates = [s.estimate for s in decision.chosen[1:]] + ([] if after is None else [after.estimate])
    if decision.margin > metric(decision.metric).practical_tie:
        parts.append(f"tied within {decision.margin:.0%}: {COPY_TIE:.0%} of a payload copy")
    if any(e.low is None for e in estimates):
        parts.append(f"no interval: within {tie_tolerance(decision.metric):.0%} is a tie")
    if several:
        parts.append(f"ratios: geometric mean over the {len(decision.workloads)} workloads")
    return parts


def unsafe_items(decision: Decision, data: Results) -> list[str]:
    """The unsafe rows better than the chosen ones, each with its ratio and, where it made no
    claim, ``(safety undeclared)``; [] when none is."""
    return [
        f"{data.row_label(s.row)}{_undeclared(data, s.row)} {ratio_text(s.estimate)}" for s in decision.unsafe
    ]


def _undeclared(data: Results, row: Case) -> str:
    """The safety mark of an unsafe row where it says more than "unsafe" (``Results.safety_mark``)."""
    mark = data.safety_mark(row)
    return "" if mark == " (unsafe)" else mark


# ---------------------------------------------------------------- how a ranking reads (text and report alike)


def _margin_words(name: str) -> str:
    """A metric's practical tie in words: ``10%``; ``max(2%, 1% of a payload copy)`` for one
    with a ``Metric.tie_yardstick`` (``ranking.tie_margin``)."""
    facts = metric(name)
    words = f"{facts.practical_tie:.0%}"
    return f"max({words}, {COPY_TIE:.0%} of a payload copy)" if facts.tie_yardstick else words


def tie_rule(names: Iterable[str]) -> str:
    """When two rows tie in the metrics ``names`` (``ranking.tied``): "unless the whole interval
    is more than 5% from 1", a metric whose practical tie is another named with its own
    ("(TTFT 10%)")."""
    words = {metric(name).label: _margin_words(name) for name in names}
    default = f"{PRACTICAL_TIE:.0%}"
    distinct = set(words.values()) or {default}
    rule = "unless the whole interval is more than {} from 1"
    if len(distinct) == 1:
        return rule.format(distinct.pop())
    own = ", ".join(f"{label} {margin}" for label, margin in words.items() if margin != default)
    return f"{rule.format(default)} ({own})"


# What a metric taken in turn is compared by, whatever its center (``estimates.ratio_estimate``).
IN_TURN = "in turn"

# How ``center_rule`` names each ``metrics.Metric.center``, and ``IN_TURN``.
CENTER_WORDS = {
    MEDIAN: "medians",
    TRIMMED_MEAN: f"{TRIM:.0%}-trimmed means",
    LOWER_QUARTILE: "lower quartiles",
    IN_TURN: "samples taken in turn",
}


def center_rule(data: Results, names: Iterable[str]) -> str:
    """What a ratio between two rows of ``data`` in the metrics ``names`` is a ratio of
    (``estimates.center_of``): "medians", or each metric with a center of its own named with it
    ("TTFT's 10%-trimmed means, other metrics' medians"); a metric whose samples the run took in
    turn (``Measurement.in_turn``): those samples, by the median of their ratios."""
    names = list(names)
    in_turn = {n for rec in data.records for n, m in rec.metrics.items() if n in names and m.in_turn}
    centers = {metric(n).label: IN_TURN if n in in_turn else metric(n).center for n in names}
    own = [f"{label}'s {CENTER_WORDS[center]}" for label, center in centers.items() if center != MEDIAN]
    if not own:
        return CENTER_WORDS[MEDIAN]
    return ", ".join(own + (["other metrics' medians"] if MEDIAN in centers.values() else []))


def ranking_title(data: Results, scenario: str, baseline: str) -> str:
    """What a ranking's factors are: a speed-up (higher is better) or × the baseline's memory
    (``ranking.is_memory``, lower is better)."""
    name = headline_metric(data, scenario) or ""
    if is_memory(name):
        return f"{scenario}: ranking by {metric(name).label}, × peak memory vs {baseline}, lower is better"
    return f"{scenario}: ranking by {metric(name).label}, speed-up (×) against {baseline}, higher is better"


def ranking_notes(data: Results, scenario: str, ranked: Sequence[Ranked]) -> list[str]:
    """What a ranking's marks mean: ties, variants, workloads left out of the mean."""
    name = headline_metric(data, scenario) or ""
    rule = f" ({tie_rule([name])})" if name else ""
    notes = [f"geomean: over the n workloads, with its 95% interval; N=: tied{rule}"]
    if name and metric(name).center != MEDIAN:
        notes.append(f"factors: ratios of {center_rule(data, [name])}")
    if any(r.variant for r in ranked):
        notes.append("vN: variants (specs with options, e.g. threshold=inf), ranked apart")
    shown = dict.fromkeys(w for r in ranked for w in r.factors)
    left = [w for w in shown if is_memory(name) and not has_payload(data, scenario, w)]
    if left:
        notes.append(f"{', '.join(left)}: no tensor payload, left out of the geometric mean")
    return notes
