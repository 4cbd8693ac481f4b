"""Verdicts that know their power ("inconclusive", "counts decide") and the exit codes of
compare and the gate as a contract: 0 no regression, 1 regression, 2 could not decide, each 2
one line on stderr (synthetic files, no timings)."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pytest
from builders import doc, metric, rec, samples

from serbench import cli as commands
from serbench.analysis import verdicts
from serbench.analysis.verdicts import Verdict
from serbench.cli import options
from serbench.gate import measure as gate
from serbench.model import results
from serbench.model.errors import UsageError
from serbench.model.stats import Measurement

PAIRS = [15] * 15  # the gate's rounds: 15 paired rounds of 15 samples


def paired(seed: int, factor: float = 1.0, spread: float = 0.01) -> Measurement:
    """15 rounds of 15 samples, each round shifted by the machine's state (log-normal, ``spread``
    between rounds): the gate's merged metric."""
    rng = np.random.default_rng(seed)
    states = rng.lognormal(0.0, spread, 15)
    values = [v for i, s in enumerate(states) for v in samples(seed * 100 + i, factor * s, n=15, sigma=0.01)]
    return metric(values, rounds=PAIRS)


def compared(base: dict[str, Measurement], head: dict[str, Measurement], **kwargs) -> verdicts.Comparison:
    """Base against head as the gate compares its sides: rounds measured side by side."""
    return verdicts.compare(doc([rec(base)]), doc([rec(head)]), side_by_side=True, **kwargs)


# ---------------------------------------------------------------- the rule


@pytest.mark.parametrize(
    ("verdict", "detects", "expected"),
    [
        (Verdict.NO_CHANGE, 0.05, Verdict.NO_CHANGE),  # could have seen 10 %: a real "no change"
        (Verdict.NO_CHANGE, 0.10, Verdict.NO_CHANGE),  # exactly the tolerance: still seen
        (Verdict.NO_CHANGE, 0.27, Verdict.INCONCLUSIVE),  # issue 32's msgspec-frombuffer × text-sonnet decode
        (Verdict.NO_CHANGE, None, Verdict.INCONCLUSIVE),  # no interval at all
        (Verdict.IMPROVEMENT, 0.15, Verdict.INCONCLUSIVE),
        (Verdict.IMPROVEMENT, 0.05, Verdict.IMPROVEMENT),
        (Verdict.FASTER_TOLERATED, 0.15, Verdict.INCONCLUSIVE),
        (Verdict.REGRESSION, 0.60, Verdict.REGRESSION),  # significant: seen however noisy
        (Verdict.SLOWER_TOLERATED, 0.60, Verdict.SLOWER_TOLERATED),
    ],
)
def test_powered_keeps_what_was_seen_and_refuses_what_could_not_be(verdict, detects, expected) -> None:
    assert verdicts.checked_for_power(verdict, detects, 0.10) == expected


def test_a_noisy_paired_row_that_straddles_1_is_inconclusive_and_counted() -> None:
    base = {"decode_s": paired(1, spread=0.25), "encode_s": paired(3)}
    head = {"decode_s": paired(2, 1.10, spread=0.25), "encode_s": paired(4)}
    comparison = compared(base, head)
    rows = {r.metric: r for r in comparison.rows}
    noisy, quiet = rows["decode_s"], rows["encode_s"]
    assert noisy.ci_low < 1 < noisy.ci_high and noisy.detectable > 0.10
    assert noisy.verdict == Verdict.INCONCLUSIVE and not noisy.decisive
    assert noisy.rounds == 15 and noisy.threshold == 0.10
    assert quiet.detectable <= 0.10 and quiet.verdict == Verdict.NO_CHANGE and quiet.decisive
    assert comparison.inconclusive == [noisy] and not comparison.regressions
    assert noisy in comparison.changes  # shown with --changes-only


def test_a_significant_regression_stays_one_however_wide_its_interval() -> None:
    base, head = {"decode_s": paired(1, spread=0.15)}, {"decode_s": paired(2, 1.8, spread=0.15)}
    (row,) = compared(base, head).rows
    assert row.ci_low > 1 and row.detectable > 0.10
    assert row.verdict == Verdict.REGRESSION


def test_counts_and_exact_metrics_are_always_decisive() -> None:
    base = {"decode_instructions": metric([1000.0], "count"), "wire_bytes": metric([100.0], "bytes")}
    head = {"decode_instructions": metric([1000.0], "count"), "wire_bytes": metric([100.0], "bytes")}
    rows = {r.metric: r for r in compared(base, head).rows}
    assert rows["decode_instructions"].verdict == Verdict.NO_CHANGE
    assert rows["decode_instructions"].detectable == 0.01  # a count detects its tolerance
    assert rows["wire_bytes"].verdict == Verdict.NO_CHANGE and rows["wire_bytes"].detectable is None


