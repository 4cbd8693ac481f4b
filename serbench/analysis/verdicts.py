"""Base against head: did head get worse? A verdict per case and metric.

For every case (``results.Case``) and metric in both files: the ratio head/base with its
interval (``serbench.analysis.estimates``) and a ``Verdict``. A regression is a significant
slowdown not shown to be within the tolerated threshold; "inconclusive" a row that could not
have seen a slowdown of its threshold (``detectable`` above it, or no interval), unless a
significant slowdown was seen anyway. Exact metrics and counts are always decisive; a count
counted under several interpreter layouts is judged against the larger of its tolerance and
its band (the spread between the layouts: ``layout_band``); where a
case's instructions were counted, an inconclusive clock row of the work the counts cover reads
"counts decide". "Slowdown" is head/base for timings and base/head for rates. A case that failed
in head only is "failed in head", the reverse "fixed in head"; cases on one side only are added
or removed. Two plain runs give indicative verdicts only (``unpaired_verdict``); the gate's
rounds, measured side by side, pair and decide.

Statistics and verdicts only: ``serbench.analysis.summary`` turns a ``Comparison`` into what the
presenters print.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from serbench.analysis.estimates import Estimate, detectable, ratio_estimate
from serbench.analysis.settled import settled
from serbench.model.metrics import compared, metric
from serbench.model.results import COMPARABLE, Case, Results
from serbench.model.stats import MIN_DISTRIBUTION, Measurement


class Verdict(str, enum.Enum):
    """What one row of a comparison says; the value is the text the tables and files show."""

    REGRESSION = "regression"
    IMPROVEMENT = "improvement"
    SLOWER_TOLERATED = "slower, within tolerance"
    FASTER_TOLERATED = "faster, within tolerance"
    SLOWER_INDICATIVE = "slower (indicative)"
    FASTER_INDICATIVE = "faster (indicative)"
    NO_CHANGE = "no change"
    INCONCLUSIVE = "inconclusive"
    COUNTS_DECIDE = "counts decide"
    FAILED_IN_HEAD = "failed in head"
    FIXED_IN_HEAD = "fixed in head"

    def __str__(self) -> str:
        return self.value


BAD_VERDICTS = (Verdict.FAILED_IN_HEAD, Verdict.REGRESSION)

# The metric name of a row that stands for a whole case (failed/fixed in head).
CASE_METRIC = "error"
# The fewest paired rounds a sampled row settles on: fewer pairs give a bootstrap interval that
# rests on a handful of values, lopsided at that (``estimates.detectable``).
MIN_PAIRS = MIN_DISTRIBUTION


@dataclass(frozen=True)
class MetricComparison:
    """One metric of one case, base against head."""

    case: Case
    metric: str
    unit: str
    base_median: float | None
    head_median: float | None
    ratio: float | None  # head / base
    ci_low: float | None  # interval of the ratio
    ci_high: float | None
    verdict: Verdict
    exact: bool  # machine-independent metric compared exactly
    detectable: float | None = None  # smallest slowdown told from noise (0.02 = 2 %); a count: its tolerance
    threshold: float | None = None  # the tolerated slowdown this row was judged against
    rounds: int | None = None  # paired rounds (the gate's pairs) behind the interval; None: unpaired
    band: float | None = None  # a count's spread between the layouts it was counted under (``layout_band``)

    @property
    def decisive(self) -> bool:
        """Whether this row decided something (not "inconclusive")."""
        return self.verdict != Verdict.INCONCLUSIVE

    @property
    def settled(self) -> bool:
        """Whether more paired rounds would not change this row's verdict: a decisive row with at
        least ``MIN_PAIRS`` pairs whose interval lies wholly within its threshold of 1 or wholly
        beyond it (``analysis.settled``); exact rows, counts and failures always are."""
        if self.exact or self.metric == CASE_METRIC:
            return True
        if not self.decisive or self.rounds is None or self.rounds < MIN_PAIRS or self.ratio is None:
            return False
        return settled(Estimate(self.ratio, self.ci_low, self.ci_high, self.rounds), self.threshold or 0.0)

    def beyond_deciding(self, rounds: int) -> bool:
        """Whether this row would still be inconclusive after ``rounds`` paired rounds at the noise
        its ``MIN_PAIRS`` or more showed (``rounds_to_decide``): rounds up to there cannot give it
        a verdict, so it holds its case open no longer (a sequential test's stop for futility)."""
        if self.verdict != Verdict.INCONCLUSIVE or self.rounds is None or self.rounds < MIN_PAIRS:
            return False
        needed = rounds_to_decide(self)
        return needed is None or needed > rounds

    @property
    def scenario(self) -> str:
        return self.case.scenario

    @property
    def backend(self) -> str:
        """The backend spec (the transport and any other dimension are the case's own fields)."""
        return self.case.backend

    @property
    def workload(self) -> str:
        return self.case.workload

    @property
    def slowdown(self) -> float:
        """How many times worse head is (>1 worse, <1 better); inf for a failure in head."""
        if self.verdict == Verdict.FAILED_IN_HEAD:
            return math.inf
        if self.ratio is None or self.ratio == 0:
            return 1.0
        return 1 / self.ratio if metric(self.metric).higher_is_better else self.ratio


@dataclass
class Comparison:
    """Every metric row, the cases on one side only, and what differs in the environments."""

    rows: list[MetricComparison]
    added: list[Case]
    removed: list[Case]
    environment_differences: dict[str, tuple]
    head_errors: dict[Case, str] = field(default_factory=dict)
    not_measured: dict[Case, str] = field(default_factory=dict)  # unsupported on both sides: why

    @property
    def regressions(self) -> list[MetricComparison]:
        """Rows that fail the gate, worst first; a derived metric (``metrics.Metric.derived``)
        only when nothing else of its case regressed, so that one slowdown counts once."""
        bad = [r for r in worst_first(self.rows) if r.verdict in BAD_VERDICTS]
        primary = {r.case for r in bad if not metric(r.metric).derived}
        return [r for r in bad if not (metric(r.metric).derived and r.case in primary)]

    @property
    def changes(self) -> list[MetricComparison]:
        """Rows with any verdict but "no change", worst first."""
        return [r for r in self.rows if r.verdict != Verdict.NO_CHANGE]

    @property
    def indicative(self) -> list[MetricComparison]:
        """Rows flagged beyond tolerance by unpaired runs: shown, not failing (see ``compare``)."""
        return [r for r in self.rows if r.verdict in (Verdict.SLOWER_INDICATIVE, Verdict.FASTER_INDICATIVE)]

    @property
    def inconclusive(self) -> list[MetricComparison]:
        """Rows that could not have seen a slowdown of their threshold (``checked_for_power``), widest
        ``detectable`` first."""
        rows = [r for r in self.rows if r.verdict == Verdict.INCONCLUSIVE]
        return sorted(rows, key=lambda r: -(math.inf if r.detectable is None else r.detectable))

    @property
    def improvements(self) -> list[MetricComparison]:
        return [
            r for r in worst_first(self.rows) if r.verdict in (Verdict.IMPROVEMENT, Verdict.FIXED_IN_HEAD)
        ][::-1]


def worst_first(rows: Sequence[MetricComparison]) -> list[MetricComparison]:
    """Failures in head, then by slowdown, largest first."""
    return sorted(rows, key=lambda r: -r.slowdown)


def parse_tolerance(text: str) -> float:
    """A tolerated slowdown: ``"10%"`` or ``"0.1"`` → 0.1; ValueError otherwise (negative too)."""
    text = text.strip()
    value = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"tolerance {text!r} must be a non-negative number or percentage")
    return value


