"""What a run and the conformance command print: no third-party warnings, and progress in a log as
plain lines, one per case (subprocesses with every warning shown once; no timings)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from serbench.results import load


def _serbench(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """``python -W default -m serbench ARGS``, stdout and stderr to pipes (not a terminal)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    return subprocess.run(
        [sys.executable, "-W", "default", "-m", "serbench", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_run_warns_nothing_and_logs_one_plain_line_per_case(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = _serbench(
        "run", "--scenarios", "micro", "--backends", "pickle,msgspec-frombuffer", "--workloads", "images-4",
        "--out", str(out), cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "Warning" not in proc.stdout + proc.stderr, proc.stderr
    assert "\r" not in proc.stderr  # no bar frames in a log
    labels = {record.label for record in load(out / "results.json").records}
    assert len(labels) == 2
    lines = [line for line in proc.stderr.splitlines() if line.startswith("[")]
    total = len(lines) - 1  # a line as each case (each visit of a case measured in rounds) begins
    assert lines[-1] == f"[{total}/{total}] done"
    begun = [line.split("] ", 1) for line in lines[:-1]]
    assert [count for count, _ in begun] == [f"[{i}/{total}" for i in range(1, total + 1)]
    assert {label for _, label in begun} == labels


def test_conformance_warns_nothing(tmp_path: Path) -> None:
    # pickle decodes quantized specimens through torch's TypedStorage; msgspec-frombuffer and
    # numpy-intermediate view read-only frames through torch.frombuffer and torch.from_numpy.
    proc = _serbench("conformance", "pickle", "msgspec-frombuffer", "numpy-intermediate", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Warning" not in proc.stdout + proc.stderr, proc.stderr
    assert "numpy-intermediate" in proc.stdout  # it did check them
