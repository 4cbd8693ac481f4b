"""How serbench starts the processes a measurement needs, and what it says when one ends.

Every process a case starts inside serbench (its isolated child, the zygote, a local engine, a
fan-out worker, an RSS side, the unix-socket reader) is forked from ``FORK``: the child starts
with the parent's imports and workload already in memory, and ``spawn`` or ``forkserver`` would
re-import the ``__main__`` script, which breaks under pytest and ``python -c``. A child that must
not outlive whoever started it asks the kernel for a signal when that parent dies
(``die_with_parent``). Processes that exec another program (valgrind, the gate's measurers) use
``subprocess`` instead.
"""

from __future__ import annotations

import ctypes
import multiprocessing as mp
import os
import signal
import sys

FORK = mp.get_context("fork")

PR_SET_PDEATHSIG = 1  # prctl's option number, from <linux/prctl.h>


def die_with_parent(parent: int, signum: signal.Signals) -> None:
    """Have ``signum`` sent to this process when its parent (pid ``parent``) dies; sent now if it
    died already, before the request was made. Call it first thing in a forked child, after
    installing the handler ``signum`` should run."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signum, 0, 0, 0)
    if os.getppid() != parent:
        os.kill(os.getpid(), signum)


def signal_name(exitcode: int) -> str:
    """The signal that ended a process, from its negative ``exitcode`` (``SIGKILL``)."""
    try:
        return signal.Signals(-exitcode).name
    except ValueError:
        return f"signal {-exitcode}"


def exit_reason(exitcode: int | None) -> str:
    """How a process ended, in words: ``killed by SIGKILL`` or ``exited with code 1``."""
    if exitcode is not None and exitcode < 0:
        return f"killed by {signal_name(exitcode)}"
    return f"exited with code {exitcode}"
