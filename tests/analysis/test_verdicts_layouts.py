"""A count counted under two interpreter layouts: its band, and a verdict only beyond the larger of
the tolerance and the band (``verdicts.layout_band``); how its row reads."""

from __future__ import annotations

import pytest
from builders import doc, metric, rec

from serbench.analysis import verdicts
from serbench.analysis.summary import summarize_comparison
from serbench.analysis.verdicts import Verdict
from serbench.model.metrics import metric as metric_facts
from serbench.present import cells
from serbench.present.html import comparison_page

TOLERANCE = metric_facts("encode_instructions").tolerance


def counted(*layouts: float) -> dict:
    """A count per layout, as ``gate.counting.count_layouts`` merges them."""
    return {"encode_instructions": metric(list(layouts), "count", [1] * len(layouts))}


def row(base: dict, head: dict) -> verdicts.MetricComparison:
    (found,) = verdicts.compare(doc([rec(base)]), doc([rec(head)]), side_by_side=True).rows
    return found


def test_a_change_within_the_layouts_band_is_no_regression_and_one_beyond_it_is() -> None:
    # base moved 3 % between its layouts: a 2 % rise is within that band, whatever the tolerance
    within = row(counted(100_000, 103_000), counted(102_500, 103_600))
    assert within.band == pytest.approx(0.03) and within.threshold == pytest.approx(0.03)
    assert within.verdict == Verdict.SLOWER_TOLERATED and within.detectable == pytest.approx(0.03)
    beyond = row(counted(100_000, 103_000), counted(106_000, 106_500))
    assert beyond.verdict == Verdict.REGRESSION


def test_a_band_below_the_tolerance_leaves_the_tolerance_and_one_count_has_no_band() -> None:
    steady = row(counted(100_000, 100_100), counted(102_000, 102_050))  # +2 %, a band of 0.1 %
    assert steady.band == pytest.approx(0.001) and steady.threshold == TOLERANCE
    assert steady.verdict == Verdict.REGRESSION
    single = row(counted(100_000), counted(102_000))
    assert single.band is None and single.verdict == Verdict.REGRESSION


def test_the_row_shows_its_band_and_says_when_lookups_alone_grew() -> None:
    base, head = doc([rec(counted(100_000, 100_100))]), doc([rec(counted(102_000, 102_050))])
    comparison = verdicts.compare(base, head, side_by_side=True)
    (found,) = comparison.rows
    lookups = [(found.case, found.metric)]
    (shown,) = summarize_comparison(comparison, base, head, lookups=lookups).rows
    verdict, *_, interval, rounds, detects = cells.verdict_cells(shown)
    assert verdict == "REGRESSION (interpreter lookups only)" and interval == "band 0.10%"
    assert rounds == "" and detects == f"{TOLERANCE:.1%}"
    (plain,) = summarize_comparison(comparison, base, head).rows
    assert cells.verdict_cells(plain)[0] == "REGRESSION"


def test_the_comparison_page_shows_the_band_and_the_rounds_the_terminal_shows() -> None:
    """The HTML page reads the same cells as the terminal: a count's band, a timing's paired
    rounds and whether they settled it."""
    paired = {"encode_s": metric([1.0e-6] * 5, "s", rounds=[1] * 5)}
    base = doc([rec({**counted(100_000, 100_100), **paired})])
    head = doc([rec({**counted(102_000, 102_050), **paired})])
    summary = summarize_comparison(verdicts.compare(base, head, side_by_side=True), base, head)
    page = comparison_page.render_comparison(summary, ("base.json", "head.json"))
    assert "band 0.10%" in page
    timed = next(r for r in summary.rows if r.metric == "encode_s")
    assert cells.rounds_cell(timed) and f"<td>{cells.rounds_cell(timed)}</td>" in page
