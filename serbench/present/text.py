"""Text for terminals and pull requests: tables of a run, of a comparison, the serving summary.

Presentation only: the numbers come from results documents (``results.Results``)
and from ``serbench.analysis.compare``; what a metric is called and how it scales comes from
``serbench.model.metrics``.
"""

from __future__ import annotations

import math
import shlex
import statistics
import textwrap
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from serbench.analysis.decision import (
    center_rule,
    chosen_text,
    decisions,
    interval_text,
    ranking_notes,
    ranking_title,
    tie_rule,
    unsafe_text,
    why,
)
from serbench.analysis.ranking import DEFAULT_BASELINE, ranking, row_of, typical_spread
from serbench.analysis.verdicts import (
    BAD_VERDICTS,
    Comparison,
    MetricComparison,
    case_order,
    what_would_decide,
)
from serbench.model.metrics import METRICS, metric
from serbench.model.results import (
    DEFAULT_TRANSPORT,
    Case,
    IpcInfo,
    Record,
    Results,
    ServingStat,
    SweepPoint,
)
from serbench.model.stats import MIN_DISTRIBUTION, Measurement
from serbench.model.units import UNITLESS, format_value, scale_for
from serbench.model.views import Table
from serbench.scenarios import SCENARIOS, dimensions


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A plain aligned text table (first column left, the rest right)."""
    widths = [max(len(str(cell)) for cell in col) for col in zip(headers, *rows, strict=False)]

    def line(cells: Sequence[str]) -> str:
        first, *rest = (str(c) for c in cells)
        return "  ".join(
            [first.ljust(widths[0]), *(c.rjust(w) for c, w in zip(rest, widths[1:], strict=True))]
        )

    rule = "-" * (sum(widths) + 2 * (len(widths) - 1))
    return "\n".join([line(headers), rule, *(line(r) for r in rows)])


def _column(records: Sequence[Record], name: str) -> tuple[float, str]:
    """One display scale for a metric across a table: the one its middle median reads best in.
    Not the largest's: a slow run whose in-band pickle passed 1 s at images-32 printed the
    whole TTFT table in seconds, text's 8 ms as 0.0079."""
    medians = [r.metrics[name].median for r in records if name in r.metrics]
    return scale_for(metric(name).unit, statistics.median(medians) if medians else 0.0)


def sample_count(rec: Record, name: str) -> int | None:
    """How many samples a record's metric stands on (a statistic's: its source's); None for an
    exact metric, which is a fact, not a sample, or when the record has neither."""
    facts = metric(name)
    source = rec.metrics.get(facts.statistic_of or name)
    return None if facts.exact or source is None else source.n


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


def _scaled(value: float) -> str:
    """Three significant digits, a value of 1000 or more whole (``1,040``, not ``1.04e+03``)."""
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}"


def summary_tables(data: Results) -> list[Table]:
    """Per scenario, a table for each summary metric (``metrics.Metric.summary``): rows a backend
    with its dimensions each (``compare.row_of``, labelled by ``Results.row_label`` and marked
    unsafe or undeclared), columns workloads, medians."""
    out = []
    for scenario in data.scenarios():
        records = [r for r in data.records if r.scenario == scenario]
        workloads = list(dict.fromkeys(r.workload for r in records))
        backends = list(dict.fromkeys(row_of(r) for r in records))
        by_cell = {(row_of(r), r.workload): r for r in records}
        present = {name for r in records for name in r.metrics}
        for name in (n for n, m in METRICS.items() if m.summary and n in present):
            factor, unit = _column(records, name)
            rows = [
                [
                    data.row_label(b) + data.safety_mark(b),
                    *(_cell(by_cell.get((b, w)), name, factor) for w in workloads),
                ]
                for b in backends
            ]
            shown = "" if unit in UNITLESS else f"{unit}, "
            stat = "per case" if metric(name).statistic_of else "median"
            few = any("(n=" in cell for row in rows for cell in row)
            note = f"(n=K): fewer than {MIN_DISTRIBUTION} samples, a value and not a distribution"
            title = f"{scenario}: {metric(name).label} ({shown}{stat})"
            out.append(Table(title, ["backend", *workloads], rows, note if few else ""))
    for scenario in data.scenarios():
        if scenario in SCENARIOS:  # the tables only the scenario can compute, as it declares them
            out += [replace(t, title=f"{scenario}: {t.title}") for t in SCENARIOS[scenario].tables(data)]
    return out


