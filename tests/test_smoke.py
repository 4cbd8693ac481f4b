"""The smoke run of ``make check``: every default scenario on the smallest matrix, as a user runs it.

One backend, the text workload, in a fresh process: the command must exit 0
and every case must pass (a run exits 0 with failed cases listed, so the
records are read). The slow tier measures each scenario in depth.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from serbench.model import results


def test_the_smallest_default_run_passes_every_case(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "serbench", "run", "--backends", "msgspec-frombuffer"]
    command += ["--workloads", "text-sonnet", "--out", str(tmp_path / "run")]
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    records = results.load(tmp_path / "run" / "results.json").records
    assert [f"{r.label}: {r.error}" for r in records if r.error] == []
    assert {"micro", "ipc", "memory"} <= {r.scenario for r in records}
    assert "results: " in done.stdout
