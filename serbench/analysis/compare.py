"""Comparing two results files: did head get worse than base?

For every case (``results.Case``: scenario, backend, workload and the
dimensions beyond them, such as the transport) and metric present in both
files, the ratio head/base of the medians with a confidence interval
bootstrapped from the raw samples (numpy, percentile method, a fixed seed so
the same files always give the same verdict), and a verdict:

* **regression** — the slowdown is statistically significant (the whole
  interval is on the worse side of 1) *and* not shown to be within
  tolerance (the interval reaches ``1 + threshold``). The threshold is thus
  the smallest slowdown the gate must not let through: a true slowdown of
  exactly the threshold is caught whenever it is significant, while a
  significant slowdown that is demonstrably smaller passes as "no change".
* **improvement** — the mirror image;
* **no change** — anything else;
* **inconclusive** — where the comparison could not have seen a slowdown of
  the threshold: a sampled row whose minimum detectable effect (``detectable``)
  exceeds its threshold, or that has no interval, and that is not a significant
  slowdown. Such a row is never "no change" or "improvement": it says the
  machine (or the number of rounds) did not let the gate tell. A significant
  slowdown stays a regression (or "slower, within tolerance") however wide its
  interval: it was seen. Exact metrics and counts are always decisive (a
  count's ``detectable`` is its tolerance). Where a case's instructions were
  counted, an inconclusive wall-clock row of CPU work the counts cover
  (``Metric.counted_as``) reads "counts decide" instead: the count row beside it
  decides, and the clock decides only what counts cannot see, where it can.

"Slowdown" is head/base for timings and base/head for rates, so both read
the same way. Machine-independent metrics are compared exactly: any increase
beyond their resolution is a regression. (Which metric is which is
``serbench.model.metrics``' to say.) A case that failed in head but not in base is a regression
of its own (verdict "failed in head"); the reverse is "fixed in head". Cases
present on one side only are listed as added or removed. Yardsticks
(measurements of the machine rather than the code) are not compared.

Statistics and verdicts only: the tables are ``serbench.present.text``'s, the page
``serbench.present.html``'s, the command ``serbench.cli.compare``'s.

When the samples of a metric came from several processes (the gate merges
rounds; the merged ``Measurement`` carries ``rounds``: the sample count of each),
the bootstrap resamples whole rounds first and samples within them second,
so that a difference between processes (allocator history, CPU placement)
widens the interval instead of passing for a regression. With as many
rounds on each side — the gate measures each case on base and on head one
right after the other — round ``i`` of base and of head form a pair: the
ratio is the median of the per-pair ratios and pairs are resampled whole,
so that a slow spell of the machine, which hits both halves of a pair,
cancels, and one that hits only one half is outvoted by the other pairs.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from statistics import NormalDist

import numpy as np

from serbench.analysis.resample import Rounds, pooled_centers, round_medians
from serbench.model.metrics import COPY_TIE, LOWER_QUARTILE, MEDIAN, TRIMMED_MEAN, compared, metric
from serbench.model.results import COMPARABLE, Case, Results
from serbench.model.specs import SpecError, parse_spec
from serbench.model.stats import CONFIDENCE, MIN_DISTRIBUTION, Measurement, relative_spread

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
BAD_VERDICTS = (FAILED_IN_HEAD, REGRESSION)

# The metric name of a row that stands for a whole case (failed/fixed in head).
CASE_METRIC = "error"

BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 20261129
# What a run's rows are compared by (``metrics.Metric.center``, docs/measurements):
# * TTFT and ingress by their mean with TRIM cut from each end. The requests of an ipc payload
#   case on a shared VM fall in two modes (at images-4: 29-31 ms and 35-44 ms within one visit),
#   and the median of 30 of them jumps between the modes as their mix varies: between two
#   back-to-back default runs 37 of 60 between-backend TTFT and ingress ratios agreed within 10 %
#   by medians, 58 by 10 %-trimmed means (237 against 289 of 300 over five pairs of runs). The
#   trim keeps a stalled request (3x its visit's others) from moving the mean.
# * micro's timings by their lower quartile. Each sample is already a mean over many calls, and
#   what moves them is a slow spell over a visit or two (1.3-1.8x), never a faster one: the
#   spells widened an interval of medians to hold 1 ([0.91, 1.19] about a ratio of 1.09) and
#   changed 3 of the 6 micro decisions of two pairs of back-to-back runs, lower quartiles none
#   (nor between any two of the four runs).
TRIM = 0.1
LOWER = 0.25
# A statistic over the last axis of an array of samples, NaN a missing sample (``medians``,
# ``trimmed_means``, ``lower_quartiles``): what a run's rows are compared by (``center_of``).
Center = Callable[[np.ndarray], np.ndarray]
# The power at which ``detectable`` states the smallest slowdown a comparison would catch.
POWER = 0.8


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
    verdict: str  # one of the verdict strings above (REGRESSION, ..., INCONCLUSIVE, COUNTS_DECIDE)
    exact: bool  # machine-independent metric compared exactly
    detectable: float | None = None  # smallest slowdown told from noise (0.02 = 2 %); a count: its tolerance
    threshold: float | None = None  # the tolerated slowdown this row was judged against
    rounds: int | None = None  # paired rounds (the gate's pairs) behind the interval; None: unpaired

    @property
    def decisive(self) -> bool:
        """Whether this row decided something (not "inconclusive")."""
        return self.verdict != INCONCLUSIVE

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
        if self.verdict == FAILED_IN_HEAD:
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
        return [r for r in self.rows if r.verdict != NO_CHANGE]

    @property
    def indicative(self) -> list[MetricComparison]:
        """Rows flagged beyond tolerance by unpaired runs: shown, not failing (see ``compare``)."""
        return [r for r in self.rows if r.verdict in (SLOWER_INDICATIVE, FASTER_INDICATIVE)]

    @property
    def inconclusive(self) -> list[MetricComparison]:
        """Rows that could not have seen a slowdown of their threshold (``powered``), widest
        ``detectable`` first."""
        rows = [r for r in self.rows if r.verdict == INCONCLUSIVE]
        return sorted(rows, key=lambda r: -(math.inf if r.detectable is None else r.detectable))

    @property
    def improvements(self) -> list[MetricComparison]:
        return [r for r in worst_first(self.rows) if r.verdict in (IMPROVEMENT, FIXED_IN_HEAD)][::-1]


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


def row_of(case: Case) -> Case:
    """The part of a case that makes a table's row: the case less its scenario (the table's)
    and workload (the column), so every other dimension (transport, workers, ...) tells rows
    apart. Labelled by ``Results.row_label`` and ``Results.safety_mark`` like any case."""
    fields = {name: getattr(case, name) for name in Case.__struct_fields__}
    return Case(**{**fields, "scenario": "", "workload": ""})


def _groups(measured: Measurement) -> list[np.ndarray]:
    """A metric's samples split by the round (process) that produced them; a round of none (a
    file written by hand) is no round."""
    values = np.asarray(measured.values, dtype=float)
    sizes = measured.rounds or [len(values)]
    if sum(sizes) != len(values):
        sizes = [len(values)]
    return [group for group in np.split(values, np.cumsum(sizes)[:-1]) if len(group)]


def _ordered(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row sorted over its last axis (NaN, a missing sample, last) and its count of samples.
    What ``_quantiles`` and ``trimmed_means`` index into, all rows at once: numpy's
    ``nanquantile`` takes a row at a time where there are NaNs, 50x slower on a bootstrap's
    2000 rows."""
    ordered = np.sort(rows, axis=-1)
    return ordered, np.sum(~np.isnan(ordered), axis=-1)