def ranking_tables(data: Results, baseline: str = DEFAULT_BASELINE) -> list[Table]:
    """Per scenario with a headline metric, the rows ranked by the geometric mean of their factor
    against ``baseline`` across workloads (``compare.ranking``): ties share a rank, variants
    come after; n = workloads in the mean."""
    out = []
    for scenario in data.scenarios():
        ranked = ranking(data, scenario, baseline)
        if not ranked:
            continue
        workloads = list(dict.fromkeys(r.workload for r in data.records if r.scenario == scenario))
        rows = [
            [
                r.place,
                data.row_label(r.row),
                *(f"{r.factors[w]:.3g}" if w in r.factors else "" for w in workloads),
                "" if r.geomean is None else f"{r.geomean.ratio:.3g}",
                "" if r.geomean is None else interval_text(r.geomean),
                str(r.n),
            ]
            for r in ranked
        ]
        title = ranking_title(data, scenario, baseline)
        notes = "\n".join(ranking_notes(data, scenario, ranked))
        out.append(Table(title, ["rank", "backend", *workloads, "geomean", "95% CI", "n"], rows, notes))
    return out


DECISION_WIDTH = 100
_INDENT = " " * 10


def _packed(parts: Sequence[str], first: str = _INDENT, separator: str = "; ") -> list[str]:
    """``parts`` joined by ``separator`` in lines of at most ``DECISION_WIDTH`` columns, under
    ``first`` then ``_INDENT``; a part is split (at its spaces, a backend's name never at its
    hyphens) only when it is too long for a line of its own. [] for no parts."""
    if not parts:
        return []
    pieces = [part + separator for part in parts[:-1]] + [parts[-1]]
    lines, line = [], first
    for piece in pieces:
        if line.strip() and len(line + piece.rstrip()) > DECISION_WIDTH:
            lines.append(line.rstrip())
            line = _INDENT
        line += piece
    lines.append(line.rstrip())
    wrap = {"width": DECISION_WIDTH, "subsequent_indent": _INDENT, "break_on_hyphens": False}
    too_long = (textwrap.wrap(text, **wrap) if len(text) > DECISION_WIDTH else [text] for text in lines)
    return [out for wrapped in too_long for out in wrapped]


def decision_block(data: Results) -> str:
    """The decision of a run (``decision.decisions``) in lines of at most ``DECISION_WIDTH``
    columns: per shape, per scenario, the safe backends to use and one line of why; "" when
    the run has nothing to decide."""
    found = decisions(data)
    if not found:
        return ""
    decided = [d.metric for d in found if not d.missing]
    rules = (f"    of {center_rule(data, decided)}", f"  tied {tie_rule(decided)};")
    wrap = {"width": DECISION_WIDTH, "subsequent_indent": "    ", "break_on_hyphens": False}
    lines = [
        "DECISION: the safe backend(s) to use per workload shape, best within this run's own noise",
        "  ×r [low, high]: ratio to the first one named with its 95% interval,",
        *(line for rule in rules for line in textwrap.wrap(rule, **wrap)),
        "  unsafe backends are never chosen",
    ]
    shape = None
    for d in found:
        if d.shape != shape:
            shape = d.shape
            workloads = ", ".join(dict.fromkeys(w for x in found if x.shape == shape for w in x.workloads))
            lines.append(f"{shape} ({workloads})")
        lines += _packed([chosen_text(d, data)], f"  {d.where:<7} ")
        lines += _packed(why(d, data))
        if d.unsafe:
            lines += _packed([f"faster but unsafe: {unsafe_text(d, data)}"])
    return "\n".join(lines)


def render(data: Results, baseline: str = DEFAULT_BASELINE) -> str:
    """The summary tables, the rankings against ``baseline``, the failed cases, then the decision."""
    out = [
        f"{t.title}\n{table(t.headers, t.rows)}" + (f"\n{t.note}" if t.note else "")
        for t in summary_tables(data) + ranking_tables(data, baseline)
    ]
    failed = [r for r in data.records if not r.ok]
    if failed:
        out.append("failed cases:\n" + "\n".join(f"  {r.label}: {r.error}" for r in failed))
    block = decision_block(data)
    if block:
        out.append(block)
    return "\n\n".join(out)


