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

"Slowdown" is head/base for timings and base/head for rates (metrics named
``*_per_s``), so both read the same way. Machine-independent metrics
(``wire_bytes``, ``frames``, ``copies``) are compared exactly: any increase
is a regression. A case that failed in head but not in base is a regression
of its own (verdict "failed in head"); the reverse is "fixed in head". Cases
present on one side only are listed as added or removed. Measurements of
the machine rather than the code (``copy_s``, ``floor_rtt_s``,
``unix_gb_per_s``) are not compared.

When the samples of a metric came from several processes (the gate merges
rounds; the merged metric carries ``"rounds"``: the sample count of each),
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

import argparse
import math
import shlex
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from serbench import environment, results
from serbench.metrics import metric
from serbench.stats import CONFIDENCE, MIN_DISTRIBUTION, relative_spread
from serbench.units import format_value

REGRESSION = "regression"
IMPROVEMENT = "improvement"
NO_CHANGE = "no change"
FAILED_IN_HEAD = "failed in head"
FIXED_IN_HEAD = "fixed in head"
BAD_VERDICTS = (FAILED_IN_HEAD, REGRESSION)

# Metric → the smallest difference that counts (an exact comparison of
# machine-independent numbers; ``copies`` is a ratio of page-granular RSS
# readings, so a hundredth of the payload is below its resolution).
EXACT_RESOLUTION = {"wire_bytes": 0.0, "frames": 0.0, "copies": 0.01}
# Measurements of the machine, not of the code under test (micro's plain copy of
# the payload, ipc's empty-message round trip and its raw unix-socket transfer of
# the same bytes, timed beside each backend as yardsticks): shown in results,
# never compared, since a change in them is noise by definition.
REFERENCE_METRICS = frozenset({"copy_s", "floor_rtt_s", "unix_gb_per_s"})
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
        return 1 / self.ratio if higher_is_better(self.metric) else self.ratio


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


def higher_is_better(metric: str) -> bool:
    """Rates (``req_per_s``, ``payload_gb_per_s``, ``output_tokens_per_s``) rise when code gets faster."""
    return metric.endswith("_per_s")


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