def test_plain_runs_stay_indicative_and_become_inconclusive_when_too_noisy() -> None:
    """One process a side: a slowdown beyond tolerance is indicative, as before; a row whose
    own samples could not have shown 10 % is inconclusive, not "no change"."""
    base = {"encode_s": metric(samples(1)), "decode_s": metric(samples(3, sigma=0.4))}
    head = {"encode_s": metric(samples(2, 1.3)), "decode_s": metric(samples(4, sigma=0.4))}
    rows = {r.metric: r for r in compared(base, head).rows}
    assert rows["encode_s"].verdict == Verdict.SLOWER_INDICATIVE
    assert rows["decode_s"].verdict == Verdict.INCONCLUSIVE and rows["decode_s"].rounds is None
    assert verdicts.unpaired_verdict(Verdict.INCONCLUSIVE) == Verdict.INCONCLUSIVE


def test_where_counts_were_taken_they_decide_the_cpu_work_the_clock_could_not() -> None:
    noisy = {"decode_s": paired(1, spread=0.25), "encode_s": paired(5, spread=0.25)}
    noisy_head = {"decode_s": paired(2, spread=0.25), "encode_s": paired(6, spread=0.25)}
    counts = {"decode_instructions": metric([1000.0], "count")}
    comparison = compared({**noisy, **counts}, {**noisy_head, **counts})
    rows = {r.metric: r for r in comparison.rows}
    assert rows["decode_s"].verdict == Verdict.COUNTS_DECIDE  # decode was counted
    assert rows["encode_s"].verdict == Verdict.INCONCLUSIVE  # encode was not
    assert comparison.inconclusive == [rows["encode_s"]]
    ways = verdicts.what_would_decide(comparison)
    # counts were taken: --measure instructions is not what would decide encode_s (an ipc case's
    # TTFT parts, say, beside its send and receive counts)
    assert not any(way.startswith("instruction counts") for way in ways)
    assert any("rounds" in way for way in ways) and any("quieter machine" in way for way in ways)
    uncounted = compared(noisy, noisy_head)
    assert verdicts.what_would_decide(uncounted)[0].startswith("instruction counts")


def test_rounds_to_decide_grows_with_the_square_of_the_width() -> None:
    base, head = {"decode_s": paired(1, spread=0.25)}, {"decode_s": paired(2, spread=0.25)}
    (row,) = compared(base, head).rows
    needed = verdicts.rounds_to_decide(row)
    scale = np.log1p(row.detectable) / np.log1p(0.10)
    assert needed == int(np.ceil(15 * scale**2)) and needed > 15


# ---------------------------------------------------------------- the command line


def write(path: Path, data: results.Results) -> str:
    results.save(path, data)
    return str(path)


def noisy_files(tmp_path: Path) -> tuple[str, str]:
    """A gate's merged files with one noisy row (inconclusive) and no regression."""
    base = write(tmp_path / "base.json", doc([rec({"decode_s": paired(1, spread=0.25)})]))
    return base, write(tmp_path / "head.json", doc([rec({"decode_s": paired(2, spread=0.25)})]))


def one_line(err: str) -> str:
    """The single line a command wrote to stderr (never a traceback)."""
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


def test_inconclusive_rows_warn_in_one_line_and_exit_0(tmp_path, capsys) -> None:
    md = tmp_path / "summary.md"
    assert commands.main(["compare", "--side-by-side", *noisy_files(tmp_path), "--markdown", str(md)]) == 0
    captured = capsys.readouterr()
    assert one_line(captured.err).startswith("serbench: warning: 1 inconclusive row(s)")
    assert "no regression in 1 comparison(s); 1 inconclusive" in captured.out
    assert "inconclusive: 1 row(s) could not have seen" in captured.out and "--rounds" in captured.out
    assert captured.out.splitlines()[2].startswith("inconclusive")
    assert md.read_text().startswith("## ⚠️ serbench: no regression in 1 comparison(s); 1 inconclusive")


def test_require_decisive_makes_an_inconclusive_row_exit_2(tmp_path, capsys) -> None:
    assert commands.main(["compare", "--side-by-side", *noisy_files(tmp_path), "--require-decisive"]) == 2
    assert "1 inconclusive row(s) and --require-decisive" in one_line(capsys.readouterr().err)


def test_a_regression_exits_1_even_beside_inconclusive_rows(tmp_path) -> None:
    base = {"decode_s": paired(1, spread=0.25), "encode_s": paired(3)}
    head = {"decode_s": paired(2, spread=0.25), "encode_s": paired(4, 1.3)}
    files = [write(tmp_path / f"{n}.json", doc([rec(m)])) for n, m in (("b", base), ("h", head))]
    assert commands.main(["compare", "--side-by-side", *files, "--require-decisive"]) == 1