def _markdown(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """A Markdown table (pipes in cells escaped)."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    return lines + ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows]


def markdown_summary(data: Results, baseline: str = DEFAULT_BASELINE) -> str:
    """The summary and ranking tables as Markdown (for a pull request or a wiki page)."""
    return "\n".join(
        line
        for t in summary_tables(data) + ranking_tables(data, baseline)
        for line in (f"### {t.title}", "", *_markdown(t.headers, t.rows), *([t.note] if t.note else []), "")
    )


SERVING_PARTS = (("ttft", "TTFT", "ttft_s"), ("itl", "ITL", "itl_s"), ("e2e", "E2E", "e2e_s"))
SERVING_STATS = (("mean", "Mean"), ("median", "Median"), ("p99", "P99"))
TTFT_PARTS = (
    ("encode_s", "encode"),
    ("ingress_s", "ingress"),
    ("queue_s", "queue"),
    ("first_step_s", "first step"),
    ("egress_s", "egress"),
)


def _ipc(rec: Record) -> IpcInfo:
    """A serving record's info (``serving_report`` takes only records that have one)."""
    assert isinstance(rec.info, IpcInfo)
    return rec.info


def _latency_ms(latency: ServingStat, stat: str) -> float:
    """One of the serving benchmark's statistics of a latency: mean, median or p99."""
    return {"mean": latency.mean_ms, "median": latency.median_ms, "p99": latency.p99_ms}[stat]


def _serving_rows(records: list[Record]) -> list[list[str]]:
    """The serving benchmark's summary lines, one column per record, then TTFT's parts.

    A p99 of fewer than ``MIN_DISTRIBUTION`` samples is not one: its cell says n instead.
    """

    def row(label: str, value) -> list[str]:
        return [label, *(value(r) for r in records)]

    def measured(r: Record, name: str) -> Measurement | None:
        return r.metrics.get(name)

    def median(name: str, scale: float, fmt: str = "{:.2f}"):
        def cell(r: Record) -> str:
            m = measured(r, name)
            return "-" if m is None else fmt.format(m.median * scale)

        return cell

    def count(r: Record, name: str) -> int:
        return r.metrics[name].n

    def serving(part: str, stat: str, name: str):
        def cell(r: Record) -> str:
            if stat == "p99" and count(r, name) < MIN_DISTRIBUTION:
                return f"n={count(r, name)}"
            return f"{_latency_ms(getattr(_ipc(r).serving, part), stat):.2f}"

        return cell

    def part(name: str, stat: str):
        def cell(r: Record) -> str:
            m = measured(r, name)
            if m is None:
                return "-"
            if stat == "p99" and m.n < MIN_DISTRIBUTION:
                return f"n={m.n}"
            value = m.median if stat == "median" else np.percentile(m.values, 99)
            return f"{value * 1e3:.3f}"

        return cell

    def ingress_over_floor(r: Record) -> str:
        ratio = _ipc(r).ingress_over_floor
        return f"{math.nan if ratio is None else ratio:.2f}"

    rows = [
        row("Successful requests", lambda r: str(count(r, "ttft_s"))),
        row("Benchmark duration (s)", lambda r: f"{_ipc(r).duration_s:.2f}"),
        row("Request throughput (req/s)", median("req_per_s", 1)),
        row("Output token throughput (tok/s)", median("output_tokens_per_s", 1, "{:.1f}")),
    ]
    for key, label, name in SERVING_PARTS:
        for stat, stat_label in SERVING_STATS:
            rows.append(row(f"{stat_label} {label} (ms)", serving(key, stat, name)))
    for name, label in TTFT_PARTS:
        for stat, stat_label in (("median", "Median"), ("p99", "P99")):
            rows.append(row(f"{stat_label} {label} (ms)", part(name, stat)))
    rows.append(row("Empty-message round trip (µs)", median("floor_rtt_s", 1e6, "{:.0f}")))
    rows.append(row("Median ingress / round trip", ingress_over_floor))
    rows.append(row("Payload GB/s (median)", median("payload_gb_per_s", 1)))
    rows.append(row("Unix-socket GB/s, same bytes", median("unix_gb_per_s", 1)))
    if any(_ipc(r).sweep is not None for r in records):
        rows += _sweep_rows(records)
    return rows


def _points(record: Record) -> dict[float | str, SweepPoint]:
    """A record's sweep points by rate (empty without a sweep)."""
    sweep = _ipc(record).sweep
    return {} if sweep is None else {p.rate: p for p in sweep.points}


def _per_second(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _ttft_ms(point: SweepPoint) -> str:
    ttft = point.metrics.get("ttft_s")
    return "-" if ttft is None else f"{ttft.median * 1e3:.2f}"


def _sweep_rows(records: list[Record]) -> list[list[str]]:
    """A rate sweep's lines: TTFT median and admitted/goodput per rate, then where it saturated."""
    points = [_points(r) for r in records]
    rows = []
    for rate in dict.fromkeys(rate for by_rate in points for rate in by_rate):
        ttft, rates = [f"Rate {rate}: median TTFT (ms)"], [f"Rate {rate}: admitted / goodput (req/s)"]
        for by_rate in points:
            p = by_rate.get(rate)
            ttft.append("-" if p is None else _ttft_ms(p))
            admitted = None if p is None else _per_second(p.admitted_per_s)
            rates.append("-" if p is None else f"{admitted} / {p.goodput_per_s:.1f}")
        rows += [ttft, rates]
    sweeps = [_ipc(r).sweep for r in records]
    saturated = [None if s is None else s.saturated_at for s in sweeps]
    capacity = [None if s is None else s.capacity_per_s for s in sweeps]
    rows.append(["Saturated at (offered req/s)", *(str(v or "-") for v in saturated)])
    rows.append(["Capacity, all at once (req/s)", *map(_per_second, capacity)])
    return rows


def serving_report(data: Results) -> str:
    """Per workload, the ipc records of a results document in the serving benchmark's layout
    (records with serving numbers: an output workload's, ``StreamInfo``, has none).

    Printed for docs/ipc.md by ``python -c "from serbench.model.results import load;
    from serbench.present.text import serving_report as r; print(r(load('RESULTS.json')))"``.
    """
    records = [r for r in data.of() if isinstance(r.info, IpcInfo)]
    blocks = []
    for workload in dict.fromkeys(r.workload for r in records):
        group = [r for r in records if r.workload == workload]
        blocks.append(table([workload, *(r.row for r in group)], _serving_rows(group)))
    return "\n\n".join(blocks)


# ---------------------------------------------------------------- a comparison


def format_ratio(row: MetricComparison) -> tuple[str, str]:
    """The ratio and its interval as text, e.g. ``1.124`` and ``[1.080, 1.170]``."""
    if row.ratio is None:
        return "—", ""
    if row.exact:
        return f"{row.ratio:.3f}", "exact"
    interval = "" if row.ci_low is None else f"[{row.ci_low:.3f}, {row.ci_high:.3f}]"
    return f"{row.ratio:.3f}", interval


def reproduce_command(
    row: MetricComparison, base: Results, head: Results, runtimes: Sequence[str] = ()
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
    flags = {field: d.flag for field, d in dimensions().items()}
    for field, value in case.dimensions().items():
        if (field, value) != ("transport", DEFAULT_TRANSPORT):
            selection += [flags.get(field, f"--{field}"), str(value)]
    commit = base.environment.git_commit or ""
    if runtimes:
        return shlex.join(["serbench", "gate", *runtimes, *selection])
    if commit and commit != head.environment.git_commit:
        return shlex.join(["serbench", "gate", "--base", commit.removesuffix("-dirty")[:12], *selection])
    return shlex.join(["serbench", "run", *selection])


def _reproduce_commands(
    comparison: Comparison, base: Results, head: Results, runtimes: Sequence[str] = ()
) -> list[str]:
    """One command per regressed case, worst first."""
    return list(dict.fromkeys(reproduce_command(r, base, head, runtimes) for r in comparison.regressions))


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


def _cells(row: MetricComparison) -> list[str]:
    ratio, interval = format_ratio(row)
    return [
        row.verdict.upper() if row.verdict in BAD_VERDICTS else row.verdict,
        row.case.label,
        row.metric,
        format_value(row.base_median, row.unit),
        format_value(row.head_median, row.unit),
        ratio,
        interval,
        "" if row.detectable is None else f"{row.detectable:.1%}",
    ]


# "detects": the smallest slowdown each comparison would have caught (``compare.detectable``).
HEADERS = ["verdict", "case", "metric", "base", "head", "head/base", "95% CI", "detects"]


def _case_words(case: Case) -> str:
    """A case in a line of notes: scenario, row (``Case.row``), workload."""
    return " ".join(case_order(case))


def _notes(comparison: Comparison, base: Results, head: Results, bullet: str) -> list[str]:
    """Lines under the table: noise, environment, failures, added/removed cases."""
    lines = []
    base_noise, head_noise = typical_spread(base), typical_spread(head)
    if base_noise is not None and head_noise is not None:
        lines.append(
            f"noise: ±{base_noise:.1%} base, ±{head_noise:.1%} head (median CI half-width per metric)"
        )
    for key, (b, h) in comparison.environment_differences.items():
        lines.append(f"environment differs (--force): {key}: {b!r} → {h!r}")
    for case, error in sorted(comparison.head_errors.items(), key=lambda item: case_order(item[0])):
        lines.append(f"failed in head: {_case_words(case)}: {error}")
    for case, reason in sorted(comparison.not_measured.items(), key=lambda item: case_order(item[0])):
        lines.append(f"not measured on either side: {_case_words(case)}: {reason}")
    lines += [f"added: {_case_words(case)}" for case in comparison.added]
    lines += [f"removed: {_case_words(case)}" for case in comparison.removed]
    lines += inconclusive_lines(comparison)
    return [f"{bullet}{line}" for line in lines]


def inconclusive_lines(comparison: Comparison) -> list[str]:
    """What the inconclusive rows are and what would decide them (``compare.what_would_decide``);
    [] when every row decided."""
    unsure = comparison.inconclusive
    if not unsure:
        return []
    widest = unsure[0]
    worst = "no interval" if widest.detectable is None else f"detects up to {widest.detectable:.1%}"
    ways = "; ".join(what_would_decide(comparison))
    return [
        f"inconclusive: {len(unsure)} row(s) could not have seen a slowdown of their tolerance ({worst}, "
        f"{_case_words(widest.case)} {widest.metric}); to decide them: {ways}"
    ]


def comparison_table(
    comparison: Comparison,
    base: Results,
    head: Results,
    changes_only: bool = False,
    runtimes: Sequence[str] = (),
) -> str:
    """The terminal report: every row (or every change) worst first, then how to reproduce
    each regression (``runtimes``: the gate's ``--base-path ...`` options, when it had them)."""
    shown = comparison.changes if changes_only else comparison.rows
    out = [table(HEADERS, [_cells(r) for r in shown])] if shown else []
    if changes_only:
        out.append(f"({len(comparison.rows) - len(shown)} row(s) without change not shown)")
    out += _notes(comparison, base, head, "")
    if comparison.regressions:
        out.append("reproduce:")
        out += [f"  {cmd}" for cmd in _reproduce_commands(comparison, base, head, runtimes)]
    out.append(_headline(comparison))
    return "\n".join(out)


def _markdown_table(rows: Sequence[MetricComparison]) -> list[str]:
    return _markdown(HEADERS, [_cells(r) for r in rows])


def comparison_markdown(
    comparison: Comparison,
    base: Results,
    head: Results,
    first_line: str | None = None,
    runtimes: Sequence[str] = (),
) -> str:
    """A summary for a pull-request comment or ``$GITHUB_STEP_SUMMARY``; ``first_line`` (how
    the gate measured) under the headline; ``runtimes`` as for ``comparison_table``."""
    bad = comparison.regressions
    mark = "❌" if bad else "⚠️" if comparison.inconclusive or not comparison.rows else "✅"
    out = [f"## {mark} serbench: {_headline(comparison)}", ""]
    if first_line:
        out += [first_line, ""]
    changed = comparison.changes
    if changed:
        out += [*_markdown_table(changed), ""]
    out += _notes(comparison, base, head, "- ")
    if bad:
        out += ["", "Reproduce locally:", "", "```"]
        out += _reproduce_commands(comparison, base, head, runtimes)
        out += ["```"]
    if comparison.rows:
        out += ["", f"<details><summary>all {len(comparison.rows)} comparisons</summary>", ""]
        out += [*_markdown_table(comparison.rows), "", "</details>"]
    return "\n".join(out) + "\n"
