"""The CI performance gate's measurement: a base revision against the working tree.

The base revision is checked out in a temporary git worktree (removed
afterwards). Each side — base and working tree — gets one worker, a
``python -m serbench run --worker`` process with that side's code first on
the path (``PYTHONPATH`` and the working directory both point at it, and both
come before the editable install's finder). Then every case is measured on
both sides back to back, round after round, the side that goes first
alternating from case to case and from round to round. On a shared machine
whose speed changes every second or so, the two halves of such a pair mostly
see the same machine; ``serbench.compare`` takes the median of the per-pair
ratios, so the few pairs that straddle a change are outvoted. The rounds of
each side are merged into one results document whose metrics remember the
sample count of each round (``"rounds"``), which is what pairs them.

A base revision without ``--worker`` is measured the older way, a fresh
``serbench run`` of every case per round, and so is head then, so that both
revisions are measured alike. The command, its options and the verdict are
``serbench.commands.gate``'s.

Where the machine has CPUs to spare, the workers run on a set of their own,
as pyperf's ``--affinity`` pins its workers (``worker_cpus``): the CPUs the
kernel isolates, else the last two of four or more. Both sides share that set:
a base pinned to one core and a head to another would turn any difference
between the two cores into a verdict.

``count`` adds instruction counts (``--measure instructions``, see
``serbench.instructions``): after the timed rounds, one ``serbench run
--measure instructions`` per side — one valgrind process measuring every
micro case — both at once, each on a CPU of its own (a count does not depend
on what else runs), once: a count repeats to within 0.1 %, so more rounds
would only repeat it.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from serbench import results
from serbench.errors import GateError
from serbench.isolation import end_tree, end_trees
from serbench.results import CaseKey

RUN_TIMEOUT_S = 1800
COUNTING_GRACE_S = 20.0  # for an ended counting run to stop valgrind, which runs its code slowly
ISOLATED_CPUS = Path("/sys/devices/system/cpu/isolated")


def _cpu_list(text: str) -> set[int]:
    """The kernel's CPU list format: ``"2-3,6"`` → {2, 3, 6}."""
    cpus: set[int] = set()
    for part in filter(None, text.strip().split(",")):
        first, _, last = part.partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    return cpus


def worker_cpus() -> frozenset[int] | None:
    """The CPUs the timed workers are pinned to: the isolated ones we may use, else the last
    two when four or more are ours (leaving the rest to everything else); None (not pinned)
    on a smaller machine, where pinning would only take the scheduler's choice away."""
    available = os.sched_getaffinity(0)
    isolated = _cpu_list(ISOLATED_CPUS.read_text()) & available if ISOLATED_CPUS.exists() else set()
    if isolated:
        return frozenset(isolated)
    return frozenset(sorted(available)[-2:]) if len(available) >= 4 else None


def _git(repo: Path, *args: str) -> str:
    proc = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True)
    if proc.returncode:
        last = (proc.stderr.strip().splitlines() or ["failed"])[-1]
        raise GateError(f"git {' '.join(args)}: {last}")
    return proc.stdout.strip()


def repository_root(start: Path) -> Path:
    """The top of the git working tree that contains ``start``."""
    return Path(_git(start, "rev-parse", "--show-toplevel"))


@contextmanager
def worktree(repo: Path, ref: str) -> Iterator[tuple[Path, str]]:
    """A detached checkout of ``ref`` in a temporary folder, and its commit; removed on exit."""
    try:
        commit = _git(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    except GateError:
        raise GateError(f"{ref!r} is not a commit in {repo} (shallow clone? git fetch --unshallow)") from None
    folder = Path(tempfile.mkdtemp(prefix="serbench-gate-"))
    path = folder / "base"
    _git(repo, "worktree", "add", "--detach", "--quiet", str(path), commit)
    try:
        yield path, commit
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(path)], cwd=repo, capture_output=True)
        shutil.rmtree(folder, ignore_errors=True)
        subprocess.run(["git", "worktree", "prune"], cwd=repo, capture_output=True)


@dataclass(frozen=True)
class Revision:
    """One revision of the comparison: a label (base or head), the folder whose code runs, its run options."""

    label: str
    code: Path
    run_args: tuple[str, ...]

    def run(self, *extra: str, cpus: frozenset[int] | None = None, **popen: Any) -> subprocess.Popen:
        """``python -m serbench run`` with this side's options and its code first on the path,
        pinned to ``cpus`` when given."""
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(self.code), os.environ.get("PYTHONPATH")])),
        }
        command = [sys.executable, "-m", "serbench", "run", *self.run_args, *extra]
        pin = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
        return subprocess.Popen(command, cwd=self.code, env=env, text=True, preexec_fn=pin, **popen)


_HELP: dict[Path, str] = {}  # code folder → its `serbench run --help`


