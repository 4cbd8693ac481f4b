"""What a run, or a comparison, says: built once here, printed by every presenter alike.

A run flows results → ``summarize_run`` → ``RunSummary`` → ``serbench.present``: the terminal
(``present.terminal``), Markdown (``present.markdown``) and the HTML page (``present.html``)
render the same summary, so they cannot disagree, and none of them ranks, decides or judges.
``summarize_run`` reads ``results.Results`` and calls the analysis once: per scenario its
headline table (the ``metrics.Metric.headline`` metric) and its other tables, the ranking
against the baseline (``ranking``), the decisions per workload shape (``decision``), how noisy
each scenario was (``ranking.spreads``) and the failed cases. A comparison flows the same way:
``verdicts.compare`` → ``summarize_comparison`` → ``ComparisonSummary``: its verdict rows,
headline, notes, what would decide the inconclusive rows, and how to reproduce a regression.

Cells are text already where every presenter shows the same text (the tables); numbers stay
numbers where a presenter draws or marks them (ratios, intervals, spreads).
"""

from __future__ import annotations

import shlex
import statistics
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

from serbench.analysis import decision, ranking, verdicts
from serbench.analysis.verdicts import BAD_VERDICTS, Comparison, MetricComparison, Verdict
from serbench.model.metrics import METRICS, metric
from serbench.model.results import DEFAULT_TRANSPORT, Case, Record, Results
from serbench.model.stats import MIN_DISTRIBUTION
from serbench.model.units import UNITLESS, scale_for
from serbench.model.views import Table
from serbench.scenarios import SCENARIOS, dimensions

# ---------------------------------------------------------------- a run


@dataclass(frozen=True)
class ScenarioTables:
    """One scenario's tables: ``headline`` (its headline metric's medians; None without one),
    ``metrics`` (every other summary metric's), ``own`` (those the scenario declares,
    ``Scenario.tables``, titled without the scenario's name)."""

    scenario: str
    headline: Table | None
    metrics: list[Table]
    own: list[Table]


@dataclass(frozen=True)
class RankedRow:
    """A row of a ranking: its place (``1``, ``2=``, ``v1``), its label, its factor per workload, the
    geometric mean of the factors with its interval as text, and how many workloads it holds."""

    place: str
    row: Case
    label: str
    factors: dict[str, float]
    geomean: float | None
    interval: str
    n: int


@dataclass(frozen=True)
class Ranking:
    """A scenario's rows best first against the baseline in its headline metric."""

    scenario: str
    title: str
    workloads: list[str]
    rows: list[RankedRow]
    notes: list[str]


@dataclass(frozen=True)
class Choice:
    """What to use for one workload shape in one scenario (``decision.Decision``) in words:
    ``use`` the safe rows to use (tied when more than one), or ``missing`` why none;
    ``measured`` the metric and the best row's values, ``reasons`` the other parts of one line
    of why (ratios to it, rules); ``unsafe`` the faster unsafe rows, each with its ratio;
    ``settled`` whether its ratios were settled (``decision.Decision.settled``)."""

    shape: str
    where: str
    workloads: list[str]
    use: list[Case]
    tie: bool
    use_text: str
    measured: str
    reasons: list[str]
    unsafe: list[str]
    missing: str = ""
    settled: bool | None = None


@dataclass(frozen=True)
class ScenarioNoise:
    """How well one scenario pinned its medians: the typical (median) and the worst relative
    half-width of a median's interval, where the worst was, and over how many metrics."""

    scenario: str
    typical: float
    worst: float
    worst_case: Case
    worst_metric: str
    metrics: int


@dataclass(frozen=True)
class ScenarioTime:
    """Where a run's time went in one scenario: the visits its cases took (a case measured
    whole, one) and the seconds they spent (``Record.duration_s``)."""

    scenario: str
    visits: int
    seconds: float


