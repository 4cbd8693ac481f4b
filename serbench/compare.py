"""Comparing two results files: did head get worse than base?

For every case (scenario, backend, workload) and metric present in both
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
* **no change** — anything else.

"Slowdown" is head/base for timings and base/head for higher-is-better
metrics (``req_per_s``, ``payload_gb_per_s``), so both read the same way.
Machine-independent metrics (``wire_bytes``, ``frames``, ``copies``) are
compared exactly: any increase is a regression. A case that failed in head
but not in base is a regression of its own (verdict "failed in head"); the
reverse is "fixed in head". Cases present on one side only are listed as
added or removed.

When the samples of a metric came from several processes (the gate merges
rounds; the merged metric carries ``"rounds"``: the sample count of each),
the bootstrap resamples whole rounds first and samples within them second,
so that a difference between processes (allocator history, CPU placement)
widens the interval instead of passing for a regression.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from serbench import environment, results
from serbench.stats import CONFIDENCE

REGRESSION = "regression"
IMPROVEMENT = "improvement"
NO_CHANGE = "no change"
FAILED_IN_HEAD = "failed in head"
FIXED_IN_HEAD = "fixed in head"
BAD_VERDICTS = (FAILED_IN_HEAD, REGRESSION)

HIGHER_IS_BETTER = frozenset({"req_per_s", "payload_gb_per_s"})
# Metric → the smallest difference that counts (an exact comparison of
# machine-independent numbers; ``copies`` is a ratio of page-granular RSS
# readings, so a hundredth of the payload is below its resolution).
EXACT_RESOLUTION = {"wire_bytes": 0.0, "frames": 0.0, "copies": 0.01}
# The metric name of a row that stands for a whole case (failed/fixed in head).
CASE_METRIC = "error"

BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 20261129


@dataclass(frozen=True)
class MetricComparison:
    """One metric of one case, base against head."""

    scenario: str
    backend: str
    workload: str
    metric: str
    unit: str
    base_median: float | None
    head_median: float | None
    ratio: float | None  # head / base
    ci_low: float | None  # interval of the ratio
    ci_high: float | None
    verdict: str  # "regression" | "improvement" | "no change" | "failed in head" | "fixed in head"
    exact: bool  # machine-independent metric compared exactly

    @property
    def case(self) -> tuple[str, str, str]:
        return self.scenario, self.backend, self.workload

    @property
    def slowdown(self) -> float:
        """How many times worse head is (>1 worse, <1 better); inf for a failure in head."""
        if self.verdict == FAILED_IN_HEAD:
            return math.inf
        if self.ratio is None or self.ratio == 0:
            return 1.0
        return 1 / self.ratio if self.metric in HIGHER_IS_BETTER else self.ratio


@dataclass
class Comparison:
    """Every metric row, the cases on one side only, and what differs in the environments."""

    rows: list[MetricComparison]
    added: list[tuple[str, str, str]]
    removed: list[tuple[str, str, str]]
    environment_differences: dict[str, tuple]
    head_errors: dict[tuple[str, str, str], str] = field(default_factory=dict)

    @property
    def regressions(self) -> list[MetricComparison]:
        """Rows that fail the gate, worst first."""
        return [r for r in worst_first(self.rows) if r.verdict in BAD_VERDICTS]

    @property
    def improvements(self) -> list[MetricComparison]:
        return [r for r in worst_first(self.rows) if r.verdict in (IMPROVEMENT, FIXED_IN_HEAD)][::-1]


def worst_first(rows: Sequence[MetricComparison]) -> list[MetricComparison]:
    """Failures in head, then by slowdown, largest first."""
    return sorted(rows, key=lambda r: -r.slowdown)


def parse_threshold(text: str) -> float:
    """``"10%"`` or ``"0.1"`` → 0.1; ValueError for anything else or a negative value."""
    text = text.strip()
    value = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"threshold {text!r} must be a non-negative number or percentage")
    return value


def environment_differences(base: dict, head: dict) -> dict[str, tuple]:
    """The ``environment.COMPARABLE_KEYS`` whose values differ: key → (base, head)."""
    diffs = {}
    for key in environment.COMPARABLE_KEYS:
        b, h = base["environment"].get(key), head["environment"].get(key)
        if b != h:
            diffs[key] = (b, h)
    return diffs


def _groups(metric: dict) -> list[np.ndarray]:
    """The metric's samples split by the round (process) that produced them."""
    values = np.asarray(metric["values"], dtype=float)
    sizes = metric.get("rounds") or [len(values)]
    if sum(sizes) != len(values):
        sizes = [len(values)]
    return np.split(values, np.cumsum(sizes)[:-1])


