"""The environment block of a results file: what produced these numbers."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import psutil

from serbench import system

LIBRARIES = ("torch", "numpy", "msgspec", "pyzmq", "cloudpickle", "psutil", "serbench")
MALLOC_PREFIXES = ("MALLOC_", "GLIBC_TUNABLES", "OMP_NUM_THREADS", "OPENBLAS_", "MKL_NUM_THREADS")


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def git_commit(cwd: Path | None = None) -> str | None:
    """The checked-out commit (with ``-dirty`` if the tree has changes), if any."""
    here = cwd or Path(__file__).resolve().parent.parent
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, check=True, timeout=10
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=here,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{sha}-dirty" if dirty else sha


def collect(argv: list[str]) -> dict:
    """Versions, CPU, memory, commit, command line, allocator settings and the system check."""
    return {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "memory_bytes": psutil.virtual_memory().total,
        "libraries": {name: _version(name) for name in LIBRARIES},
        "git_commit": git_commit(),
        "command": [Path(sys.argv[0]).name, *argv],
        "allocator_env": {k: v for k, v in os.environ.items() if k.startswith(MALLOC_PREFIXES)},
        "system": system.as_record(system.check()),
    }


# Keys whose difference makes two runs incomparable (the gate's --force overrides).
COMPARABLE_KEYS = ("machine", "cpu", "cpu_count", "python")