@dataclass(frozen=True)
class RunSummary:
    """Everything a run's presenters show, computed once (``summarize_run``)."""

    results: Results
    baseline: str
    scenarios: list[ScenarioTables]
    rankings: list[Ranking]
    choices: list[Choice]
    ratio_of: str  # what a decision's ratios are ratios of (``decision.center_rule``)
    tie_rule: str  # when two rows tie (``decision.tie_rule``)
    noise: list[ScenarioNoise]
    failed: list[Record]  # the cases that failed (unsupported ones are in ``unsupported``)
    time: list[ScenarioTime] = field(default_factory=list)
    unsupported: dict[str, list[str]] = field(default_factory=dict)  # reason → the backends it names


def _column(records: Sequence[Record], name: str) -> tuple[float, str]:
    """One display scale for a metric across a table: the one its middle median reads best in,
    so that one slow row does not print a whole table in the wrong unit."""
    medians = [r.metrics[name].median for r in records if name in r.metrics]
    return scale_for(metric(name).unit, statistics.median(medians) if medians else 0.0)


def sample_count(rec: Record, name: str) -> int | None:
    """How many samples a record's metric stands on (a statistic's: its source's); None for an
    exact metric, which is a fact, not a sample, or when the record has neither."""
    facts = metric(name)
    source = rec.metrics.get(facts.statistic_of or name)
    return None if facts.exact or source is None else source.n


def _scaled(value: float) -> str:
    """Three significant digits, a value of 1000 or more whole (``1,040``, not ``1.04e+03``)."""
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}"


def _cell(rec: Record | None, name: str, factor: float) -> str:
    """A metric's median in the column's scale, ``(n=K)`` beside it under ``MIN_DISTRIBUTION``
    samples (a value, not a distribution; a statistic of so few is not shown at all); FAILED,
    unsupported (declared by the backend, never timed) or blank if none."""
    if rec is None:
        return ""
    if not rec.ok:
        return "unsupported" if rec.unsupported is not None else "FAILED"
    measured = rec.metrics.get(name)
    n = sample_count(rec, name)
    few = n is not None and n < MIN_DISTRIBUTION
    if few and (measured is None or metric(name).statistic_of):
        return f"(n={n})"
    if measured is None:
        return ""
    value = _scaled(measured.median / factor)
    return f"{value} (n={n})" if few else value


def _metric_table(data: Results, scenario: str, name: str) -> Table:
    """One metric's medians: rows a backend with its dimensions (``ranking.row_of``, labelled
    by ``Results.row_label`` and marked unsafe or undeclared), columns workloads."""
    records = [r for r in data.records if r.scenario == scenario]
    workloads = list(dict.fromkeys(r.workload for r in records))
    backends = list(dict.fromkeys(ranking.row_of(r) for r in records))
    by_cell = {(ranking.row_of(r), r.workload): r for r in records}
    factor, unit = _column(records, name)
    rows = []
    for b in backends:
        cells = [_cell(by_cell.get((b, w)), name, factor) for w in workloads]
        rows.append([data.row_label(b) + data.safety_mark(b), *cells])
    shown = "" if unit in UNITLESS else f"{unit}, "
    stat = "per case" if metric(name).statistic_of else "median"
    few = any("(n=" in cell for row in rows for cell in row)
    note = f"(n=K): fewer than {MIN_DISTRIBUTION} samples, a value and not a distribution"
    title = f"{scenario}: {metric(name).label} ({shown}{stat})"
    return Table(title, ["backend", *workloads], rows, note if few else "")


def scenario_tables(data: Results, scenario: str) -> ScenarioTables:
    """A scenario's headline table, its other summary metrics' tables (``metrics.Metric.summary``)
    and the tables the scenario declares."""
    present = {name for r in data.of(scenario) for name in r.metrics}
    headline = ranking.headline_metric(data, scenario)
    names = [n for n, m in METRICS.items() if m.summary and n in present and n != headline]
    own = SCENARIOS[scenario].tables(data) if scenario in SCENARIOS else []
    return ScenarioTables(
        scenario,
        None if headline is None else _metric_table(data, scenario, headline),
        [_metric_table(data, scenario, name) for name in names],
        own,
    )