def run_help(revisions: Sequence[Revision]) -> list[str]:
    """Each revision's ``serbench run --help``, which says whether it has ``--worker`` and
    ``--measure`` (older revisions lack them). Those not asked before are asked all at once:
    each answer is an interpreter start with torch's import, seconds."""
    unasked = {r.code: r for r in revisions if r.code not in _HELP}
    quiet = {"stdout": subprocess.PIPE, "stderr": subprocess.DEVNULL}
    asking = {code: r.run("--help", **quiet) for code, r in unasked.items()}
    for code, proc in asking.items():
        _HELP[code] = proc.communicate(timeout=RUN_TIMEOUT_S)[0]
    return [_HELP[r.code] for r in revisions]


def _last_line(path: Path, default: str) -> str:
    lines = path.read_text(errors="replace").strip().splitlines() if path.exists() else []
    return lines[-1] if lines else default


class Worker:
    """A revision's ``serbench run --worker`` process (see ``runner.work``): started once, then
    one case measured per request, so a measurement costs only itself; stderr goes to ``log``."""

    def __init__(self, revision: Revision, log: Path, cpus: frozenset[int] | None = None) -> None:
        """Started; ``ready`` waits until it has announced its cases (start several, then wait)."""
        self.revision, self.log = revision, log
        with log.open("w") as err:
            self.proc = revision.run(
                "--worker", cpus=cpus, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err
            )
        self.cases: list[CaseKey] | None = None

    def ready(self) -> Worker:
        """This worker once it has announced its cases; GateError if it stopped instead."""
        announced = self._reply()
        if not announced:
            self.close()
            raise self._stopped()
        self.cases = [tuple(key) for key in json.loads(announced)["cases"]]
        return self

    def _reply(self) -> str:
        ready, _, _ = select.select([self.proc.stdout], [], [], RUN_TIMEOUT_S)
        return self.proc.stdout.readline().strip() if ready else ""

    def _stopped(self) -> GateError:
        return GateError(
            f"{self.revision.label}: serbench run --worker stopped: {_last_line(self.log, 'no reply')}"
        )

    def measure(self, out: Path, case: CaseKey | None = None) -> dict:
        """``case`` (every case if None) measured into ``out``; its loaded results."""
        request = json.dumps({"out": str(out), **({"case": list(case)} if case else {})})
        try:
            self.proc.stdin.write(request + "\n")
            self.proc.stdin.flush()
            reply = self._reply()
        except OSError:
            reply = ""
        if reply != request:
            raise self._stopped()
        return results.load(out / "results.json")

    def close(self) -> None:
        """End the worker (its stdin closes); terminated, then killed, if it does not end in time."""
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            end_tree(self.proc.pid)
            self.proc.wait()


