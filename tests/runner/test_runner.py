"""The runner survives its backends, and its results file keeps the schema."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import msgspec
import pytest
from conftest import children

from serbench.analysis.summary import summarize_run
from serbench.model import results
from serbench.model.errors import CaseFailed
from serbench.model.profiles import PROFILES
from serbench.present.terminal import render
from serbench.runner.matrix import Plan, execute
from serbench.runtime.isolation import Zygote, run_isolated, run_isolated_each

FAST = dataclasses.replace(
    PROFILES["quick"], samples=3, min_sample_s=0.0005, max_metric_s=0.05, case_timeout_s=20
)
SMALL = "images-8:profile=llava"


def _raise() -> None:
    raise KeyError("boom")


def test_isolated_child_errors_become_case_failures() -> None:
    assert run_isolated(sum, ([1, 2],), 10) == 3
    with pytest.raises(CaseFailed, match="KeyError: 'boom'"):
        run_isolated(_raise, (), 10)


def _make_then_hang(folder: Path) -> None:
    """Runs in an isolated child: makes something, then hangs until ended."""
    (folder / "started").touch()
    made = folder / "made"
    made.mkdir()
    try:
        time.sleep(3600)
    finally:
        made.rmdir()


def test_an_ended_child_cleans_up_before_it_is_killed(tmp_path: Path) -> None:
    with pytest.raises(CaseFailed, match="timed out"):
        run_isolated(_make_then_hang, (tmp_path,), 5)
    assert (tmp_path / "started").exists(), "the child never ran"
    assert not (tmp_path / "made").exists(), "killed without its finally"


def _pid_or(action: str, folder: Path) -> int:
    """Runs in an isolated child: raises, hangs (``_make_then_hang``), or answers its pid."""
    if action == "raise":
        _raise()
    if action == "hang":
        _make_then_hang(folder)
    return os.getpid()


def test_children_side_by_side_answer_in_order_each_its_own_outcome(tmp_path: Path) -> None:
    """Two at a time: each call's value or CaseFailed in the order asked, a hung one ended
    (cleaned up) at its own timeout, each call in a child of its own."""
    calls = [("answer", tmp_path), ("raise", tmp_path), ("hang", tmp_path), ("answer", tmp_path)]
    first, raised, hung, last = run_isolated_each(_pid_or, calls, 5, at_once=2)
    assert isinstance(first, int) and isinstance(last, int) and len({first, last, os.getpid()}) == 3
    assert isinstance(raised, CaseFailed) and "KeyError: 'boom'" in str(raised)
    assert isinstance(hung, CaseFailed) and "timed out" in str(hung)
    assert (tmp_path / "started").exists() and not (tmp_path / "made").exists()


def test_the_zygote_forks_each_task_and_ends_with_its_block() -> None:
    with Zygote() as zygote:
        assert zygote.run(sum, ([1, 2],), 10) == 3
        with pytest.raises(CaseFailed, match="KeyError: 'boom'"):
            zygote.run(_raise, (), 10)
        assert zygote.run(os.getpid, (), 10) != zygote.run(os.getpid, (), 10)
        with pytest.raises(CaseFailed, match=r"crashed \(SIGABRT\)"):
            zygote.run(os.abort, (), 10)
        assert zygote.run(sum, ([3, 4],), 10) == 7  # a crash leaves the next task intact
        process = children(recursive=False)[0]
    assert not process.is_running()
    assert zygote._proc.exitcode == 0, "the zygote did not end by itself when its block ended"


@pytest.mark.parametrize(
    ("mode", "error"),
    [
        ("abort", "crashed (SIGABRT)"),
        ("hang", "timed out after 3 s"),
        ("raise", "misbehaving backend raised on purpose"),
    ],
)
def test_a_misbehaving_backend_fails_its_case_and_the_run_goes_on(
    tmp_path: Path, mode: str, error: str
) -> None:
    profile = dataclasses.replace(FAST, case_timeout_s=3)
    spec = f"misbehaving_backends:misbehaving:mode={mode}"
    plan = Plan([spec, "msgspec-frombuffer"], ["text-sonnet", SMALL], ["micro"])
    run = execute(plan, profile, tmp_path / "results.json", ["run"])
    by_case = {(r.backend, r.workload): r for r in run.results.records}
    assert len(by_case) == 4
    assert error in by_case[(spec, SMALL)].error
    assert by_case[(spec, "text-sonnet")].error is None  # it only misbehaves on 8+ images
    assert by_case[("msgspec-frombuffer", SMALL)].error is None
    assert by_case[("msgspec-frombuffer", SMALL)].metrics["decode_s"].median > 0
    assert children() == []  # the hung child was killed
    assert results.load(tmp_path / "results.json").complete is True


def test_backend_failing_conformance_is_not_timed(tmp_path: Path) -> None:
    plan = Plan(["misbehaving_backends:flatten_view"], ["text-sonnet"], ["micro"])
    run = execute(plan, FAST, tmp_path / "r.json", ["run"])
    (rec,) = run.results.records
    assert rec.error.startswith("failed conformance")
    assert "strided-1d" in rec.error
    assert rec.metrics == {}
    assert run.results.backends["misbehaving_backends:flatten_view"].conformance.failed


def test_results_schema(tmp_path: Path) -> None:
    path = tmp_path / "results.json"
    execute(Plan(["pickle", "flat-mmk"], [SMALL], ["micro"]), FAST, path, ["run", "--x"])
    data = results.load(path)
    assert data.schema == results.SCHEMA
    assert data.complete is True and data.finished
    env = data.environment
    assert {"python", "cpu", "git_commit", "command", "allocator_env"} <= set(msgspec.to_builtins(env))
    assert {"torch", "numpy", "msgspec", "pyzmq"} <= set(env.libraries)
    assert env.command[1:] == ["run", "--x"]
    assert data.backends["pickle"].safe is False
    assert data.backends["flat-mmk"].conformance.failed == {}
    written = json.loads(path.read_text())["records"]
    assert len(written) == len(data.records)
    for rec, raw in zip(data.records, written, strict=True):
        metrics = rec.metrics
        assert {
            "encode_s",
            "decode_s",
            "roundtrip_s",
            "copy_s",
            "wire_bytes",
            "frames",
        } <= set(metrics)
        assert "payload_gb_per_s" not in metrics  # a zero-copy round trip transfers nothing
        for name, metric in metrics.items():
            assert {"unit", "values", "median", "ci_low", "ci_high"} <= set(raw["metrics"][name])
            assert metric.ci_low <= metric.median <= metric.ci_high
    assert "pickle (unsafe)" in render(summarize_run(data), verbose=True)


def test_results_written_atomically_leave_no_temp_files(tmp_path: Path) -> None:
    path = tmp_path / "out" / "results.json"
    results.write_text_atomic(path, json.dumps({"a": 1}))
    results.write_text_atomic(path, json.dumps({"a": 2}))
    assert json.loads(path.read_text()) == {"a": 2}
    assert [p.name for p in path.parent.iterdir()] == ["results.json"]


def _serbench(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "serbench", *args], cwd=cwd, capture_output=True, text=True, timeout=300
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "--backends", "nope"], "unknown backend 'nope'"),
        (["run", "--workloads", "images-0"], "unknown workload 'images-0'"),
        (["run", "--scenarios", "macro"], "unknown scenario 'macro'"),
        (["run", "--backends", "msgspec-frombuffer:threshold=-1"], "threshold must be"),
        (["run", "--out", "/proc/no/such"], "cannot create output folder"),
    ],
)
def test_bad_command_lines_are_one_line_and_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    proc = _serbench(*args, cwd=tmp_path)
    assert proc.returncode == 2
    assert message in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "reports").exists()


def test_cli_run_writes_results_and_latest_pointer(tmp_path: Path) -> None:
    proc = _serbench(
        "run",
        "--scenarios",
        "micro",
        "--backends",
        "msgspec-frombuffer,pickle",
        "--workloads",
        "text-sonnet",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert "micro: encode + decode (" in proc.stdout  # the headline table; its unit follows the values
    latest = tmp_path / "reports" / "latest"
    assert latest.is_symlink()
    data = results.load(latest / "results.json")
    assert {r.backend for r in data.records} == {"msgspec-frombuffer", "pickle"}


def test_list_shows_backends_workloads_scenarios(tmp_path: Path) -> None:
    proc = _serbench("list", cwd=tmp_path)
    assert proc.returncode == 0
    for name in ("pickle-oob", "flat-mmk", "images-32", "text-sonnet", "micro"):
        assert name in proc.stdout
    assert proc.stdout.count("NO (runs code from input)") == 5  # the pickles and both SGLang paths
