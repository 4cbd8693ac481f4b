"""A comparison's verdict rows as cells: what the terminal's table and the Markdown's share."""

from __future__ import annotations

from serbench.analysis.summary import VerdictRow
from serbench.model.units import format_value

# "rounds": the gate's paired rounds behind a row, and whether they settled it;
# "detects": the smallest slowdown each comparison would have caught (its minimum detectable effect).
HEADERS = ["verdict", "case", "metric", "base", "head", "head/base", "95% CI", "rounds", "detects"]


def format_ratio(row: VerdictRow) -> tuple[str, str]:
    """The ratio and its interval as text, e.g. ``1.124`` and ``[1.080, 1.170]``; for a count
    counted under several layouts, its band (``band 0.12%``)."""
    if row.ratio is None:
        return "—", ""
    if row.band is not None:
        return f"{row.ratio:.3f}", f"band {row.band:.2%}"
    if row.exact:
        return f"{row.ratio:.3f}", "exact"
    interval = "" if row.low is None else f"[{row.low:.3f}, {row.high:.3f}]"
    return f"{row.ratio:.3f}", interval


def rounds_cell(row: VerdictRow) -> str:
    """The paired rounds a row took and whether they settled it (``5 settled``, ``15 open``);
    empty for a row without pairs (exact, counted, or two plain runs)."""
    if row.rounds is None:
        return ""
    return f"{row.rounds} {'settled' if row.settled else 'open'}"


def verdict_cells(row: VerdictRow) -> list[str]:
    """One row's cells under ``HEADERS``: a verdict that fails the gate in capitals, and says so
    where the growth was the interpreter's lookups alone."""
    ratio, interval = format_ratio(row)
    verdict = row.verdict.value.upper() if row.bad else row.verdict.value
    return [
        f"{verdict} (interpreter lookups only)" if row.lookups_only else verdict,
        row.case.label,
        row.metric,
        format_value(row.base, row.unit),
        format_value(row.head, row.unit),
        ratio,
        interval,
        rounds_cell(row),
        "" if row.detectable is None else f"{row.detectable:.1%}",
    ]