def environment_differences(base: Results, head: Results) -> dict[str, tuple]:
    """The ``results.COMPARABLE`` environment fields whose values differ: key → (base, head)."""
    b, h = base.environment.comparable(), head.environment.comparable()
    return {key: (b[key], h[key]) for key in COMPARABLE if b[key] != h[key]}


def case_order(case: Case) -> tuple[str, str, str]:
    """How lists of cases are sorted: scenario, the row (``Case.row``: backend and dimensions),
    workload."""
    return case.scenario, case.row, case.workload


def statistical_verdict(
    ratio: float | None, low: float | None, high: float | None, threshold: float, higher_is_better: bool
) -> Verdict:
    """Regression: a significant slowdown (interval above 1), estimated at no less than half
    the threshold, and not shown to be within it (the interval reaches ``1 + threshold``).
    A significant slowdown that is not a regression is "slower, within tolerance": seen, and
    let through. Improvement and "faster, within tolerance": the mirror images. Anything
    else: no change.

    The half-threshold floor keeps small but consistent shifts (a case measured
    after a different neighbour, a warmer page cache) from failing the gate when
    the interval is lopsided; a true slowdown of the full threshold clears it.
    """
    if ratio is None or low is None or high is None:
        return Verdict.NO_CHANGE
    slowdown, low, high = ratio, low, high
    if higher_is_better:  # express as a slowdown: >1 is worse
        slowdown, low, high = 1 / ratio, (1 / high if high else math.inf), (1 / low if low else math.inf)
    limit = 1 + threshold
    if low > 1:
        return (
            Verdict.REGRESSION
            if slowdown >= 1 + threshold / 2 and high >= limit
            else Verdict.SLOWER_TOLERATED
        )
    if high < 1:
        return (
            Verdict.IMPROVEMENT
            if slowdown <= 1 / (1 + threshold / 2) and low <= 1 / limit
            else Verdict.FASTER_TOLERATED
        )
    return Verdict.NO_CHANGE