class OneShot:
    """A revision measured by a fresh ``serbench run`` of every case per round: for revisions
    without ``--worker``."""

    cases = None  # unknown until run: every round measures them all

    def __init__(self, revision: Revision, log: Path, cpus: frozenset[int] | None = None) -> None:
        self.revision, self.log, self.cpus = revision, log, cpus

    def ready(self) -> OneShot:
        """Nothing to wait for: each round starts its own process."""
        return self

    def measure(self, out: Path, case: None = None) -> dict:
        """Every case measured into ``out``; its loaded results."""
        return self.finish(self.start(out), out)

    def start(self, out: Path) -> subprocess.Popen:
        """The run that measures every case into ``out``, started."""
        with self.log.open("a") as err:
            return self.revision.run("--out", str(out), cpus=self.cpus, stdout=subprocess.DEVNULL, stderr=err)

    def finish(self, proc: subprocess.Popen, out: Path) -> dict:
        """Wait for ``proc`` (from ``start``); its loaded results, or GateError."""
        try:
            code = proc.wait(timeout=RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            end_tree(proc.pid)  # ended, not killed: it removes its temporary files
            proc.wait()
            raise GateError(f"{self.revision.label}: serbench run took over {RUN_TIMEOUT_S} s") from None
        if code:
            raise GateError(
                f"{self.revision.label}: serbench run failed: {_last_line(self.log, f'exit code {code}')}"
            )
        return results.load(out / "results.json")

    def close(self) -> None:
        """Nothing stays running between rounds."""


Measurer = Worker | OneShot


@contextmanager
def measurers(
    revisions: Sequence[Revision], out: Path, log: Callable[[str], None] = print
) -> Iterator[list[Measurer]]:
    """A worker per revision, or a process per round for both if one of them has no worker
    (the two are measured alike either way); all stopped on exit."""
    workers = all("--worker" in text for text in run_help(revisions))
    if not workers:
        log("note: a revision predates `serbench run --worker`: a fresh process per round (slower, noisier)")
    kind = Worker if workers else OneShot
    cpus = worker_cpus()
    if cpus:
        log(f"workers pinned to CPU(s) {','.join(map(str, sorted(cpus)))}")
    started: list[Measurer] = []
    try:
        for revision in revisions:  # all started before any is waited for: their starts overlap
            started.append(kind(revision, out / f"{revision.label}.log", cpus))
        yield [measurer.ready() for measurer in started]
    finally:
        for measurer in started:
            measurer.close()


def _units(sides: Sequence[Measurer]) -> list[CaseKey | None]:
    """What one request measures: each case in turn when every side can measure one case
    (their cases, in order, without repeats), else everything at once."""
    if any(m.cases is None for m in sides):
        return [None]
    return list(dict.fromkeys(case for m in sides for case in m.cases))


def interleave(
    sides: Sequence[Measurer], rounds: int, out: Path, log: Callable[[str], None] = print
) -> list[list[dict]]:
    """Measure every side ``rounds`` times, alternating which side goes first (A B, B A, …)
    from case to case and from round to round (round by round only, where a side
    cannot measure one case).

    Returns the results documents of each side, in order; raw measurements stay
    under ``out/<label>-<round>[-<case>]/``. A case one side lacks is measured
    on the other only.
    """
    runs: list[list[dict]] = [[] for _ in sides]
    units = _units(sides)
    for r in range(1, rounds + 1):
        start = time.perf_counter()
        for k, unit in enumerate(units, start=1):
            order = list(enumerate(sides))
            for index, measurer in order if (r + k) % 2 == 0 else order[::-1]:
                if unit is None or unit in measurer.cases:
                    name = f"{measurer.revision.label}-{r}" + (f"-{k}" if unit else "")
                    runs[index].append(measurer.measure(out / name, unit))
        log(f"round {r}/{rounds}: {time.perf_counter() - start:.1f} s")
    return runs


def count(revisions: Sequence[Revision], out: Path, log: Callable[[str], None] = print) -> list[dict] | None:
    """Every case of each revision's options counted once, the revisions at once, each on a CPU
    of its own where there are several; their results, or None (with a note) when a side's
    ``serbench run`` has no ``--measure`` (a revision older than instruction counts)."""
    if not all("--measure" in text for text in run_help(revisions)):
        log("note: a revision predates `serbench run --measure`: instructions not counted")
        return None
    available = sorted(os.sched_getaffinity(0))
    runs = []
    for i, revision in enumerate(revisions):
        cpu = frozenset({available[i % len(available)]}) if len(available) > 1 else None
        runner = OneShot(revision, out / f"{revision.label}-instructions.log", cpu)
        folder = out / f"{revision.label}-instructions"
        runs.append((runner, runner.start(folder), folder))
    start = time.perf_counter()
    try:
        counted = [runner.finish(proc, folder) for runner, proc, folder in runs]
    finally:  # ended with SIGTERM first, so that each removes its dump folder
        end_trees([proc.pid for _, proc, _ in runs if proc.poll() is None], COUNTING_GRACE_S)
        for _, proc, _ in runs:
            proc.wait()
    log(f"instructions counted: {time.perf_counter() - start:.1f} s")
    return counted


def add_counts(timed: dict, counted: dict) -> dict:
    """``timed`` with the metrics that only ``counted`` has added to each of its cases; a case
    whose count failed fails (``serbench compare`` then says whether it did on one side only)."""
    counts = {results.case_key(rec): rec for rec in counted["records"]}
    records = []
    for rec in timed["records"]:
        other = counts.get(results.case_key(rec))
        if other is not None and not rec.get("error"):
            if other.get("error"):
                rec = {**rec, "error": f"counting instructions: {other['error']}"}
            else:
                rec = {**rec, "metrics": {**other["metrics"], **rec["metrics"]}}
        records.append(rec)
    return {**timed, "records": records}


def measure(
    repo: Path,
    base_ref: str,
    run_args: Sequence[str],
    rounds: int,
    out: Path,
    log: Callable[[str], None],
    count_args: Sequence[str] | None = None,
) -> tuple[dict, dict]:
    """``base_ref`` and the working tree of ``repo``, each case measured on both ``rounds``
    times (``run_args`` select the cases); the merged results of base and of head, with
    instruction counts added when ``count_args`` (the options of the counting run) are given.

    GateError for anything that stops the measurement: a bad ref, git, a worker
    that stops or a run that takes too long.
    """
    try:
        with worktree(repo, base_ref) as (base_code, commit):
            log(f"gate: base {base_ref} ({commit[:12]}) against the working tree of {repo}")
            revisions = [
                Revision("base", base_code, tuple(run_args)),
                Revision("head", repo, tuple(run_args)),
            ]
            with measurers(revisions, out, log) as started:
                base_runs, head_runs = interleave(started, rounds, out, log)
            base, head = results.merge(base_runs), results.merge(head_runs)
            if count_args is not None:
                counting = [Revision(r.label, r.code, tuple(count_args)) for r in revisions]
                counted = count(counting, out, log)
                if counted:
                    base, head = add_counts(base, counted[0]), add_counts(head, counted[1])
    except (subprocess.TimeoutExpired, OSError) as exc:
        raise GateError(str(exc)) from None
    return base, head
