"""scripts/run_stability.py: two runs' decisions and within-run ratios, each ratio against the other
run's interval."""

from __future__ import annotations

import by_path
import numpy as np
from builders import doc, rec

from serbench.model.results import Backend, save
from serbench.model.stats import summarize

stability = by_path.load("scripts/run_stability.py", "run_stability")
Ratio = stability.Ratio


def test_each_ratio_must_lie_inside_the_other_runs_interval() -> None:
    close = Ratio(1.00, 0.90, 1.12, 6), Ratio(1.05, 0.95, 1.20, 6)
    overlapping = Ratio(1.00, 0.96, 1.06, 6), Ratio(1.10, 1.05, 1.16, 6)  # the intervals only meet
    assert stability.each_inside(*close, "ttft_s") and stability.each_inside(*reversed(close), "ttft_s")
    assert not stability.each_inside(*overlapping, "ttft_s")
    assert not stability.each_inside(*reversed(overlapping), "ttft_s")


def test_a_ratio_without_an_interval_agrees_only_within_its_tie_with_another_without() -> None:
    assert not stability.each_inside(Ratio(1.0, None, None, 0), Ratio(1.0, 0.9, 1.1, 6), "copies")
    assert stability.each_inside(Ratio(2.0, None, None, 0), Ratio(2.015, None, None, 0), "copies")  # 1 %
    assert not stability.each_inside(Ratio(2.0, None, None, 0), Ratio(2.05, None, None, 0), "copies")
    assert Ratio(1.0, None, None, 0).interval() == "-"
    assert Ratio(1.0, 0.9, 1.1, 6).interval() == "[0.900, 1.100]"


def _run(tmp_path, name: str, factors: dict[str, float]):
    """A results file of one ipc group: per backend, TTFT samples around ``factor`` ms in 6 visits."""
    rng = np.random.default_rng(5)
    records = []
    for backend, factor in factors.items():
        values = list(1e-3 * factor * rng.lognormal(0.0, 0.01, 60))
        records.append(rec({"ttft_s": summarize(values, "s", [10] * 6)}, backend, "images-4", scenario="ipc"))
    data = doc(records)
    data.backends = {backend: Backend(safe=True) for backend in factors}
    path = tmp_path / f"{name}.json"
    save(path, data)
    return path


def test_two_runs_that_agree_exit_0_and_a_moved_ratio_exits_1(tmp_path, capsys) -> None:
    a = _run(tmp_path, "a", {"x": 1.0, "y": 2.0})
    assert stability.main(["--results", str(a), str(_run(tmp_path, "b", {"x": 1.0, "y": 2.0}))]) == 0
    out = capsys.readouterr().out
    assert "1 of 1 decisions the same" in out
    assert "1 of 1 ratios each inside the other run's interval; 0 of 0 without one" in out
    assert "1 of 1 within 10% of each other" in out
    moved = _run(tmp_path, "c", {"x": 1.0, "y": 2.3})  # the same decision, a ratio 15 % apart
    assert stability.main(["--results", str(a), str(moved)]) == 1
    out = capsys.readouterr().out
    assert "1 of 1 decisions the same" in out and "0 of 1 ratios each inside" in out
