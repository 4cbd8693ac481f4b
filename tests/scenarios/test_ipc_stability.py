"""scripts/ipc_stability.py: two runs' within-run ratios, and whether their own intervals meet."""

from __future__ import annotations

import by_path

stability = by_path.load("scripts/ipc_stability.py", "ipc_stability")
Ratio = stability.Ratio


def test_runs_whose_intervals_overlap_disagree_within_their_own_noise() -> None:
    wide = Ratio(1.00, 0.90, 1.12, 6), Ratio(1.11, 1.05, 1.20, 6)
    apart = Ratio(1.00, 0.97, 1.03, 12), Ratio(1.11, 1.08, 1.15, 12)
    assert stability.intervals_meet(*wide) and stability.intervals_meet(*reversed(wide))
    assert not stability.intervals_meet(*apart) and not stability.intervals_meet(*reversed(apart))


def test_a_ratio_without_an_interval_never_counts_as_within_its_noise() -> None:
    assert not stability.intervals_meet(Ratio(1.0, None, None, 0), Ratio(1.0, 0.9, 1.1, 6))
    assert Ratio(1.0, None, None, 0).interval() == "-"
    assert Ratio(1.0, 0.9, 1.1, 6).interval() == "[0.900, 1.100]"