def _ranking(data: Results, scenario: str, baseline: str) -> Ranking | None:
    """The scenario's ranking against ``baseline`` in words and numbers; None without one."""
    ranked = ranking.ranking(data, scenario, baseline)
    if not ranked:
        return None
    rows = [
        RankedRow(
            r.place,
            r.row,
            data.row_label(r.row),
            r.factors,
            None if r.geomean is None else r.geomean.ratio,
            "" if r.geomean is None else decision.interval_text(r.geomean),
            r.n,
        )
        for r in ranked
    ]
    workloads = list(dict.fromkeys(r.workload for r in data.of(scenario)))
    title = decision.ranking_title(data, scenario, baseline)
    return Ranking(scenario, title, workloads, rows, decision.ranking_notes(data, scenario, ranked))


def _choice(found: decision.Decision, data: Results) -> Choice:
    measured, *reasons = decision.reasons(found, data) or [""]
    return Choice(
        found.shape,
        found.where,
        found.workloads,
        [s.row for s in found.chosen],
        found.tie,
        decision.chosen_text(found, data),
        measured,
        reasons,
        decision.unsafe_items(found, data),
        found.missing,
        found.settled,
    )


def _noise(data: Results) -> list[ScenarioNoise]:
    """Per scenario with sampled metrics, in the run's order, how noisy it was."""
    out = []
    for scenario, spreads in ranking.spreads(data).items():
        (case, name), worst = max(spreads.items(), key=lambda kv: kv[1])
        typical = statistics.median(spreads.values())
        out.append(ScenarioNoise(scenario, typical, worst, case, name, len(spreads)))
    return out


def _time(data: Results) -> list[ScenarioTime]:
    """Per scenario, in the run's order, the visits made and the seconds spent."""
    return [
        ScenarioTime(
            scenario,
            sum(rec.rounds or 1 for rec in data.of(scenario)),
            sum(rec.duration_s for rec in data.of(scenario)),
        )
        for scenario in data.scenarios()
    ]


def summarize_run(data: Results, baseline: str = ranking.DEFAULT_BASELINE) -> RunSummary:
    """The summary of a run: its tables, rankings against ``baseline``, decisions, noise, failed
    cases and where its time went."""
    found = decision.decisions(data)
    decided = [d.metric for d in found if not d.missing]
    rankings = [_ranking(data, scenario, baseline) for scenario in data.scenarios()]
    return RunSummary(
        results=data,
        baseline=baseline,
        scenarios=[scenario_tables(data, scenario) for scenario in data.scenarios()],
        rankings=[r for r in rankings if r is not None],
        choices=[_choice(d, data) for d in found],
        ratio_of=decision.center_rule(data, decided),
        tie_rule=decision.tie_rule(decided),
        noise=_noise(data),
        failed=[r for r in data.records if not r.ok and r.unsupported is None],
        time=_time(data),
        unsupported=_unsupported(data),
    )


def _unsupported(data: Results) -> dict[str, list[str]]:
    """Per reason a backend or workload gave for not carrying a case, the backends it names and how
    many cases (``backend (n)``), in the run's order: one reason is often a whole column."""
    by_reason: dict[str, dict[str, int]] = {}
    for rec in data.records:
        if rec.unsupported is not None:
            counts = by_reason.setdefault(rec.unsupported, {})
            counts[rec.row] = counts.get(rec.row, 0) + 1
    return {reason: [f"{row} ({n})" for row, n in counts.items()] for reason, counts in by_reason.items()}


# ---------------------------------------------------------------- a comparison


