"""The gate's paired rounds stop for a case once its rows are settled (``serbench.gate.stopping``):
synthetic measurements from fake measurers, so no process is started."""

from __future__ import annotations

import contextlib
import zlib
from pathlib import Path

import pytest
from builders import doc, metric, rec, samples
from suite_paths import ROOT

from serbench.analysis.verdicts import MIN_PAIRS, Verdict, compare
from serbench.gate import rounds
from serbench.gate.revision import Revision
from serbench.gate.stopping import Stopping
from serbench.model import results
from serbench.model.profiles import PROFILES
from serbench.model.results import Case, Results
from serbench.runner.matrix import Plan

SLOWED = Case("micro", "slowed", "w")  # head twice as slow, little noise: a regression at once
SAME = Case("micro", "same", "w")  # unchanged, little noise: no change within a few rounds
NOISY = Case("micro", "noisy", "w")  # unchanged, so noisy that no number of rounds here decides it
EDGE = Case("micro", "edge", "w")  # slower by the tolerance itself: a verdict, its interval across the edge
# Per case: head's factor and the samples' spread.
SHAPES = {SLOWED: (2.0, 0.01), SAME: (1.0, 0.01), NOISY: (1.0, 1.5), EDGE: (1.1, 0.05)}


class Synthetic:
    """A measurer whose measurement of a case in a round is a fixed draw: the same data for a
    gate that stops and for one that does not."""

    def __init__(self, label: str, calls: list[tuple[str, Case]]) -> None:
        self.revision = Revision(label, ROOT, Plan([], [], []), PROFILES["quick"])
        self.cases, self.calls = list(SHAPES), calls

    def measure(self, out: Path, case: Case) -> Results:
        self.calls.append((self.revision.label, case))
        factor, sigma = SHAPES[case]
        factor = factor if self.revision.label == "head" else 1.0
        seed = zlib.crc32(f"{self.revision.label} {case.backend} {out.name.split('-')[1]}".encode())
        values = samples(seed, factor, n=20, sigma=sigma)
        return doc([rec({"decode_s": metric(values)}, backend=case.backend, workload=case.workload)])


def gate_rounds(monkeypatch, tmp_path: Path, most: int, stopping: Stopping | None) -> list[list[Results]]:
    calls: list[tuple[str, Case]] = []

    @contextlib.contextmanager
    def fake_measurers(revisions, out, log, backends):
        yield [Synthetic(r.label, calls) for r in revisions]

    monkeypatch.setattr(rounds, "measurers", fake_measurers)
    revisions = [Revision(label, ROOT, Plan([], [], []), PROFILES["quick"]) for label in ("base", "head")]
    settled = stopping.settled_cases if stopping is not None else None
    return rounds.fresh_rounds(revisions, most, tmp_path, log=lambda m: None, settled_cases=settled)


def measured_rounds(runs: list[list[Results]]) -> dict[Case, int]:
    return {rec.case: rec.rounds for rec in results.merge(runs[1]).records}


def test_settled_cases_stop_at_the_floor_and_open_ones_go_on(monkeypatch, tmp_path) -> None:
    """Settled rows stop at the floor, and so does a row no rounds left could decide; a decisive
    row whose interval stays across its tolerance's edge takes every round."""
    runs = gate_rounds(monkeypatch, tmp_path, 12, Stopping())
    assert measured_rounds(runs) == {SLOWED: MIN_PAIRS, SAME: MIN_PAIRS, NOISY: MIN_PAIRS, EDGE: 12}
    assert measured_rounds([runs[1], runs[0]]) == measured_rounds(runs)  # both sides alike
    rows = {r.case: r for r in compare(*(results.merge(s) for s in runs), side_by_side=True).rows}
    assert rows[SLOWED].verdict == Verdict.REGRESSION and rows[SLOWED].settled
    assert rows[SAME].verdict == Verdict.NO_CHANGE and rows[SAME].settled
    assert rows[NOISY].verdict == Verdict.INCONCLUSIVE and rows[NOISY].beyond_deciding(12)
    assert not rows[NOISY].beyond_deciding(10_000)  # given rounds enough, it would wait for them
    assert rows[EDGE].decisive and not rows[EDGE].settled and rows[EDGE].rounds == 12


def test_the_rounds_end_once_every_case_is_settled(monkeypatch, tmp_path) -> None:
    monkeypatch.delitem(SHAPES, EDGE)
    runs = gate_rounds(monkeypatch, tmp_path, 12, Stopping())
    assert [len(side) for side in runs] == [len(SHAPES) * MIN_PAIRS] * 2


@pytest.mark.parametrize("most", [3, 7])
def test_stopping_early_keeps_the_verdicts_of_every_round(monkeypatch, tmp_path, most) -> None:
    """The same data: a gate that stops each settled case gives each row the verdict a gate that
    took every round gives it; below the floor nothing stops."""
    stopped = gate_rounds(monkeypatch, tmp_path / "stopped", most, Stopping())
    full = gate_rounds(monkeypatch, tmp_path / "full", most, None)
    verdicts = [
        {r.case: r.verdict for r in compare(*(results.merge(s) for s in runs), side_by_side=True).rows}
        for runs in (stopped, full)
    ]
    assert verdicts[0] == verdicts[1]
    assert verdicts[0][SLOWED] == Verdict.REGRESSION
    if most < MIN_PAIRS:
        assert measured_rounds(stopped) == dict.fromkeys(SHAPES, most)
