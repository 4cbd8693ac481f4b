"""Nothing outlives a run over shared memory, however it ends.

Each test starts ``serbench run --scenarios ipc --transport shm`` in a
session of its own, waits until both the frontend (the case's process) and
the engine map the region — by then its name is already unlinked, which is
what makes the rest safe — and ends the run one way: to the end, Ctrl-C,
SIGTERM, kill -9 of the frontend, kill -9 of the engine. Afterwards no
serbench segment may be left under /dev/shm and no process of the session
may be alive.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from as_user import session_processes
from segments import left_named

from serbench.links import shm
from serbench.model import results

START_TIMEOUT_S = 240  # imports, the conformance check, the request pool on a busy 2-core box
EXIT_TIMEOUT_S = 60
SHM_MAPPING = f"/dev/shm/{shm.PREFIX}"


def _mappers(sid: int) -> dict[str, psutil.Process]:
    """The session's processes that map a serbench region: "frontend" (read-write), "engine" (read-only),
    once the name is unlinked (the kernel marks the mapping deleted)."""
    found = {}
    for proc in session_processes(sid):
        try:
            maps = Path(f"/proc/{proc.pid}/maps").read_text()
        except OSError:
            continue
        for line in maps.splitlines():
            if SHM_MAPPING in line and line.endswith("(deleted)"):
                found["frontend" if line.split()[1].startswith("rw") else "engine"] = proc
    return found


def _start(tmp_path: Path, prompts: int, step_ms: int) -> subprocess.Popen:
    command = [sys.executable, "-m", "serbench", "run", "--scenarios", "ipc", "--transport", "shm"]
    command += ["--backends", "msgspec-frombuffer", "--workloads", "images-4", "--out", str(tmp_path / "run")]
    command += ["--num-prompts", str(prompts), "--step-ms", str(step_ms)]
    with (tmp_path / "stderr.txt").open("w") as stderr:
        return subprocess.Popen(
            command, cwd=tmp_path, start_new_session=True, stdout=subprocess.DEVNULL, stderr=stderr
        )


def _wait_for_both_mappings(proc: subprocess.Popen) -> dict[str, psutil.Process]:
    deadline = time.monotonic() + START_TIMEOUT_S
    while len(found := _mappers(proc.pid)) < 2:
        assert proc.poll() is None, f"serbench run ended early with code {proc.returncode}"
        assert time.monotonic() < deadline, "the shm session never started"
        time.sleep(0.05)
    return found


ENDINGS = {
    "ctrl-c": lambda proc, found: os.killpg(proc.pid, signal.SIGINT),
    "sigterm": lambda proc, found: proc.send_signal(signal.SIGTERM),
    "kill-9-frontend": lambda proc, found: found["frontend"].kill(),
    "kill-9-engine": lambda proc, found: found["engine"].kill(),
}


@pytest.mark.parametrize("how", ["normal", *ENDINGS])
def test_nothing_is_left_behind(tmp_path: Path, how: str) -> None:
    before = set(shm.leftovers())
    # To the end: few short requests. Ended midway: more and longer than it can finish first.
    proc = _start(tmp_path, 5, 5) if how == "normal" else _start(tmp_path, 200, 20)
    try:
        _wait_for_both_mappings(proc)
        if how != "normal":
            ENDINGS[how](proc, _mappers(proc.pid))
        proc.wait(timeout=START_TIMEOUT_S if how == "normal" else EXIT_TIMEOUT_S)
        leftovers = session_processes(proc.pid)
    finally:
        for left in session_processes(proc.pid):
            left.kill()
        proc.wait()
    log = (tmp_path / "stderr.txt").read_text()[-2000:]
    assert leftovers == []
    assert not left_named(before), "shared-memory segment left behind"
    if how in ("ctrl-c", "sigterm"):
        assert proc.returncode == {"ctrl-c": 130, "sigterm": 143}[how], log  # 128 + the signal
        return
    assert proc.returncode == 0, log
    (record,) = results.load(tmp_path / "run" / "results.json").records
    assert (record.backend, record.transport) == ("msgspec-frombuffer", "shm")
    if how == "normal":
        assert record.error is None and record.metrics["payload_gb_per_s"].values
    else:
        assert record.error, "a killed side must fail its case"