@dataclass(frozen=True)
class VerdictRow:
    """One metric of one case, base against head (``verdicts.MetricComparison``), as shown."""

    case: Case
    metric: str
    unit: str
    base: float | None
    head: float | None
    ratio: float | None
    low: float | None
    high: float | None
    verdict: Verdict
    exact: bool
    detectable: float | None
    rounds: int | None = None  # the gate's paired rounds behind the row; None: not paired
    settled: bool = False  # more rounds would not change its verdict (``MetricComparison.settled``)
    band: float | None = None  # a count's spread between interpreter layouts (``verdicts.layout_band``)
    lookups_only: bool = False  # its count grew in the interpreter's lookups alone (``attribution``)

    @property
    def bad(self) -> bool:
        """A regression, or a failure in head: what fails the gate."""
        return self.verdict in BAD_VERDICTS

    @property
    def inconclusive(self) -> bool:
        return self.verdict == Verdict.INCONCLUSIVE


@dataclass(frozen=True)
class ComparisonSummary:
    """Everything a comparison's presenters show, computed once (``summarize_comparison``):
    ``rows`` worst first; ``changes`` those with a verdict but "no change"; ``marked`` the
    regressions, improvements and inconclusive rows; ``regressions`` those that fail."""

    base: Results
    head: Results
    rows: list[VerdictRow]
    changes: list[VerdictRow]
    regressions: list[VerdictRow]
    marked: list[VerdictRow]
    improvements: int
    inconclusive: int
    headline: str
    notes: list[str]
    ways_to_decide: list[str]
    reproduce: list[str]
    environment_differences: dict[str, tuple]
    added: list[Case]
    removed: list[Case]
    base_noise: list[ScenarioNoise]
    head_noise: list[ScenarioNoise]
    grew: list[str] = field(default_factory=list)  # functions whose instructions grew (attribution)


def _row(row: MetricComparison, lookups: Collection[tuple[Case, str]] = ()) -> VerdictRow:
    return VerdictRow(
        row.case,
        row.metric,
        row.unit,
        row.base_median,
        row.head_median,
        row.ratio,
        row.ci_low,
        row.ci_high,
        row.verdict,
        row.exact,
        row.detectable,
        row.rounds,
        row.settled,
        row.band,
        (row.case, row.metric) in lookups,
    )


def reproduce_command(
    row: MetricComparison | VerdictRow, base: Results, head: Results, runtimes: Sequence[str] = ()
) -> str:
    """A command that measures this case again locally: a gate of base against the working
    tree, or a plain run when there is no base commit or head is the same commit (a gate of
    a commit against itself says nothing about the change) — unless the gate compared two
    runtimes of one serbench (``runtimes``: its ``--base-path ...`` options), then that gate.
    ``--transport`` is named unless the case runs over the default one (or links no
    processes); every other dimension the case sets is named by its flag (``--workers 2``,
    ``--cache lru``)."""
    case = row.case
    selection = ["--scenarios", case.scenario, "--backends", case.backend, "--workloads", case.workload]
    flags = {name: d.flag for name, d in dimensions().items()}
    for name, value in case.dimensions().items():
        if (name, value) != ("transport", DEFAULT_TRANSPORT):
            selection += [flags.get(name, f"--{name}"), str(value)]
    commit = base.environment.git_commit or ""
    if runtimes:
        return shlex.join(["serbench", "gate", *runtimes, *selection])
    if commit and commit != head.environment.git_commit:
        return shlex.join(["serbench", "gate", "--base", commit.removesuffix("-dirty")[:12], *selection])
    return shlex.join(["serbench", "run", *selection])


def _headline(comparison: Comparison) -> str:
    bad, hinted, unsure = comparison.regressions, comparison.indicative, comparison.inconclusive
    if not comparison.rows:
        return "nothing compared: no case and metric in both files (exit 2)"
    if bad:
        cases = len({r.case for r in bad})
        text = f"{len(bad)} regression(s) in {cases} case(s), out of {len(comparison.rows)} comparison(s)"
    else:
        text = f"no regression in {len(comparison.rows)} comparison(s)"
    if unsure:
        text += f"; {len(unsure)} inconclusive (could not have seen a slowdown of their tolerance)"
    if hinted:
        text += (
            f"; {len(hinted)} indicative change(s) beyond tolerance: plain runs, one process a side, "
            "cannot tell them from run-to-run variation (serbench gate pairs runs; --strict fails on them)"
        )
    return text


