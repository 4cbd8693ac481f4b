"""The shared-memory segments a test left named, told apart from those of tests running beside it.

``make test`` runs the suite in two processes (pytest-xdist), and engineers run
suites side by side: a segment named for the few milliseconds before its engine
maps it may belong to another test. A segment's name carries the pid of the
process that made it (``shm.NAME``); those this test left are the new ones whose
maker is this process, one of its descendants, or gone (no one will unlink it).
"""

from __future__ import annotations

import os
from pathlib import Path

import psutil

from serbench.links import shm


def left_named(before: set[Path]) -> set[Path]:
    """Segments named now and not in ``before`` that this process's tree made or that are orphans."""
    ours = {os.getpid(), *(child.pid for child in psutil.Process().children(recursive=True))}
    left = set()
    for path in set(shm.leftovers()) - before:
        maker = int(shm.NAME.fullmatch(path.name).group(1))  # leftovers() lists matching names only
        if maker in ours or not psutil.pid_exists(maker):
            left.add(path)
    return left
