"""The stopping rule: a comparison is settled once its interval lies wholly inside the practical
tie or wholly outside it, out of reach once the rest of the budget could not settle it; a group
is done once every comparison between its rows is one or the other; a decision says which it was."""

from __future__ import annotations

import numpy as np
import pytest
from builders import doc, rec

from serbench.analysis import decision
from serbench.analysis.estimates import Estimate
from serbench.analysis.settled import settled, still_open, within_reach
from serbench.analysis.summary import summarize_run
from serbench.model.results import Backend, Record, Results
from serbench.model.stats import summarize
from serbench.present import terminal
from serbench.present.html import run_page

TTFT_TIE = 0.10  # ``ttft_s``'s practical tie


@pytest.mark.parametrize(
    ("low", "high", "expected"),
    [
        (0.95, 1.05, True),  # wholly inside: a tie that more samples keep
        (1 / 1.1, 1.1, True),  # the edges belong inside
        (1.11, 1.30, True),  # wholly beyond: apart
        (0.70, 0.90, True),  # wholly below: apart, faster
        (1.05, 1.15, False),  # across the upper edge: could fall either way
        (0.85, 0.95, False),  # across the lower edge
        (0.80, 1.20, False),  # across both
    ],
)
def test_a_comparison_is_settled_only_wholly_inside_or_wholly_outside_the_tie(
    low: float, high: float, expected: bool
) -> None:
    assert settled(Estimate((low * high) ** 0.5, low, high, 1), TTFT_TIE) is expected


def test_a_comparison_without_an_interval_is_never_settled() -> None:
    assert not settled(Estimate(1.0, None, None, 1), TTFT_TIE)
    assert not settled(Estimate(3.0, None, None, 1), TTFT_TIE)


@pytest.mark.parametrize(
    ("low", "high", "growth", "expected"),
    [
        (0.92, 1.13, 4.0, True),  # a quarter of the budget spent: halved, it fits inside
        (0.92, 1.13, 1.5, False),  # most of it spent: still across the edge
        (1.05, 1.45, 4.0, True),  # halved, wholly beyond
        (0.80, 1.50, 4.0, False),  # too wide for any of it
        (0.95, 1.05, 1.0, True),  # settled already
        # halved in samples left, its interval would just fit inside if its ratio stood still; but
        # the visits to come move the ratio, and more likely than not out of that narrow room
        (0.897, 1.127, 2.0, False),
    ],
)
def test_a_comparison_is_within_reach_when_more_likely_than_not_to_settle_in_the_budget_left(
    low: float, high: float, growth: float, expected: bool
) -> None:
    assert within_reach(Estimate((low * high) ** 0.5, low, high, 1), TTFT_TIE, growth) is expected


def test_no_interval_is_within_reach() -> None:
    assert not within_reach(Estimate(1.0, None, None, 1), TTFT_TIE, 100.0)


def open_in(records: list[Record], growth: float = 1.0, safe: tuple[str, ...] = ()) -> frozenset[str]:
    """``still_open`` of one group's ``records``, the backends in ``safe`` declared safe."""
    return still_open(Results(records=records, backends={b: Backend(safe=True) for b in safe}), growth)


def done(records: list[Record], growth: float = 1.0, safe: tuple[str, ...] = ()) -> bool:
    """Whether the group is done: no backend left open."""
    return not open_in(records, growth, safe)


def _group(factors: dict[str, float], noise: float, visits: int = 6, per_visit: int = 10) -> list[Record]:
    """One ipc group: per backend, TTFT samples around ``factor`` ms over ``visits`` visits."""
    rng = np.random.default_rng(11)
    out = []
    for backend, factor in factors.items():
        values = list(1e-3 * factor * rng.lognormal(0.0, noise, visits * per_visit))
        ttft = summarize(values, "s", [per_visit] * visits)
        out.append(rec({"ttft_s": ttft}, backend, "images-32", scenario="ipc", transport="ipc"))
    return out


def test_a_group_whose_rows_tie_tightly_or_differ_plainly_is_settled() -> None:
    assert done(_group({"a": 1.0, "b": 1.0, "c": 6.5}, noise=0.01))


def test_a_group_settles_nothing_while_a_row_has_fewer_samples_than_a_distribution() -> None:
    """Rows plainly apart, one sample a visit: not settled at 3 or 4 samples, settled from 5 on."""
    few = [_group({"a": 1.0, "c": 6.5}, noise=0.01, visits=v, per_visit=1) for v in (3, 4, 5)]
    assert [done(g) for g in few] == [False, False, True]


