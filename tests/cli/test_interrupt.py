"""Ctrl-C or SIGTERM in the middle of ``serbench run``: a valid, incomplete results file and no orphans.

The run's second case hangs on purpose (``misbehaving:mode=hang`` on 8 images),
so the signal lands while a child is busy (or being forked); the first case
is finished and must be in the file. The fork itself is the worst moment: an
interrupt handled inside an at-fork hook is printed and dropped by Python.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
from as_user import session_processes
from suite_paths import BACKENDS

from serbench.model import results
from serbench.runner.matrix import sigterm_as_interrupt
from serbench.runtime.isolation import run_isolated

PLUGINS = BACKENDS
HANGING = "misbehaving_backends:misbehaving:mode=hang"
START_TIMEOUT_S = 240  # imports, conformance check and one quick micro case on a busy 2-core box
EXIT_TIMEOUT_S = 60


def _records(path: Path) -> int:
    """Records in the results file so far (0 while it is absent)."""
    try:
        return len(json.loads(path.read_text())["records"])
    except (OSError, ValueError):
        return 0


def _wait_for(condition: Callable[[], bool], proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while not condition():
        assert proc.poll() is None, f"serbench run ended early with code {proc.returncode}"
        assert time.monotonic() < deadline, "no case finished in time"
        time.sleep(0.1)


def _interrupt(proc: subprocess.Popen, how: str) -> None:
    """Ctrl-C as a terminal sends it (the whole process group), or SIGTERM to the runner alone."""
    if how == "ctrl-c":
        os.killpg(proc.pid, signal.SIGINT)
    else:
        proc.send_signal(signal.SIGTERM)


def _reap(sid: int) -> None:
    """Kill what a failed run left in its session, so that one failure does not leak processes."""
    for proc in session_processes(sid):
        proc.kill()


@pytest.mark.parametrize("how", ["ctrl-c", "sigterm"])
def test_interrupted_run_leaves_incomplete_results_and_no_orphans(tmp_path: Path, how: str) -> None:
    out, log = tmp_path / "run", tmp_path / "stderr.txt"
    path = out / "results.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(PLUGINS), os.environ.get("PYTHONPATH", "")])}
    command = [sys.executable, "-m", "serbench", "run", "--scenarios", "micro", "--out", str(out)]
    command += ["--backends", HANGING, "--workloads", "text-sonnet,images-8:profile=llava"]
    with log.open("w") as stderr:  # a file, not a pipe: an orphan holding a pipe would hang the test
        proc = subprocess.Popen(
            command, cwd=tmp_path, env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=stderr
        )
    try:
        _wait_for(lambda: _records(path) >= 1, proc)
        _interrupt(proc, how)
        proc.wait(timeout=EXIT_TIMEOUT_S)
        leftovers = session_processes(proc.pid)
    finally:
        _reap(proc.pid)
        proc.wait()
    assert proc.returncode == {"ctrl-c": 130, "sigterm": 143}[how], log.read_text()[-2000:]
    assert "interrupted: partial results (complete: false)" in log.read_text()
    assert "text-sonnet" in (out / "index.html").read_text()  # the report of the cases so far
    data = results.load(path)
    assert data.complete is False and data.finished is None
    assert [(r.workload, r.error) for r in data.records] == [("text-sonnet", None)]
    assert data.records[0].metrics["decode_s"].median > 0
    assert leftovers == []


_pending_at_fork: list[int] = []


def _signal_self_after_fork() -> None:
    """An at-fork hook: the interrupt arrives exactly while the runner forks a case."""
    if _pending_at_fork:
        os.kill(os.getpid(), _pending_at_fork.pop())


os.register_at_fork(after_in_parent=_signal_self_after_fork)


def _interrupt_during_fork(signum: int) -> str:
    """Runs in a forked child, single-threaded like the runner (a process-directed
    signal goes to any thread not blocking it: in pytest's threads it would escape
    the hold); says whether the interrupt came through and the case was killed."""
    signal.signal(signal.SIGINT, signal.default_int_handler)  # run_isolated's children ignore Ctrl-C
    _pending_at_fork.append(signum)
    try:
        with sigterm_as_interrupt():
            run_isolated(time.sleep, (5,), 60)
    except KeyboardInterrupt:
        return "interrupted" if not psutil.Process().children(recursive=True) else "interrupted, case left"
    return "interrupt lost"


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_an_interrupt_arriving_during_fork_is_not_lost(signum: int) -> None:
    assert run_isolated(_interrupt_during_fork, (signum,), 60) == "interrupted"