def _case_words(case: Case) -> str:
    """A case in a line of notes: scenario, row (``Case.row``), workload."""
    return " ".join(verdicts.case_order(case))


def inconclusive_lines(comparison: Comparison) -> list[str]:
    """What the inconclusive rows are and what would decide them (``verdicts.what_would_decide``);
    [] when every row decided."""
    unsure = comparison.inconclusive
    if not unsure:
        return []
    widest = unsure[0]
    worst = "no interval" if widest.detectable is None else f"detects up to {widest.detectable:.1%}"
    ways = "; ".join(verdicts.what_would_decide(comparison))
    return [
        f"inconclusive: {len(unsure)} row(s) could not have seen a slowdown of their tolerance ({worst}, "
        f"{_case_words(widest.case)} {widest.metric}); to decide them: {ways}"
    ]


def _notes(comparison: Comparison, base: Results, head: Results) -> list[str]:
    """Lines under the table: noise, environment, failures, added/removed cases, the
    inconclusive rows."""
    lines = []
    base_spread, head_spread = ranking.typical_spread(base), ranking.typical_spread(head)
    if base_spread is not None and head_spread is not None:
        lines.append(
            f"noise: ±{base_spread:.1%} base, ±{head_spread:.1%} head (median CI half-width per metric)"
        )
    for key, (b, h) in comparison.environment_differences.items():
        lines.append(f"environment differs (--force): {key}: {b!r} → {h!r}")
    order = verdicts.case_order
    for case, error in sorted(comparison.head_errors.items(), key=lambda item: order(item[0])):
        lines.append(f"failed in head: {_case_words(case)}: {error}")
    for case, reason in sorted(comparison.not_measured.items(), key=lambda item: order(item[0])):
        lines.append(f"not measured on either side: {_case_words(case)}: {reason}")
    lines += [f"added: {_case_words(case)}" for case in comparison.added]
    lines += [f"removed: {_case_words(case)}" for case in comparison.removed]
    return lines + inconclusive_lines(comparison)


def summarize_comparison(
    comparison: Comparison,
    base: Results,
    head: Results,
    runtimes: Sequence[str] = (),
    grew: Sequence[str] = (),
    lookups: Collection[tuple[Case, str]] = (),
) -> ComparisonSummary:
    """The summary of a comparison of ``base`` and ``head``; ``runtimes``: the gate's
    ``--base-path ...`` options for its reproduce commands; ``grew``: the functions whose
    instructions grew (``attribution.explain``); ``lookups``: the ``(case, metric)`` count rows
    whose growth was the interpreter's lookups alone (``attribution.Explanation``)."""
    marked = [*comparison.regressions, *comparison.improvements, *comparison.inconclusive]
    reproduce = (reproduce_command(r, base, head, runtimes) for r in comparison.regressions)
    return ComparisonSummary(
        base=base,
        head=head,
        rows=[_row(r, lookups) for r in comparison.rows],
        changes=[_row(r, lookups) for r in comparison.changes],
        regressions=[_row(r, lookups) for r in comparison.regressions],
        marked=[_row(r, lookups) for r in marked],
        improvements=len(comparison.improvements),
        inconclusive=len(comparison.inconclusive),
        headline=_headline(comparison),
        notes=_notes(comparison, base, head),
        ways_to_decide=verdicts.what_would_decide(comparison),
        reproduce=list(dict.fromkeys(reproduce)),
        environment_differences=comparison.environment_differences,
        added=comparison.added,
        removed=comparison.removed,
        base_noise=_noise(base),
        head_noise=_noise(head),
        grew=list(grew),
    )
