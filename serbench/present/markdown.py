"""Markdown of a run's tables and of a comparison, for a pull request or ``$GITHUB_STEP_SUMMARY``.

Rendered from the summaries (``analysis.summary``), as the terminal and the page are.
"""

from __future__ import annotations

from collections.abc import Sequence

from serbench.analysis.summary import ComparisonSummary, RunSummary
from serbench.present.cells import HEADERS, verdict_cells
from serbench.present.terminal import tables


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """A Markdown table (pipes in cells escaped)."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    return lines + ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows]


def run_markdown(summary: RunSummary) -> str:
    """Every table of a run, the rankings last, as Markdown."""
    return "\n".join(
        line
        for t in tables(summary, verbose=True)
        for line in (f"### {t.title}", "", *table(t.headers, t.rows), *([t.note] if t.note else []), "")
    )


def comparison_markdown(summary: ComparisonSummary, first_line: str | None = None) -> str:
    """A comparison's headline, its changes, notes, how to reproduce each regression, every row
    folded away and the functions that grew; ``first_line`` (how the gate measured) under the
    headline."""
    mark = "❌" if summary.regressions else "⚠️" if summary.inconclusive or not summary.rows else "✅"
    out = [f"## {mark} serbench: {summary.headline}", ""]
    if first_line:
        out += [first_line, ""]
    if summary.changes:
        out += [*table(HEADERS, [verdict_cells(r) for r in summary.changes]), ""]
    out += [f"- {line}" for line in summary.notes]
    if summary.reproduce:
        out += ["", "Reproduce locally:", "", "```", *summary.reproduce, "```"]
    if summary.rows:
        out += ["", f"<details><summary>all {len(summary.rows)} comparisons</summary>", ""]
        out += [*table(HEADERS, [verdict_cells(r) for r in summary.rows]), "", "</details>"]
    if summary.grew:
        out += ["", "Functions that grew (callgrind, self instructions per call):", "", "```", *summary.grew]
        out += ["```"]
    return "\n".join(out) + "\n"