def test_no_case_in_common_exits_2(tmp_path, capsys) -> None:
    base = write(tmp_path / "base.json", doc([rec({"encode_s": paired(1)}, backend="pickle")]))
    head = write(tmp_path / "head.json", doc([rec({"encode_s": paired(2)}, backend="flat-mmk")]))
    assert commands.main(["compare", base, head]) == 2
    captured = capsys.readouterr()
    assert "no case in common (base has 1, head 1)" in one_line(captured.err)
    assert "nothing compared" in captured.out and "added: micro flat-mmk w" in captured.out


@pytest.mark.parametrize("where", ["missing folder", "a folder"])
def test_an_unwritable_markdown_or_export_exits_2_before_reading(tmp_path, capsys, where) -> None:
    target = tmp_path / "no-such-folder" / "summary.md" if where == "missing folder" else tmp_path
    for flag in ("--markdown", "--export"):
        # the input files do not exist either: the output is checked first
        assert commands.main(["compare", "a.json", "b.json", flag, str(target)]) == 2
        assert one_line(capsys.readouterr().err).startswith(f"serbench: error: {flag} {target}")


def test_a_markdown_that_fails_to_write_after_all_exits_2_in_one_line(monkeypatch, tmp_path, capsys) -> None:
    files = noisy_files(tmp_path)
    monkeypatch.setattr(options, "check_writable", lambda path, flag: None)
    monkeypatch.setattr("serbench.cli.compare.check_writable", lambda path, flag: None)
    assert commands.main(["compare", *files, "--markdown", str(tmp_path)]) == 2  # a folder
    err = capsys.readouterr().err
    assert one_line(err).startswith(f"serbench: error: --markdown {tmp_path}")


def test_an_unreadable_file_exits_2_in_one_line(tmp_path, capsys) -> None:
    base, _ = noisy_files(tmp_path)
    assert commands.main(["compare", base, str(tmp_path)]) == 2  # a folder, not a file
    assert str(tmp_path) in one_line(capsys.readouterr().err)


@pytest.mark.parametrize(
    ("item", "message"),
    [("nosuch_metric=5%", "unknown metric nosuch_metric"), ("copy_s=5%", "copy_s measures the machine")],
)
def test_an_unknown_or_uncompared_metric_threshold_exits_2(tmp_path, capsys, item, message) -> None:
    assert commands.main(["compare", *noisy_files(tmp_path), "--metric-threshold", item]) == 2
    assert message in one_line(capsys.readouterr().err)


def test_a_metric_of_the_files_that_this_serbench_does_not_know_may_be_thresholded(tmp_path) -> None:
    base = write(tmp_path / "base.json", doc([rec({"future_s": paired(1)})]))
    head = write(tmp_path / "head.json", doc([rec({"future_s": paired(2, 1.3)})]))
    assert commands.main(["compare", "--side-by-side", base, head, "--metric-threshold", "future_s=50%"]) == 0
    assert commands.main(["compare", "--side-by-side", base, head]) == 1


@pytest.mark.parametrize("command", ["run", "report"])
def test_an_unknown_baseline_is_refused_with_exit_2(tmp_path, capsys, command) -> None:
    base, _ = noisy_files(tmp_path)
    argv = (
        ["run", "--scenarios", "micro", "--out", str(tmp_path / "run")]
        if command == "run"
        else ["report", base]
    )
    assert commands.main([*argv, "--baseline", "nosuch"]) == 2
    err = one_line(capsys.readouterr().err)
    assert "--baseline nosuch: no such backend row" in err and "rows: " in err  # names those there are
    assert not (tmp_path / "run").exists()  # refused before anything ran


@pytest.mark.parametrize("row", ["pickle", "pickle@shm", "mine"])
def test_a_baseline_is_any_row_of_the_run_and_nothing_else(row: str) -> None:
    rows = ["pickle", "pickle@shm", "mine"]
    assert options.baseline(argparse.Namespace(baseline=row), rows) == row
    assert options.baseline(argparse.Namespace(baseline=None), rows) == "pickle"
    with pytest.raises(UsageError, match=f"--baseline {row}x"):
        options.baseline(argparse.Namespace(baseline=row + "x"), rows)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--metric-threshold", "nosuch=5%"], "unknown metric nosuch"),
        (["--markdown", "/no/such/folder/summary.md"], "--markdown /no/such/folder/summary.md: no folder"),
        (["--export", "/no/such/folder/bench.json"], "--export /no/such/folder/bench.json: no folder"),
    ],
)
def test_the_gate_refuses_unknown_names_and_unwritable_files_before_measuring(
    monkeypatch, tmp_path, capsys, extra, message
) -> None:
    monkeypatch.chdir(tmp_path)  # not a git repository: had the gate got that far, git would fail

    def measure(*args, **kwargs):
        raise AssertionError("measured despite a bad option")

    monkeypatch.setattr(gate, "measure", measure)
    assert commands.main(["gate", "--base", "HEAD", "--out", str(tmp_path / "out"), *extra]) == 2
    assert message in one_line(capsys.readouterr().err)
