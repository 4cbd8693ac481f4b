"""Is this machine fit to benchmark on? A system check in the spirit of ``pyperf system``.

Each check reads one setting the kernel or psutil exposes and says whether it
suits timing: the CPU frequency governor and turbo (frequency that moves
under the measurement), the load and the other busy processes (a neighbour
taking the CPU), ASLR (pyperf keeps it fully on: results then hold for any
layout), and swap in use (page faults that have nothing to do with the
code). A setting the machine does not expose (a VM without cpufreq) is
reported as unknown, not as a problem. ``serbench system`` prints the checks;
every run records them in its environment (``environment.collect``) and the
report shows their warnings.

Nothing here changes a setting: tuning (``pyperf system tune``) needs root
and is the operator's call.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

import psutil

from serbench.model.results import Check

CPU = Path("/sys/devices/system/cpu")
BUSY_PERCENT = 10.0  # a process above this share of one CPU is "busy"
BUSY_SAMPLE_S = 0.2
LOAD_PER_CPU = 0.5  # a 1-minute load above this per CPU warns


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def governor() -> Check:
    """Every CPU's cpufreq governor: ``performance`` keeps the frequency where it is."""
    found = {_read(p) for p in CPU.glob("cpu[0-9]*/cpufreq/scaling_governor")} - {None}
    if not found:
        return Check("CPU frequency governor", "not exposed (no cpufreq: a VM?)", None)
    value = ", ".join(sorted(found))
    ok = found == {"performance"}
    return Check("CPU frequency governor", value, ok, "" if ok else "set 'performance' (pyperf system tune)")


def turbo() -> Check:
    """Turbo boost (Intel pstate ``no_turbo`` or the generic ``cpufreq/boost``): a clock that
    rises and falls with temperature and load."""
    no_turbo = _read(CPU / "intel_pstate" / "no_turbo")
    boost = _read(CPU / "cpufreq" / "boost")
    if no_turbo is not None:
        on = no_turbo == "0"
    elif boost is not None:
        on = boost == "1"
    else:
        return Check("turbo boost", "not exposed", None)
    return Check("turbo boost", "on" if on else "off", not on, "turn it off for stable timings" if on else "")


def load() -> Check:
    """The 1-minute load average against the CPUs: other work competes for them."""
    load1, cpus = os.getloadavg()[0], os.cpu_count() or 1
    ok = load1 <= LOAD_PER_CPU * cpus
    advice = "" if ok else "other work is running: timings will be noisy"
    return Check("load average (1 min)", f"{load1:.2f} on {cpus} CPUs", ok, advice)


def aslr() -> Check:
    """``kernel.randomize_va_space``: pyperf's choice is 2 (full), so results hold for any layout."""
    value = _read(Path("/proc/sys/kernel/randomize_va_space"))
    if value is None:
        return Check("ASLR", "not exposed", None)
    names = {"0": "off", "1": "partial", "2": "full"}
    ok = value == "2"
    return Check("ASLR", names.get(value, value), ok, "" if ok else "full randomization (2) is the norm")


def swap() -> Check:
    """Swap in use: pages of the measured processes may be out, and faulting them in is noise."""
    used = psutil.swap_memory().used
    ok = used == 0
    return Check("swap in use", f"{used / 2**20:.0f} MiB", ok, "" if ok else "free memory or turn swap off")


def busy_processes(sample_s: float = BUSY_SAMPLE_S) -> Check:
    """Other processes using more than ``BUSY_PERCENT`` of a CPU over ``sample_s``."""
    mine = {os.getpid(), *(p.pid for p in psutil.Process().children(recursive=True))}
    procs = [p for p in psutil.process_iter(["name"]) if p.pid not in mine]
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.cpu_percent(None)
    time.sleep(sample_s)
    busy = []
    for proc in procs:
        try:
            share = proc.cpu_percent(None)
        except psutil.Error:
            continue
        if share > BUSY_PERCENT:
            busy.append((share, f"{proc.info['name']} ({proc.pid}) {share:.0f}%"))
    busy.sort(reverse=True)
    value = ", ".join(text for _, text in busy[:5]) or "none"
    return Check("other busy processes", value, not busy, "they compete for the CPUs" if busy else "")


def check() -> list[Check]:
    """Every check, in the order ``serbench system`` prints them."""
    return [governor(), turbo(), load(), aslr(), swap(), busy_processes()]


def warnings(checks: list[Check]) -> list[str]:
    """One line per check that failed (not the unknown ones)."""
    return [f"{c.name}: {c.value}" + (f" — {c.advice}" if c.advice else "") for c in checks if c.ok is False]