def trimmed_means(rows: np.ndarray) -> np.ndarray:
    """Each row's mean over its last axis with ``TRIM`` of its values (NaN: none) cut from each
    end, as ``scipy.stats.trim_mean`` cuts them: ``int(TRIM * n)`` a side."""
    ordered, n = _ordered(rows)
    cut = (TRIM * n).astype(int)
    sums = np.concatenate([np.zeros((*ordered.shape[:-1], 1)), np.nancumsum(ordered, axis=-1)], axis=-1)
    upper = np.take_along_axis(sums, (n - cut)[..., None], axis=-1)[..., 0]
    lower = np.take_along_axis(sums, cut[..., None], axis=-1)[..., 0]
    with np.errstate(divide="ignore", invalid="ignore"):
        return (upper - lower) / (n - 2 * cut)


def _quantiles(rows: np.ndarray, q: float) -> np.ndarray:
    """Each row's ``q`` quantile over its last axis (NaN: none), interpolated between the two
    nearest samples as ``numpy.quantile`` does by default."""
    ordered, n = _ordered(rows)
    position = q * (n - 1)
    below = np.floor(position).astype(int)
    above = np.minimum(below + 1, n - 1)
    low = np.take_along_axis(ordered, below[..., None], axis=-1)[..., 0]
    high = np.take_along_axis(ordered, above[..., None], axis=-1)[..., 0]
    return low + (position - below) * (high - low)