def _round_medians(groups: list[np.ndarray], picks: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """For each drawn round index in ``picks``, the median of a resample of that round's samples.

    Rounds of unequal size are drawn at the largest size and the surplus
    masked, so each resample has exactly its round's number of samples.
    """
    sizes = np.array([len(g) for g in groups])
    flat = np.concatenate(groups)
    picked_sizes = sizes[picks][..., None]
    width = int(sizes.max())
    within = (rng.random((*picks.shape, width)) * picked_sizes).astype(int)
    drawn = flat[(np.cumsum(sizes) - sizes)[picks][..., None] + within]
    drawn[np.arange(width) >= picked_sizes] = np.nan
    return np.nanmedian(drawn, axis=-1)


def _ratio(head: np.ndarray, base: np.ndarray, paired: bool) -> np.ndarray:
    """The ratio statistic over the last axis (rounds) of per-round medians.

    Paired (rounds measured side by side): the median of the per-round
    ratios, so that drift between rounds cancels. Otherwise: the median
    round of head over the median round of base.
    """
    with np.errstate(divide="ignore", invalid="ignore"):
        if paired:
            return np.median(head / base, axis=-1)
        return np.median(head, axis=-1) / np.median(base, axis=-1)


def ratio_estimate(
    base: dict, head: dict, confidence: float = CONFIDENCE, seed: int = BOOTSTRAP_SEED
) -> tuple[float | None, float | None, float | None]:
    """Ratio head/base and its percentile-bootstrap interval, from the raw samples.

    One round per side: the ratio of medians, samples resampled. Several:
    rounds are resampled first and samples within them second; when both
    sides have the same number of rounds (the gate's interleaved A B / B A
    pairs) round ``i`` of base and of head are drawn together and the
    statistic is the median of per-round ratios. The ratio is None for a
    zero base; the interval is (None, None) with fewer than two samples a
    side — no interval, no significance.
    """
    base_groups, head_groups = _groups(base), _groups(head)
    paired = len(base_groups) == len(head_groups)
    medians = (np.array([[np.median(g) for g in gs]]) for gs in (head_groups, base_groups))
    ratio = float(_ratio(*medians, paired)[0])
    if not math.isfinite(ratio):
        return None, None, None
    if min(sum(map(len, base_groups)), sum(map(len, head_groups))) < 2:
        return ratio, None, None
    rng = np.random.default_rng(seed)
    head_picks = rng.integers(len(head_groups), size=(BOOTSTRAP_RESAMPLES, len(head_groups)))
    base_picks = (
        head_picks if paired else rng.integers(len(base_groups), size=(BOOTSTRAP_RESAMPLES, len(base_groups)))
    )
    ratios = _ratio(
        _round_medians(head_groups, head_picks, rng), _round_medians(base_groups, base_picks, rng), paired
    )
    alpha = (1 - confidence) / 2
    low, high = np.nanquantile(ratios, [alpha, 1 - alpha])
    return ratio, float(low), float(high)


def statistical_verdict(
    ratio: float | None, low: float | None, high: float | None, threshold: float, higher_is_better: bool
) -> str:
    """Regression: a significant slowdown (interval above 1), estimated at no less than half
    the threshold, and not shown to be within it (the interval reaches ``1 + threshold``).
    Improvement: the mirror image. Anything else: no change.

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
    if low > 1 and slowdown >= 1 + threshold / 2 and high >= limit:
        return REGRESSION
    if high < 1 and slowdown <= 1 / (1 + threshold / 2) and low <= 1 / limit:
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
    exact = name in EXACT_RESOLUTION
    if exact:
        ratio = low = high = h / b if b else None
        verdict = exact_verdict(name, b, h)
    else:
        ratio, low, high = ratio_estimate(base, head)
        verdict = statistical_verdict(ratio, low, high, threshold, higher_is_better(name))
    unit = head.get("unit") or base.get("unit", "")
    return MetricComparison(*case, name, unit, b, h, ratio, low, high, verdict, exact)


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
        for name in (b["metrics"].keys() & h["metrics"].keys()) - REFERENCE_METRICS:
            threshold = overrides.get(name, max_regression)
            rows.append(compare_metric(case, name, b["metrics"][name], h["metrics"][name], threshold))
    return Comparison(
        rows=worst_first(sorted(rows, key=lambda r: (*r.case, r.metric))),
        added=sorted(head_cases.keys() - base_cases.keys()),
        removed=sorted(base_cases.keys() - head_cases.keys()),
        environment_differences=environment_differences(base, head),
        head_errors=head_errors,
    )


# ---------------------------------------------------------------- presentation


def format_ratio(row: MetricComparison) -> tuple[str, str]:
    """The ratio and its interval as text, e.g. ``1.124`` and ``[1.080, 1.170]``."""
    if row.ratio is None:
        return "—", ""
    if row.exact:
        return f"{row.ratio:.3f}", "exact"
    interval = "" if row.ci_low is None else f"[{row.ci_low:.3f}, {row.ci_high:.3f}]"
    return f"{row.ratio:.3f}", interval


def reproduce_command(row: MetricComparison, base: dict) -> str:
    """A command that measures this case again locally, base against the working tree."""
    selection = ["--scenarios", row.scenario, "--backends", row.backend, "--workloads", row.workload]
    commit = (base["environment"].get("git_commit") or "").removesuffix("-dirty")
    command = (
        ["serbench", "gate", "--base", commit[:12], *selection] if commit else ["serbench", "run", *selection]
    )
    return shlex.join(command)


def spreads(data: dict) -> dict[str, dict[tuple[str, str, str], float]]:
    """How well a run pinned its medians: per scenario, (backend, workload, metric) → the
    relative half-width of the median's CI, for every sampled metric with a distribution
    (at least ``stats.MIN_DISTRIBUTION`` samples)."""
    out: dict[str, dict[tuple[str, str, str], float]] = {}
    for rec in results.ok_records(data):
        for name, measured in rec["metrics"].items():
            if not metric(name).exact and len(measured["values"]) >= MIN_DISTRIBUTION:
                key = (rec["backend"], rec["workload"], name)
                out.setdefault(rec["scenario"], {})[key] = relative_spread(measured["values"])
    return out


def noise(data: dict) -> float | None:
    """The typical (median) relative CI half-width over every metric ``spreads`` counts."""
    values = [v for per_scenario in spreads(data).values() for v in per_scenario.values()]
    return statistics.median(values) if values else None


def _reproduce_commands(comparison: Comparison, base: dict) -> list[str]:
    """One command per regressed case, worst first."""
    return list(dict.fromkeys(reproduce_command(r, base) for r in comparison.regressions))


def _headline(comparison: Comparison) -> str:
    bad = comparison.regressions
    if not bad:
        return f"no regression in {len(comparison.rows)} comparison(s)"
    cases = len({r.case for r in bad})
    return f"{len(bad)} regression(s) in {cases} case(s), out of {len(comparison.rows)} comparison(s)"


def _cells(row: MetricComparison) -> list[str]:
    ratio, interval = format_ratio(row)
    return [
        row.verdict.upper() if row.verdict in BAD_VERDICTS else row.verdict,
        f"{row.scenario} {row.backend} × {row.workload}",
        row.metric,
        format_value(row.base_median, row.unit),
        format_value(row.head_median, row.unit),
        ratio,
        interval,
    ]


HEADERS = ["verdict", "case", "metric", "base", "head", "head/base", "95% CI"]


def _notes(comparison: Comparison, base: dict, head: dict, bullet: str) -> list[str]:
    """Lines under the table: noise, environment, failures, added/removed cases."""
    lines = []
    base_noise, head_noise = noise(base), noise(head)
    if base_noise is not None and head_noise is not None:
        lines.append(
            f"noise: ±{base_noise:.1%} base, ±{head_noise:.1%} head (median CI half-width per metric)"
        )
    for key, (b, h) in comparison.environment_differences.items():
        lines.append(f"environment differs (--force): {key}: {b!r} → {h!r}")
    for case, error in sorted(comparison.head_errors.items()):
        lines.append(f"failed in head: {' '.join(case)}: {error}")
    lines += [f"added: {' '.join(case)}" for case in comparison.added]
    lines += [f"removed: {' '.join(case)}" for case in comparison.removed]
    return [f"{bullet}{line}" for line in lines]


def render_table(comparison: Comparison, base: dict, head: dict) -> str:
    """The terminal report: every row worst first, then how to reproduce each regression."""
    from serbench.summary import table

    out = [table(HEADERS, [_cells(r) for r in comparison.rows])] if comparison.rows else []
    out += _notes(comparison, base, head, "")
    if comparison.regressions:
        out.append("reproduce:")
        out += [f"  {cmd}" for cmd in _reproduce_commands(comparison, base)]
    out.append(_headline(comparison))
    return "\n".join(out)


def _markdown_table(rows: Sequence[MetricComparison]) -> list[str]:
    lines = ["| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
    return lines + ["| " + " | ".join(c.replace("|", "\\|") for c in _cells(r)) + " |" for r in rows]


def render_markdown(comparison: Comparison, base: dict, head: dict) -> str:
    """A summary for a pull-request comment or ``$GITHUB_STEP_SUMMARY``."""
    bad = comparison.regressions
    mark = "❌" if bad else "✅"
    out = [f"## {mark} serbench: {_headline(comparison)}", ""]
    changed = bad + comparison.improvements
    if changed:
        out += [*_markdown_table(changed), ""]
    out += _notes(comparison, base, head, "- ")
    if bad:
        out += ["", "Reproduce locally:", "", "```"]
        out += _reproduce_commands(comparison, base)
        out += ["```"]
    if comparison.rows:
        out += ["", f"<details><summary>all {len(comparison.rows)} comparisons</summary>", ""]
        out += [*_markdown_table(comparison.rows), "", "</details>"]
    return "\n".join(out) + "\n"


# ------------------------------------------------------------------------ CLI

EXIT_OK, EXIT_REGRESSION = 0, 1  # unusable input: cli.EXIT_USAGE (2)


def add_options(parser: argparse.ArgumentParser) -> None:
    """Options shared by ``compare`` and ``gate``: thresholds, --force, outputs."""
    from serbench.export import FORMATS

    parser.add_argument("--max-regression", default="10%", help="tolerated slowdown (default 10%%)")
    parser.add_argument(
        "--metric-threshold",
        action="append",
        default=[],
        metavar="METRIC=PCT",
        help="per-metric tolerated slowdown, e.g. ttft_s=5%% (repeatable)",
    )
    parser.add_argument("--force", action="store_true", help="compare runs from different environments")
    parser.add_argument(
        "--markdown", metavar="FILE", help="write a Markdown summary (e.g. $GITHUB_STEP_SUMMARY)"
    )
    parser.add_argument("--export", metavar="FILE", help="write head's results for another dashboard")
    parser.add_argument("--export-format", choices=sorted(FORMATS), default="bencher")


def thresholds(args: argparse.Namespace) -> tuple[float, dict[str, float]]:
    """``--max-regression`` and ``--metric-threshold`` parsed; UsageError if malformed."""
    from serbench.cli import UsageError

    try:
        overrides = {}
        for item in args.metric_threshold:
            name, eq, value = item.partition("=")
            if not eq or not name:
                raise ValueError(f"--metric-threshold {item!r} is not METRIC=PCT")
            overrides[name.strip()] = parse_threshold(value)
        return parse_threshold(args.max_regression), overrides
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def conclude(args: argparse.Namespace, base: dict, head: dict) -> int:
    """Compare, print the table, write the Markdown and export files; the exit code."""
    from serbench import export

    max_regression, overrides = thresholds(args)
    comparison = compare(base, head, max_regression, overrides)
    if comparison.environment_differences and not args.force:
        named = "; ".join(f"{k}: {b!r} vs {h!r}" for k, (b, h) in comparison.environment_differences.items())
        raise results.ResultsError(f"environments differ ({named}); --force compares them anyway")
    print(render_table(comparison, base, head))
    if args.markdown:
        Path(args.markdown).write_text(render_markdown(comparison, base, head))
    if args.export:
        export.write(head, args.export, args.export_format)
    return EXIT_REGRESSION if comparison.regressions else EXIT_OK


def cmd_compare(args: argparse.Namespace) -> int:
    """``serbench compare BASE.json HEAD.json``: exit 0, 1 on a regression, 2 on unusable input."""
    return conclude(args, results.load(args.base), results.load(args.head))


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``serbench compare``."""
    parser = subparsers.add_parser(
        "compare",
        help="compare two results files; exit 1 on a regression",
        description="Ratio head/base with a bootstrap CI for every case and metric in both files. "
        "Exit 0: no regression; 1: regression; 2: unusable input or incomparable environments.",
    )
    parser.add_argument("base", help="results.json of the base revision")
    parser.add_argument("head", help="results.json of the revision under test")
    add_options(parser)
    parser.set_defaults(func=cmd_compare)