def unpaired_verdict(verdict: Verdict) -> Verdict:
    """A statistical verdict of two single-process runs: indicative at most.

    Each side's interval comes from one process, so it says nothing of how
    much a second run of the same code would differ (allocator history, CPU
    placement, the machine's slow spells): two plain runs of one commit
    differ "significantly" in a few cases out of every hundred. Beyond
    tolerance is thus only indicative; within it is no change.
    """
    mapped = {
        Verdict.REGRESSION: Verdict.SLOWER_INDICATIVE,
        Verdict.IMPROVEMENT: Verdict.FASTER_INDICATIVE,
        Verdict.INCONCLUSIVE: Verdict.INCONCLUSIVE,
    }
    return mapped.get(verdict, Verdict.NO_CHANGE)


def checked_for_power(verdict: Verdict, detects: float | None, threshold: float) -> Verdict:
    """A statistical verdict, honest about its power: "inconclusive" instead of any verdict
    that says nothing got worse (no change, improvement, faster within tolerance) when the
    comparison could not have seen a slowdown of ``threshold`` — its minimum detectable
    effect (``detectable``) is above it, or there is no interval at all. A significant
    slowdown is kept (regression, slower within tolerance): it was seen, whatever the
    noise."""
    if verdict in (Verdict.REGRESSION, Verdict.SLOWER_TOLERATED):
        return verdict
    if detects is None or detects > threshold:
        return Verdict.INCONCLUSIVE
    return verdict


def unpaired(measured: Measurement) -> bool:
    """Whether a metric's samples came from one process (a plain run, not merged rounds)."""
    return len(measured.rounds or [1]) < 2


def exact_verdict(name: str, base: float, head: float) -> Verdict:
    """Any change beyond the metric's resolution (and its slack, relative to base) the wrong way
    is a regression: up, or for a metric where higher is better (a cache's hit ratio) down."""
    facts = metric(name)
    worse = (base - head) if facts.higher_is_better else (head - base)
    allowed = max(facts.resolution, facts.slack * abs(base))
    if worse > allowed:
        return Verdict.REGRESSION
    if worse < -allowed:
        return Verdict.IMPROVEMENT
    return Verdict.NO_CHANGE


def compare_metric(
    case: Case,
    name: str,
    base: Measurement,
    head: Measurement,
    threshold: float,
    strict: bool = False,
    side_by_side: bool = False,
) -> MetricComparison:
    """One row: medians, ratio head/base with its interval, verdict (``unpaired_verdict``
    unless base and head were measured ``side_by_side`` in several rounds, or ``strict``),
    the smallest slowdown it could have caught. A count (``Metric.tolerance``) is one number
    a side: its ratio is compared with the threshold directly."""
    b, h = base.median, head.median
    facts = metric(name)
    exact, mde, rounds, band = facts.exact or facts.counted, None, None, None
    if facts.exact:
        ratio = low = high = h / b if b else None
        verdict = exact_verdict(name, b, h)
    elif facts.counted:
        ratio = low = high = h / b if b else None
        band = layout_band(base, head)
        threshold = max(threshold, band or 0.0)  # a change within the layouts' own spread is no change
        verdict = statistical_verdict(ratio, ratio, ratio, threshold, facts.higher_is_better)
        mde = threshold
    else:
        ratio, low, high = ratio_estimate(base, head, side_by_side=side_by_side)
        verdict = statistical_verdict(ratio, low, high, threshold, facts.higher_is_better)
        mde = detectable(ratio, low, high, facts.higher_is_better)
        if ratio is not None:  # a zero base has no ratio to be powered or not
            verdict = checked_for_power(verdict, mde, threshold)
        if not side_by_side or unpaired(base) or unpaired(head):
            verdict = verdict if strict else unpaired_verdict(verdict)
        elif len(base.rounds) == len(head.rounds):
            rounds = len(base.rounds)
    unit = head.unit or base.unit
    return MetricComparison(
        case, name, unit, b, h, ratio, low, high, verdict, exact, mde, threshold, rounds, band
    )


def layout_band(base: Measurement, head: Measurement) -> float | None:
    """A count's band: the larger of the two sides' spreads (largest / smallest - 1, 0.01 = 1 %)
    between the interpreter layouts each was counted under (``serbench.gate.counting.LAYOUTS``,
    one value per layout); None where a side has a single count."""
    spreads = [
        max(m.values) / min(m.values) - 1 for m in (base, head) if len(m.values) > 1 and min(m.values) > 0
    ]
    return max(spreads) if spreads else None


def _case_row(case: Case, verdict: Verdict) -> MetricComparison:
    return MetricComparison(case, CASE_METRIC, "", None, None, None, None, None, verdict, False)