def medians(rows: np.ndarray) -> np.ndarray:
    """Each row's median over its last axis, NaN a missing value."""
    return _quantiles(rows, 0.5)


def lower_quartiles(rows: np.ndarray) -> np.ndarray:
    """Each row's ``LOWER`` quantile over its last axis, NaN a missing value."""
    return _quantiles(rows, LOWER)


CENTERS: dict[str, Center] = {MEDIAN: medians, TRIMMED_MEAN: trimmed_means, LOWER_QUARTILE: lower_quartiles}


def center_of(name: str) -> Center:
    """What a run's rows are compared by in metric ``name`` (``metrics.Metric.center``)."""
    return CENTERS[metric(name).center]


def location(name: str, measured: Measurement) -> float:
    """The one value a row stands at in metric ``name`` when a run's rows are compared: the
    metric's center (``center_of``) of all its samples."""
    if not measured.values:
        return measured.median
    return float(center_of(name)(np.asarray(measured.values, dtype=float)))


def _ratio(head: np.ndarray, base: np.ndarray, paired: bool) -> np.ndarray:
    """The ratio statistic over the last axis (rounds) of per-round medians.

    Paired (rounds measured side by side): the median of the per-round
    ratios, so that drift between rounds cancels. Otherwise: the median
    round of head over the median round of base.
    """
    with np.errstate(divide="ignore", invalid="ignore"):
        if paired:
            return medians(head / base)
        return medians(head) / medians(base)