def _bootstrap_medians(groups: list[np.ndarray], rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` bootstrap medians: rounds drawn with replacement, then samples within each.

    With one round this is the ordinary bootstrap. Rounds of unequal size are
    drawn at the largest size and the surplus masked, so each drawn round
    contributes exactly its own number of samples.
    """
    sizes = np.array([len(g) for g in groups])
    flat = np.concatenate(groups)
    picks = rng.integers(len(groups), size=(n, len(groups)))
    picked_sizes = sizes[picks][..., None]
    width = int(sizes.max())
    within = (rng.random((n, len(groups), width)) * picked_sizes).astype(int)
    drawn = flat[(np.cumsum(sizes) - sizes)[picks][..., None] + within]
    drawn[np.arange(width) >= picked_sizes] = np.nan
    return np.nanmedian(drawn.reshape(n, -1), axis=1)


def ratio_interval(
    base: dict, head: dict, confidence: float = CONFIDENCE, seed: int = BOOTSTRAP_SEED
) -> tuple[float | None, float | None]:
    """Percentile-bootstrap interval of median(head)/median(base) from the raw samples.

    (None, None) when a side has fewer than two samples or a median of zero:
    no interval, no significance.
    """
    base_groups, head_groups = _groups(base), _groups(head)
    if min(sum(map(len, base_groups)), sum(map(len, head_groups))) < 2:
        return None, None
    rng = np.random.default_rng(seed)
    head_medians = _bootstrap_medians(head_groups, rng, BOOTSTRAP_RESAMPLES)
    base_medians = _bootstrap_medians(base_groups, rng, BOOTSTRAP_RESAMPLES)
    if not np.all(base_medians):
        return None, None
    alpha = (1 - confidence) / 2
    low, high = np.quantile(head_medians / base_medians, [alpha, 1 - alpha])
    return float(low), float(high)


def statistical_verdict(
    ratio: float, low: float | None, high: float | None, threshold: float, higher_is_better: bool
) -> str:
    """Regression/improvement when significant and not shown within ±threshold."""
    if low is None or high is None:
        return NO_CHANGE
    if higher_is_better:  # express as a slowdown interval: >1 is worse
        low, high = (1 / high if high else math.inf), (1 / low if low else math.inf)
    limit = 1 + threshold
    if low > 1 and high >= limit:
        return REGRESSION
    if high < 1 and low <= 1 / limit:
        return IMPROVEMENT
    return NO_CHANGE


def exact_verdict(metric: str, base: float, head: float) -> str:
    """Any increase beyond the metric's resolution is a regression (lower is better)."""
    resolution = EXACT_RESOLUTION[metric]
    if head > base + resolution:
        return REGRESSION
    if head < base - resolution:
        return IMPROVEMENT
    return NO_CHANGE


def compare_metric(
    case: tuple[str, str, str], name: str, base: dict, head: dict, threshold: float
) -> MetricComparison:
    """One row: medians, ratio head/base with its interval, verdict."""
    b, h = base["median"], head["median"]
    ratio = h / b if b else None
    exact = name in EXACT_RESOLUTION
    if exact:
        low = high = ratio
        verdict = exact_verdict(name, b, h)
    elif ratio is None:
        low = high = None
        verdict = NO_CHANGE
    else:
        low, high = ratio_interval(base, head)
        verdict = statistical_verdict(ratio, low, high, threshold, name in HIGHER_IS_BETTER)
    return MetricComparison(*case, name, head.get("unit") or base.get("unit", ""), b, h, ratio, low, high,
                            verdict, exact)  # fmt: skip


def _case_row(case: tuple[str, str, str], verdict: str) -> MetricComparison:
    return MetricComparison(*case, CASE_METRIC, "", None, None, None, None, None, verdict, False)


def _by_case(data: dict) -> dict[tuple[str, str, str], dict]:
    return {results.case_key(rec): rec for rec in data["records"]}


def compare(
    base: dict, head: dict, max_regression: float = 0.10, overrides: dict[str, float] | None = None
) -> Comparison:
    """Compare two loaded results documents (see ``results.load``).

    ``max_regression`` is the tolerated slowdown (0.10 = 10 %);
    ``overrides`` maps a metric name to its own threshold.
    """
    overrides = overrides or {}
    base_cases, head_cases = _by_case(base), _by_case(head)
    rows: list[MetricComparison] = []
    head_errors = {}
    for case in base_cases.keys() & head_cases.keys():
        b, h = base_cases[case], head_cases[case]
        if h.get("error"):
            head_errors[case] = h["error"]
            if not b.get("error"):
                rows.append(_case_row(case, FAILED_IN_HEAD))
            continue
        if b.get("error"):
            rows.append(_case_row(case, FIXED_IN_HEAD))
            continue
        for name in b["metrics"].keys() & h["metrics"].keys():
            threshold = overrides.get(name, max_regression)
            rows.append(compare_metric(case, name, b["metrics"][name], h["metrics"][name], threshold))
    return Comparison(
        rows=worst_first(sorted(rows, key=lambda r: (*r.case, r.metric))),
        added=sorted(head_cases.keys() - base_cases.keys()),
        removed=sorted(base_cases.keys() - head_cases.keys()),
        environment_differences=environment_differences(base, head),
        head_errors=head_errors,
    )