def test_a_group_with_a_difference_near_the_tie_is_not_settled() -> None:
    """b 10 % slower than a sits on the tie's edge: its interval reaches across it, and a budget
    large enough to settle it is left."""
    assert not done(_group({"a": 1.0, "b": 1.1, "c": 6.5}, noise=0.01), growth=400.0)


def test_noise_keeps_a_group_open_that_quiet_would_settle() -> None:
    assert done(_group({"a": 1.0, "b": 1.02}, noise=0.01))
    assert not done(_group({"a": 1.0, "b": 1.02}, noise=0.5, visits=3, per_visit=2), growth=1e6)


def test_a_group_is_done_once_its_open_comparisons_are_beyond_the_budget_left() -> None:
    """Near the tie's edge, b's interval still reaches across it: with the budget about to
    double, it would not settle (done); with a budget hundreds of times what was spent, it
    could (visit on). Settled comparisons are done whatever the budget."""
    near = _group({"a": 1.0, "b": 1.1, "c": 6.5}, noise=0.01)
    assert done(near, growth=2.0) and done(near)
    assert not done(near, growth=400.0)
    assert done(_group({"a": 1.0, "b": 1.0, "c": 6.5}, noise=0.01), growth=400.0)


def test_a_row_settled_apart_is_closed_while_a_comparison_near_the_tie_keeps_the_rest_open() -> None:
    """c, 6.5 times the best, is settled apart: visiting it more tells nothing. b, on the tie's
    edge, stays open with the best (a) it is compared against, and with the variant, which
    compares nothing but is measured while the group is."""
    group = _group({"a": 1.0, "b": 1.1, "c": 6.5, "a:threshold=inf": 1.2}, noise=0.01)
    assert open_in(group, growth=400.0) == {"a", "b", "a:threshold=inf"}


def test_a_group_is_done_by_the_comparisons_its_decision_reads_each_row_against_the_best() -> None:
    """Two rows near the tie's edge of each other but both far behind the best (a, safe) leave
    nothing open that the decision reads; with b the best safe row, c against it is open. A
    variant (an option of a backend) is never compared."""
    far = _group({"a": 1.0, "b": 6.0, "c": 6.6, "a:threshold=inf": 1.1}, noise=0.01)
    assert done(far, growth=400.0, safe=("a",))
    assert not done(far, growth=400.0, safe=("b", "c"))


def test_failed_records_compare_nothing_and_one_row_has_nothing_left_to_compare() -> None:
    (one,) = _group({"a": 1.0}, noise=0.01)
    failed = rec({}, "b", "images-32", error="boom", scenario="ipc", transport="ipc")
    assert done([one, failed])
    assert open_in([failed]) == {"b"}  # nothing measured yet: nothing closed


def _decision_doc(factors: dict[str, float]) -> Results:
    data = doc(_group(factors, noise=0.01))
    data.backends = {name: Backend(safe=True) for name in factors}
    return data


@pytest.mark.parametrize(
    ("factors", "expected", "words"),
    [
        ({"a": 1.0, "b": 1.0, "c": 6.5}, True, "; settled"),
        ({"a": 1.0, "b": 1.1}, False, "; not settled: tied at this noise"),
    ],
)
def test_a_decision_says_whether_its_ratios_were_settled_and_the_terminal_says_so(
    factors: dict[str, float], expected: bool, words: str
) -> None:
    data = _decision_doc(factors)
    (found,) = decision.decisions(data)
    assert found.settled is expected
    summary = summarize_run(data)
    assert [c.settled for c in summary.choices] == [expected]
    assert words in terminal.decision_block(summary).replace("\n          ", " ")
    assert f"<small>{words.removeprefix('; ')}</small>" in run_page.render(summary)  # the page too


def test_a_decision_whose_ratios_have_no_interval_says_neither() -> None:
    data = _decision_doc({"a": 1.0, "b": 1.0})
    for r in data.records:
        r.metrics["ttft_s"] = summarize([r.metrics["ttft_s"].median], "s")
    (found,) = decision.decisions(data)
    assert found.settled is None
    assert "settled" not in terminal.decision_block(summarize_run(data))


def test_an_unsettled_tie_of_three_default_backends_keeps_its_line() -> None:
    """The default output fits a screen (tests/present/test_terminal.py) only if the words stay on
    the decision's line: three of the longest default names, tied and not settled."""
    data = _decision_doc({"numpy-intermediate": 1.0, "flat-mmk": 1.0, "msgspec-frombuffer": 1.1})
    summary = summarize_run(data)
    assert [c.settled for c in summary.choices] == [False] and summary.choices[0].tie
    _, _, use, *_ = terminal.decision_block(summary).splitlines()
    assert use.endswith("(tied); not settled: tied at this noise"), use