def ratio_estimate(
    base: Measurement,
    head: Measurement,
    confidence: float = CONFIDENCE,
    seed: int = BOOTSTRAP_SEED,
    side_by_side: bool = True,
    pooled: bool = False,
    center: Center = medians,
) -> tuple[float | None, float | None, float | None]:
    """Ratio head/base and its percentile-bootstrap interval, from the raw samples.

    One round per side: the ratio of medians, samples resampled. Several:
    rounds are resampled first and samples within them second; when both
    sides have the same number of rounds (the gate's interleaved A B / B A
    pairs) round ``i`` of base and of head are drawn together and the
    statistic is the median of per-round ratios — unless ``side_by_side`` is
    false: rounds of two separate runs were not measured together, so their
    order pairs nothing. ``pooled``: the statistic is the ratio of the
    ``center`` (``medians``, or the metric's own: ``center_of``) of all a
    side's samples instead (rounds still drawn together where they pair) — for
    a run's interleaved visits of a few requests each, where one visit's
    median is too noisy to stand for it (docs/architecture.md, "Measuring
    rules"); where both sides' samples were taken in turn in the same rounds
    (``Measurement.in_turn``), the median of the ratios of head's sample i to
    base's sample i instead, rounds and samples drawn together. The ratio is
    None for a zero base;
    the interval is (None, None) with fewer than two samples a side — no
    interval, no significance.
    """
    if pooled and side_by_side and _taken_in_turn(base, head):
        return _in_turn_estimate(_groups(base), _groups(head), confidence, seed)
    base_groups, head_groups = _groups(base), _groups(head)
    paired = side_by_side and len(base_groups) == len(head_groups)
    pooled = pooled and max(len(base_groups), len(head_groups)) > 1  # one round: the same statistic
    if pooled:
        ratio = float(center(np.concatenate(head_groups)) / center(np.concatenate(base_groups)))
    else:
        head_rounds, base_rounds = Rounds(head_groups), Rounds(base_groups)
        ratio = float(_ratio(head_rounds.medians()[None], base_rounds.medians()[None], paired)[0])
    if not math.isfinite(ratio):
        return None, None, None
    if min(sum(map(len, base_groups)), sum(map(len, head_groups))) < 2:
        return ratio, None, None
    rng = np.random.default_rng(seed)
    head_picks = rng.integers(len(head_groups), size=(BOOTSTRAP_RESAMPLES, len(head_groups)))
    base_picks = (
        head_picks if paired else rng.integers(len(base_groups), size=(BOOTSTRAP_RESAMPLES, len(base_groups)))
    )
    if pooled:
        heads = pooled_centers(Rounds(head_groups), head_picks, rng, center)
        bases = pooled_centers(Rounds(base_groups), base_picks, rng, center)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratios = heads / bases
    else:
        ratios = _ratio(
            round_medians(head_rounds, head_picks, rng), round_medians(base_rounds, base_picks, rng), paired
        )
    alpha = (1 - confidence) / 2
    low, high = np.nanquantile(ratios, [alpha, 1 - alpha])
    return ratio, float(low), float(high)


def _taken_in_turn(base: Measurement, head: Measurement) -> bool:
    """Both sides' samples taken in turn, in the same rounds, as many a round."""
    return base.in_turn and head.in_turn and base.rounds == head.rounds and base.n == head.n