def compare(
    base: Results,
    head: Results,
    max_regression: float = 0.10,
    overrides: dict[str, float] | None = None,
    strict: bool = False,
    side_by_side: bool = False,
) -> Comparison:
    """Compare two loaded results documents (see ``results.load``), case by case (``Case``).

    ``max_regression`` is the tolerated slowdown (0.10 = 10 %) of a sampled
    metric; a count's is its ``Metric.tolerance``; ``overrides`` maps a metric
    name to its own threshold. Sampled metrics get indicative verdicts, which do
    not fail, unless base and head were measured ``side_by_side`` in rounds
    (the gate: round ``i`` of each side paired) or ``strict``: two separate
    runs, even of several rounds each, do not say how much a third would
    differ. Exact metrics, counts and failures are judged the same either way.
    """
    overrides = overrides or {}
    base_cases, head_cases = base.by_case(), head.by_case()
    rows: list[MetricComparison] = []
    head_errors: dict[Case, str] = {}
    not_measured: dict[Case, str] = {}
    for case in base_cases.keys() & head_cases.keys():
        b, h = base_cases[case], head_cases[case]
        if h.unsupported is not None and b.unsupported is not None:  # neither side could: no failure
            not_measured[case] = h.unsupported
            continue
        if h.error is not None:
            head_errors[case] = h.error
            if b.ok:
                rows.append(_case_row(case, Verdict.FAILED_IN_HEAD))
            continue
        if not b.ok:
            rows.append(_case_row(case, Verdict.FIXED_IN_HEAD))
            continue
        for name in filter(compared, b.metrics.keys() & h.metrics.keys()):
            tolerance = metric(name).tolerance
            threshold = overrides.get(name, max_regression if tolerance is None else tolerance)
            rows.append(
                compare_metric(case, name, b.metrics[name], h.metrics[name], threshold, strict, side_by_side)
            )
    rows = counts_decide(rows)
    return Comparison(
        rows=worst_first(sorted(rows, key=lambda r: (case_order(r.case), r.metric))),
        added=sorted(head_cases.keys() - base_cases.keys(), key=case_order),
        removed=sorted(base_cases.keys() - head_cases.keys(), key=case_order),
        environment_differences=environment_differences(base, head),
        head_errors=head_errors,
        not_measured=not_measured,
    )


def counts_decide(rows: Sequence[MetricComparison]) -> list[MetricComparison]:
    """``rows`` with every inconclusive wall-clock row whose CPU work its case's counts cover
    (``Metric.counted_as``, each compared in ``rows``) relabelled "counts decide": the count
    rows decide that work, and the clock is left what counts cannot see, where it can tell."""
    counted = {(r.case, r.metric) for r in rows if metric(r.metric).counted}
    return [
        replace(r, verdict=Verdict.COUNTS_DECIDE)
        if r.verdict == Verdict.INCONCLUSIVE
        and metric(r.metric).counted_as
        and all((r.case, name) in counted for name in metric(r.metric).counted_as)
        else r
        for r in rows
    ]


def rounds_to_decide(row: MetricComparison) -> int | None:
    """About how many paired rounds would bring this row's ``detectable`` down to its
    threshold at the noise it showed (the interval narrows as one over the root of the
    rounds); None for a row without pairs or without an interval."""
    if not row.rounds or row.detectable is None or not row.threshold:
        return None
    scale = math.log1p(row.detectable) / math.log1p(row.threshold)
    return max(row.rounds + 1, math.ceil(row.rounds * scale * scale))


def what_would_decide(comparison: Comparison) -> list[str]:
    """What would turn the inconclusive rows into verdicts, most effective first: counts for
    CPU work the clock could not see, more rounds (how many, at this noise), paired rounds
    for plain runs, a quieter machine or CPUs of its own. [] when every row decided."""
    rows = comparison.inconclusive
    if not rows:
        return []
    ways = []
    counts_compared = any(metric(r.metric).counted for r in comparison.rows)
    if any(metric(r.metric).counted_as for r in rows) and not counts_compared:
        ways.append("instruction counts for their CPU work (--measure instructions; needs valgrind)")
    needed = [n for n in map(rounds_to_decide, rows) if n is not None]
    if needed:
        most, had = max(needed), max(r.rounds or 0 for r in rows)
        impractical = "; impractical: the noise is the problem" if most > 10 * had else ""
        ways.append(f"≈ {most} rounds at this noise (--rounds {most}{impractical})")
    if any(r.rounds is None for r in rows):
        ways.append("paired rounds of both sides (serbench gate) instead of single runs")
    ways.append("a quieter machine, or CPUs of its own (isolcpus=: the gate pins its measurers there)")
    return ways
