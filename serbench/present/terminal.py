"""What a run and a comparison print on a terminal, from their summaries (``analysis.summary``).

A run prints the answer on one screen by default: per scenario its headline table, the failed
cases, then the decision, last, where the eye lands when the run ends. ``verbose`` prints every
table: each metric's, the scenario's own, the rankings. A comparison prints its verdict rows,
the notes, how to reproduce each regression, and its headline last.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

from serbench.analysis.summary import ComparisonSummary, Ranking, RunSummary, ScenarioTime
from serbench.model.views import Table
from serbench.present.cells import HEADERS, verdict_cells

DECISION_WIDTH = 100
_INDENT = " " * 10
# What a decision's line says of its ratios (``Choice.settled``), short enough that a tie of three
# default backends keeps to one line: "not settled" is within the run's budget of visits.
SETTLED_WORDS = {True: "settled", False: "not settled: tied at this noise", None: ""}
# One line of legend; the full one (what a ratio is of, when rows tie) is docs/guides/choosing.md's.
DECISION_LEGEND = (
    "DECISION: the safe backends to use per workload shape (×r [low, high]: ratio to the first, 95% CI)"
)


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


def titled(t: Table) -> str:
    """A table under its title, its note under it."""
    return f"{t.title}\n{table(t.headers, t.rows)}" + (f"\n{t.note}" if t.note else "")


def tables(summary: RunSummary, verbose: bool = False) -> list[Table]:
    """The tables a run prints: each scenario's headline table; ``verbose``: every table, the
    rankings last."""
    out = []
    for scenario in summary.scenarios:
        out += [] if scenario.headline is None else [scenario.headline]
        if verbose:
            out += scenario.metrics
            out += [Table(f"{scenario.scenario}: {t.title}", t.headers, t.rows, t.note) for t in scenario.own]
    if verbose:
        out += [ranking_table(r) for r in summary.rankings]
    return out


def ranking_table(ranking: Ranking) -> Table:
    """A ranking as a table: place, backend, factor per workload, geometric mean, interval, n."""
    rows = [
        [
            r.place,
            r.label,
            *(f"{r.factors[w]:.3g}" if w in r.factors else "" for w in ranking.workloads),
            "" if r.geomean is None else f"{r.geomean:.3g}",
            r.interval,
            str(r.n),
        ]
        for r in ranking.rows
    ]
    headers = ["rank", "backend", *ranking.workloads, "geomean", "95% CI", "n"]
    return Table(ranking.title, headers, rows, "\n".join(ranking.notes))


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


def decision_block(summary: RunSummary, verbose: bool = False) -> str:
    """The decision of a run in lines of at most ``DECISION_WIDTH`` columns: per shape, per
    scenario, the safe backends to use, whether that was settled, and why: the ratios to the best
    (``verbose``: the best's own values first, which the headline table shows by default); ""
    when the run has nothing to decide."""
    choices = summary.choices
    if not choices:
        return ""
    lines = [DECISION_LEGEND]
    shape = None
    for c in choices:
        if c.shape != shape:
            shape = c.shape
            workloads = ", ".join(dict.fromkeys(w for x in choices if x.shape == shape for w in x.workloads))
            lines.append(f"{shape} ({workloads})")
        status = SETTLED_WORDS[c.settled]
        lines += _packed([c.use_text, status] if status else [c.use_text], f"  {c.where:<7} ")
        reasons = [c.measured, *c.reasons] if verbose and c.measured else c.reasons
        unsafe = [f"faster but unsafe: {c.unsafe[0]}", *c.unsafe[1:]] if c.unsafe else []
        lines += _packed([*reasons, *unsafe])
    return "\n".join(lines)


def time_line(time: Sequence[ScenarioTime]) -> str:
    """Where the run's time went, in one line: per scenario its visits and seconds."""
    spent = ", ".join(f"{t.scenario} {t.visits} visits in {t.seconds:.0f} s" for t in time)
    return f"time: {spent}" if spent else ""


def render(summary: RunSummary, verbose: bool = False) -> str:
    """A run's output: its tables (``tables``), the failed cases, where the time went, then the
    decision."""
    out = [titled(t) for t in tables(summary, verbose)]
    if summary.failed:
        out.append("failed cases:\n" + "\n".join(f"  {r.label}: {r.error}" for r in summary.failed))
    if summary.unsupported:
        lines = [f"  {', '.join(rows)}: {reason}" for reason, rows in summary.unsupported.items()]
        out.append("unsupported (cases not run):\n" + "\n".join(lines))
    last = "\n".join(part for part in (time_line(summary.time), decision_block(summary, verbose)) if part)
    if last:
        out.append(last)
    return "\n\n".join(out)


def comparison_table(summary: ComparisonSummary, changes_only: bool = False) -> str:
    """The terminal report: every row (or every change) worst first, the notes, how to
    reproduce each regression, and the headline."""
    shown = summary.changes if changes_only else summary.rows
    out = [table(HEADERS, [verdict_cells(r) for r in shown])] if shown else []
    if changes_only:
        out.append(f"({len(summary.rows) - len(shown)} row(s) without change not shown)")
    out += summary.notes
    if summary.reproduce:
        out.append("reproduce:")
        out += [f"  {cmd}" for cmd in summary.reproduce]
    out.append(summary.headline)
    return "\n".join(out)