def _in_turn_estimate(
    base_groups: list[np.ndarray], head_groups: list[np.ndarray], confidence: float, seed: int
) -> tuple[float | None, float | None, float | None]:
    """``ratio_estimate`` of samples taken in turn: the median of the per-sample ratios, its
    interval from resampling rounds and the ratios within them. A slow spell of the machine
    lasts milliseconds, about a sample: it slows both samples of a ratio or neither, where it
    would move one side's center and not the other's (docs/measurements)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = [head / base for base, head in zip(base_groups, head_groups, strict=True)]
    ratio = float(np.median(np.concatenate(ratios)))
    if not math.isfinite(ratio):
        return None, None, None
    if sum(map(len, ratios)) < 2:
        return ratio, None, None
    rng = np.random.default_rng(seed)
    picks = rng.integers(len(ratios), size=(BOOTSTRAP_RESAMPLES, len(ratios)))
    drawn = pooled_centers(Rounds(ratios), picks, rng, medians)
    alpha = (1 - confidence) / 2
    low, high = np.nanquantile(drawn, [alpha, 1 - alpha])
    return ratio, float(low), float(high)


def statistical_verdict(
    ratio: float | None, low: float | None, high: float | None, threshold: float, higher_is_better: bool
) -> str:
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
        return NO_CHANGE
    slowdown, low, high = ratio, low, high
    if higher_is_better:  # express as a slowdown: >1 is worse
        slowdown, low, high = 1 / ratio, (1 / high if high else math.inf), (1 / low if low else math.inf)
    limit = 1 + threshold
    if low > 1:
        return REGRESSION if slowdown >= 1 + threshold / 2 and high >= limit else SLOWER_TOLERATED
    if high < 1:
        return IMPROVEMENT if slowdown <= 1 / (1 + threshold / 2) and low <= 1 / limit else FASTER_TOLERATED
    return NO_CHANGE


def unpaired_verdict(verdict: str) -> str:
    """A statistical verdict of two single-process runs: indicative at most.

    Each side's interval comes from one process, so it says nothing of how
    much a second run of the same code would differ (allocator history, CPU
    placement, the machine's slow spells): two plain runs of one commit
    differ "significantly" in a few cases out of every hundred. Beyond
    tolerance is thus only indicative; within it is no change.
    """
    mapped = {REGRESSION: SLOWER_INDICATIVE, IMPROVEMENT: FASTER_INDICATIVE, INCONCLUSIVE: INCONCLUSIVE}
    return mapped.get(verdict, NO_CHANGE)


def powered(verdict: str, detects: float | None, threshold: float) -> str:
    """A statistical verdict, honest about its power: "inconclusive" instead of any verdict
    that says nothing got worse (no change, improvement, faster within tolerance) when the
    comparison could not have seen a slowdown of ``threshold`` — its minimum detectable
    effect (``detectable``) is above it, or there is no interval at all. A significant
    slowdown is kept (regression, slower within tolerance): it was seen, whatever the
    noise."""
    if verdict in (REGRESSION, SLOWER_TOLERATED):
        return verdict
    if detects is None or detects > threshold:
        return INCONCLUSIVE
    return verdict


def unpaired(measured: Measurement) -> bool:
    """Whether a metric's samples came from one process (a plain run, not merged rounds)."""
    return len(measured.rounds or [1]) < 2


def detectable(
    ratio: float | None, low: float | None, high: float | None, higher_is_better: bool
) -> float | None:
    """The smallest slowdown (0.02 = 2 %) that a comparison as noisy as this one tells from no
    change with probability ``POWER``: its minimum detectable effect. None without an interval.

    The interval's wider half (in log ratio) stands for ``z`` standard errors;
    a true slowdown is significant with probability ``POWER`` when it is
    ``z + z_power`` of them above 1 (the usual 2.8 standard errors at 95 % and
    80 %). The wider half, not the one on the slowdown's side: with few rounds
    the bootstrap's interval is lopsided (three pairs, one slow: ``[1.00,
    1.30]`` around 1.00), and its narrow side would claim a power the run did
    not have. What the machine lets the gate see, before the threshold's say:
    a slowdown below it cannot be told from noise in this run, whatever
    ``--max-regression`` is. (``higher_is_better`` does not change the width; it
    is kept for the callers that state it.)
    """
    if ratio is None or low is None or high is None or min(ratio, low, high) <= 0:
        return None
    half = max(math.log(ratio / low), math.log(high / ratio), 0.0)
    z = NormalDist().inv_cdf((1 + CONFIDENCE) / 2)
    return math.exp(half * (z + NormalDist().inv_cdf(POWER)) / z) - 1


def exact_verdict(name: str, base: float, head: float) -> str:
    """Any change beyond the metric's resolution (and its slack, relative to base) the wrong way
    is a regression: up, or for a metric where higher is better (a cache's hit ratio) down."""
    facts = metric(name)
    worse = (base - head) if facts.higher_is_better else (head - base)
    allowed = max(facts.resolution, facts.slack * abs(base))
    if worse > allowed:
        return REGRESSION
    if worse < -allowed:
        return IMPROVEMENT
    return NO_CHANGE


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
    exact, mde, rounds = facts.exact or facts.counted, None, None
    if facts.exact:
        ratio = low = high = h / b if b else None
        verdict = exact_verdict(name, b, h)
    elif facts.counted:
        ratio = low = high = h / b if b else None
        verdict = statistical_verdict(ratio, ratio, ratio, threshold, facts.higher_is_better)
        mde = threshold
    else:
        ratio, low, high = ratio_estimate(base, head, side_by_side=side_by_side)
        verdict = statistical_verdict(ratio, low, high, threshold, facts.higher_is_better)
        mde = detectable(ratio, low, high, facts.higher_is_better)
        if ratio is not None:  # a zero base has no ratio to be powered or not
            verdict = powered(verdict, mde, threshold)
        if not side_by_side or unpaired(base) or unpaired(head):
            verdict = verdict if strict else unpaired_verdict(verdict)
        elif len(base.rounds) == len(head.rounds):
            rounds = len(base.rounds)
    unit = head.unit or base.unit
    return MetricComparison(case, name, unit, b, h, ratio, low, high, verdict, exact, mde, threshold, rounds)


def _case_row(case: Case, verdict: str) -> MetricComparison:
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
                rows.append(_case_row(case, FAILED_IN_HEAD))
            continue
        if not b.ok:
            rows.append(_case_row(case, FIXED_IN_HEAD))
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
        replace(r, verdict=COUNTS_DECIDE)
        if r.verdict == INCONCLUSIVE
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
    ways.append("a quieter machine, or CPUs of its own (isolcpus=: the gate pins its workers there)")
    return ways


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


def noise(data: Results) -> float | None:
    """The typical (median) relative CI half-width over every metric ``spreads`` counts."""
    values = [v for per_scenario in spreads(data).values() for v in per_scenario.values()]
    return statistics.median(values) if values else None


# ---------------------------------------------------------------- ratios across workloads, and ties

# Two values without an interval (one reading a side: memory's quick profile) of a metric
# that declares no tolerance of its own are not told apart within this: the resolution
# memory's copies are compared at (a hundredth of the payload).
NO_INTERVAL_TOLERANCE = 0.01


@dataclass(frozen=True)
class Estimate:
    """A ratio head/base over ``n`` workloads — the geometric mean of one ratio per workload —
    and its 95 % interval (None without one)."""

    ratio: float
    low: float | None
    high: float | None
    n: int

    def tied(self, tolerance: float, margin: float) -> bool:
        """Not told apart from 1 by a difference that matters: some of the interval lies within
        ``margin`` of 1 (it holds 1, or a ratio that close); without an interval, the ratio is
        within ``tolerance``.

        One edge, where the interval meets the margin: a rule of two (the interval holds 1, or
        the point ratio is within the margin) flips when a noisy run's point crosses the margin
        while its interval still reaches into it, and two runs back to back then decide apart.
        """
        if self.low is None or self.high is None:
            return abs(math.log(self.ratio)) <= math.log1p(tolerance)
        return self.low <= 1 + margin and self.high * (1 + margin) >= 1


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


def geometric_ratio(
    pairs: Sequence[tuple[Measurement, Measurement]], center: Center = medians
) -> Estimate | None:
    """The geometric mean of head/base over ``pairs`` (base, head), one pair per workload, with
    an interval; None when no pair has a ratio (a zero base).

    Each workload's ratio and interval are ``ratio_estimate``'s (rounds paired where both
    sides have the same rounds, unpaired otherwise). The workloads were measured apart, so
    their log intervals add in quadrature: each side of the mean's interval is the root sum
    of squares of that side's log half-widths over the number of workloads. No interval when
    any workload has none.
    """
    estimates = [ratio_estimate(base, head, pooled=True, center=center) for base, head in pairs]
    found = [(r, low, high) for r, low, high in estimates if r is not None and r > 0]
    if not found:
        return None
    n = len(found)
    center = statistics.fmean(math.log(r) for r, _, _ in found)
    if any(low is None or high is None or low <= 0 for _, low, high in found):
        return Estimate(math.exp(center), None, None, n)
    below = math.sqrt(sum(math.log(r / low) ** 2 for r, low, _ in found)) / n
    above = math.sqrt(sum(math.log(high / r) ** 2 for r, _, high in found)) / n
    return Estimate(math.exp(center), math.exp(center - below), math.exp(center + above), n)


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


def better(name: str, estimate: Estimate, margin: float | None = None) -> bool:
    """Whether head is better than base by ``estimate`` (head/base) and told apart from it
    (``tied`` with ``margin``)."""
    if tied(name, estimate, margin):
        return False
    return estimate.ratio > 1 if metric(name).higher_is_better else estimate.ratio < 1


# ---------------------------------------------------------------- a ranking within one run

DEFAULT_BASELINE = "pickle"


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
