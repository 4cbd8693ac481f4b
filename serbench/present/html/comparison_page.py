"""The comparison page of two runs (base, head): verdicts, both environments, ratios per scenario.

The page shows a comparison's summary (``analysis.summary.ComparisonSummary``): per metric
the ratio head/base with its interval, regressions and improvements marked; the statistics
are the analysis's, not this module's, and the terminal and Markdown print the same summary.
A row stands for its ``results.Case`` (``VerdictRow.case``); the ratio
figures draw a line per ``page.line`` (a backend over shm apart from it over ipc).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from serbench.analysis.summary import ComparisonSummary, VerdictRow
from serbench.model.metrics import metric
from serbench.model.results import Case, Results
from serbench.model.units import format_value
from serbench.present.cells import format_ratio, rounds_cell
from serbench.present.html.page import (
    DASH,
    TIMES,
    Look,
    case_attr,
    case_text,
    e,
    figure,
    incomplete,
    line,
    page,
    section,
    table,
    unique,
)
from serbench.present.html.run_page import Run, environment_section, failed_section, noise_section
from serbench.scenarios import SCENARIOS


def _ratio_text(row: VerdictRow) -> str:
    """The ratio and what bounds it (its interval, or a count's layout band), as the terminal's."""
    if row.ratio is None:
        return DASH
    ratio, bounds = format_ratio(row)
    return ratio if bounds in ("", "exact") else f"{ratio} <span class='ci'>{e(bounds)}</span>"


def _comparison_row(row: VerdictRow, look: Look, with_scenario: bool) -> str:
    def side(value: float | None) -> str:
        return DASH if value is None else format_value(value, row.unit)

    label = metric(row.metric).label + (" (exact)" if row.exact else "")
    first = f"<td>{e(row.case.scenario)}</td>" if with_scenario else ""
    verdict = row.verdict.value.replace(" ", "-")
    badge = f"{verdict} moderate" if row.inconclusive else verdict
    detects = DASH if row.detectable is None else f"{row.detectable:.1%}"
    return (
        f'<tr class="{verdict}" data-case="{case_attr(row.case)}" data-metric="{e(row.metric)}">'
        f"{first}<td>{look.backend(row.case)}</td><td>{e(row.case.workload)}</td><td>{e(label)}</td>"
        f"<td>{side(row.base)}</td><td>{side(row.head)}</td><td>{_ratio_text(row)}</td>"
        f"<td>{e(rounds_cell(row)) or DASH}</td><td>{detects}</td>"
        f"<td><span class='badge {badge}'>{e(row.verdict.value)}</span></td></tr>"
    )


def comparison_table(rows: Sequence[VerdictRow], look: Look, with_scenario: bool = False) -> str:
    headers = [
        "backend",
        "workload",
        "metric",
        "base median",
        "head median",
        "head / base [95% CI]",
        "rounds",
        "detects",
        "verdict",
    ]
    body = [_comparison_row(r, look, with_scenario) for r in rows]
    return table(["scenario", *headers] if with_scenario else headers, body, "numbers")


def _ratio_figure(scenario: str, rows: Sequence[VerdictRow], look: Look) -> bytes | None:
    # Here, not at the top: plots imports matplotlib, which importing the report must not pay.
    from serbench.present.html import plots

    figures = SCENARIOS[scenario].figures if scenario in SCENARIOS else ()
    wanted = unique(n for spec in figures for n, _ in spec.columns) or unique(r.metric for r in rows)
    panels = {
        metric(name).label: [
            plots.RatioPoint(line(r.case), r.case.workload, r.ratio, r.low, r.high, r.verdict.value)
            for r in rows
            if r.metric == name and r.ratio  # a ratio of 0 (or none) has no place on a log axis
        ]
        for name in wanted
    }
    panels = {k: v for k, v in panels.items() if v}
    if not panels:
        return None
    lines = look.styles(look.lines(r.case for r in rows))
    return plots.ratios(panels, lines, unique(r.case.workload for r in rows))


def _comparison_scenario(scenario: str, rows: Sequence[VerdictRow], workloads: list[str], look: Look) -> str:
    """The ratio figure and every row of one scenario, ordered like the run (workload, line)."""
    lines = list(look.drawn)
    rows = sorted(rows, key=lambda r: (workloads.index(r.case.workload), lines.index(line(r.case)), r.metric))
    png = _ratio_figure(scenario, rows, look)
    title = f"{scenario}: head / base per case (1 = unchanged; {TIMES} regression, + improvement)"
    ratios = f"<h3>{e(title)}</h3>" + figure(png, title) if png else ""
    return section(
        f"scenario-{scenario}", f"{scenario}: head against base", ratios + comparison_table(rows, look)
    )


def _case_list(title: str, cases: Sequence[Case]) -> str:
    if not cases:
        return ""
    return (
        f"<h3>{e(title)} ({len(cases)})</h3><ul>"
        + "".join(f"<li>{e(case_text(c))}</li>" for c in cases)
        + "</ul>"
    )


def verdict_section(summary: ComparisonSummary, max_regression: float, look: Look) -> str:
    """The headline: regressions and improvements first, then the inconclusive rows and what
    would decide them, then what differs in the set-ups."""
    bad, unsure = summary.regressions, summary.inconclusive
    cls = "bad" if bad else "moderate" if unsure else "good"
    banner = (
        f"<p class='banner {cls}'>{len(bad)} regression(s), {summary.improvements} improvement(s), "
        f"{unsure} inconclusive among "
        f"{len(summary.rows)} compared metrics (tolerated slowdown {max_regression:.0%}).</p>"
    )
    if unsure:
        ways = "".join(f"<li>{e(way)}</li>" for way in summary.ways_to_decide)
        banner += (
            "<p>Inconclusive: the comparison could not have seen a slowdown of the row's tolerance "
            "(its <i>detects</i>, the minimum detectable effect, is above it), so it claims neither "
            f"“no change” nor “improvement”. What would decide them:</p><ul>{ways}</ul>"
        )
    env = "".join(
        f"<li>{e(k)}: base {e(str(b))}, head {e(str(h))}</li>"
        for k, (b, h) in summary.environment_differences.items()
    )
    warning = (
        f"<p class='banner bad'>The runs are not comparable as they stand:</p><ul>{env}</ul>" if env else ""
    )
    marked = comparison_table(summary.marked, look, with_scenario=True) if summary.marked else ""
    lists = _case_list("Only in head", summary.added) + _case_list("Only in base", summary.removed)
    return section("verdict", "Verdict", banner + warning + marked + lists)


def _same_file(sources: tuple[str, str]) -> bool:
    """Whether both sources name one file (a path spelt twice, a link to it)."""
    if not all(sources):
        return False
    try:
        return os.path.samefile(*sources)
    except OSError:  # a source that is not (or no longer) a file: compare what the names say
        return Path(sources[0]).resolve() == Path(sources[1]).resolve()


def same_results(base: Results, head: Results, sources: tuple[str, str]) -> str:
    """A banner at the top when base and head are one file or hold the same results: then every
    difference on the page is the measurement's noise, not a change; nothing otherwise."""
    if _same_file(sources):
        what = "base and head are the same file"
    elif base == head:
        what = "base and head hold the same results (identical contents)"
    else:
        return ""
    return f"<p class='banner moderate'>{e(what)}: every difference is noise.</p>"


def render_comparison(
    summary: ComparisonSummary, sources: tuple[str, str] = ("", ""), max_regression: float = 0.10
) -> str:
    """The comparison page: verdicts, both environments, and per scenario the ratios head/base."""
    base, head = summary.base, summary.head
    look = Look.of(base, head)
    runs = [
        Run("base", sources[0], base, summary.base_noise),
        Run("head", sources[1], head, summary.head_noise),
    ]
    scenarios = unique(r.case.scenario for r in summary.rows)
    workloads = unique(r.workload for d in (base, head) for r in d.records)
    sections = [
        same_results(base, head, sources),
        incomplete(base, "The base run") + incomplete(head, "The head run"),
        verdict_section(summary, max_regression, look),
        environment_section(runs),
        noise_section(runs),
        *(
            _comparison_scenario(s, [r for r in summary.rows if r.case.scenario == s], workloads, look)
            for s in scenarios
        ),
        failed_section(head, look),
    ]
    subtitle = f"head <code>{e(sources[1])}</code> against base <code>{e(sources[0])}</code>"
    return page("serbench comparison", subtitle, sections)
