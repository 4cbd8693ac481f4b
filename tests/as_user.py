"""serbench started in a subprocess as a user starts it: the commands whose printed output a test reads."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psutil


def serbench_command(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """``python -W default -m serbench ARGS``, every warning shown once (``PYTHONWARNINGS``
    dropped), stdout and stderr to pipes (not a terminal)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    command = [sys.executable, "-W", "default", "-m", "serbench", *args]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def session_processes(sid: int) -> list[psutil.Process]:
    """Processes still alive in the run's session (its whole tree, even reparented ones)."""
    alive = []
    for proc in psutil.process_iter():
        try:
            if os.getsid(proc.pid) == sid and proc.status() != psutil.STATUS_ZOMBIE:
                alive.append(proc)
        except (ProcessLookupError, psutil.NoSuchProcess):
            pass
    return alive
