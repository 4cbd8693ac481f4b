"""Which CPUs the gate's measuring processes run on.

Where the machine has CPUs to spare, the timed measuring processes run on a set
of their own, as pyperf's ``--affinity`` pins its workers: the CPUs the kernel
isolates, else the last two of four or more. Both sides share that set: a base
pinned to one core and a head to another would turn any difference between the
two cores into a verdict. An instruction count does not depend on what else
runs, so each counting side gets a CPU of its own instead (``counting_cpu``).
"""

from __future__ import annotations

import os
from pathlib import Path

ISOLATED_CPUS = Path("/sys/devices/system/cpu/isolated")


def _cpu_list(text: str) -> set[int]:
    """The kernel's CPU list format: ``"2-3,6"`` → {2, 3, 6}."""
    cpus: set[int] = set()
    for part in filter(None, text.strip().split(",")):
        first, _, last = part.partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    return cpus


def measurer_cpus() -> frozenset[int] | None:
    """The CPUs the timed measuring processes are pinned to: the isolated ones we may use, else
    the last two when four or more are ours (leaving the rest to everything else); None (not
    pinned) on a smaller machine, where pinning would only take the scheduler's choice away."""
    available = os.sched_getaffinity(0)
    isolated = _cpu_list(ISOLATED_CPUS.read_text()) & available if ISOLATED_CPUS.exists() else set()
    if isolated:
        return frozenset(isolated)
    return frozenset(sorted(available)[-2:]) if len(available) >= 4 else None


def counting_cpu(side: int) -> frozenset[int] | None:
    """The CPU the ``side``-th counting process runs on, one each where there are several;
    None (not pinned) on a machine with one."""
    available = sorted(os.sched_getaffinity(0))
    return frozenset({available[side % len(available)]}) if len(available) > 1 else None
