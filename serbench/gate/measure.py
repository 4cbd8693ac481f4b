"""The CI performance gate's measurement: a base revision against the working tree.

The base revision is checked out in a temporary git worktree (removed
afterwards). Each side — base and working tree — gets a worker per round, a
``python -m serbench.runner.measurer`` process with that side's code first on the path
(``PYTHONPATH`` and the working directory both point at it, and both come
before the editable install's finder), driven by ``serbench.runner.protocol``: it
says hello (protocol version, capabilities, the dimensions and options it
knows), takes the plan and profile as a ``Setup`` message, checks its
backends once (from the second round on, it is handed its side's first check:
``checked_facts``) and announces its cases (``Case``s, the keys of every round).
Then every case is measured on both sides back to back, round after round,
the side that goes first alternating from case to case and from round to
round. On a shared machine whose speed changes every second or so, the two
halves of such a pair mostly see the same machine; ``serbench.analysis.compare`` takes
the median of the per-pair ratios, so the few pairs that straddle a change
are outvoted. The rounds of each side are merged into one ``Results`` whose
metrics remember the sample count of each round, which is what pairs them.

Why a worker per round (``fresh_rounds``), though a worker could measure every
round: a process keeps for its whole life some of what it draws when it starts.
Six workers of one commit read in-band pickle's images-4 encode at 34-44 ms,
each worker's own measurements within a few percent (not the heap, the hash
seed, glibc's thresholds or the CPU: docs/measurements/gate-verdicts.md). With
one worker per side that draw was a difference between base and head that no
number of rounds averaged away, and an unchanged backend read 1.2x slower or
faster. Fresh workers every round turn it into round-to-round noise, which the
paired ratios and their interval see (pyperf spreads its samples over many
processes for the same reason). It costs a worker start per round (both sides
at once, seconds). It does not make cases independent of each other: an
unchanged backend beside a slowed one still moved in 7 of 20 trials (docs/gate.md,
Limits).

A revision from before ``serbench.runner.measurer`` ends without a hello. Only then is
its ``serbench run --help`` read: with ``--worker`` it is measured by that
(``LegacyWorker``: JSON lines, its options on the command line, its case keys
``[scenario, spec@transport, workload]`` and its schema-1 results converted
to this model, as ``results.load`` converts any); without, by a fresh
``serbench run`` of every case per round (``OneShot``), and so is head then,
so that both revisions are measured alike. The command, its options and the
verdict are ``serbench.cli.gate``'s.

Where the machine has CPUs to spare, the workers run on a set of their own,
as pyperf's ``--affinity`` pins its workers (``worker_cpus``): the CPUs the
kernel isolates, else the last two of four or more. Both sides share that set:
a base pinned to one core and a head to another would turn any difference
between the two cores into a verdict.

Each side runs under a ``Runtime``: an interpreter and a folder put first on
its path (``--base-python``, ``--base-path`` and head's). Without a base
revision both sides run this serbench through a folder that links only its
package (``this_serbench``), so what differs is the package gated, a vLLM
checkout or venv; a worker that ends without a hello there did not start,
since nothing on either side predates the worker.

``count`` adds instruction counts (``--measure instructions``, see
``serbench.probes.instructions``): after the timed rounds, one worker per side set
up with the counting profile, each of which counts every micro case in one
valgrind process of its own (``serbench.runner.measurer.count``), both at once, each on
a CPU of its own (a count does not depend on what else runs), once: a count
repeats to within 0.1 %, so more rounds would only repeat it. A revision from
before the worker counts by ``serbench run --measure instructions``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

import serbench
from serbench.model import results
from serbench.model.errors import GateError
from serbench.model.profiles import Profile
from serbench.model.results import Backend, Case, Results
from serbench.runner import protocol
from serbench.runner.matrix import Plan
from serbench.runner.protocol import Measure, Measured, Ready, Setup, WorkerError, WorkerStopped
from serbench.runtime.isolation import end_tree, end_trees
from serbench.scenarios import SCENARIOS, dimensions

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


def run_options(plan: Plan, profile: Profile) -> tuple[str, ...]:
    """``serbench run``'s options for ``plan`` and ``profile``: what a revision from before
    ``serbench.runner.measurer`` is given, and the command line a worker's results record. Only what
    was chosen: a dimension or option left at its default is not named, so a revision from
    before it still runs."""
    options = ["--backends", ",".join(plan.backends), "--workloads", ",".join(plan.workloads)]
    options += ["--scenarios", ",".join(plan.scenarios)]
    known = dimensions()
    for field, values in plan.dimensions.items():
        options += [known[field].flag, ",".join(map(str, values))]
    flags = {option.key: option.flag for scenario in SCENARIOS.values() for option in scenario.options}
    for key, value in profile.options.items():
        options += [flags[key], protocol.option_text(value)]
    if profile.name != "quick":
        options.append(f"--{profile.name}")
    return tuple(options)


@dataclass(frozen=True)
class Runtime:
    """What one side runs serbench under: its interpreter, and a folder put first on its path
    (``--base-python`` / ``--base-path`` and head's) — how a change to another package, two
    vLLM checkouts or two venvs, is gated with one serbench."""

    python: str = sys.executable
    path: Path | None = None

    def describe(self) -> str:
        """``PYTHON`` and, where given, ``with PATH first on its path``."""
        return self.python + (f", with {self.path} first on its path" if self.path else "")


@dataclass(frozen=True)
class Revision:
    """One side of the comparison: a label (base or head), the folder whose serbench runs, what
    it measures there, and the interpreter and path it runs under."""

    label: str
    code: Path
    plan: Plan
    profile: Profile
    runtime: Runtime = Runtime()

    def start(
        self, command: Sequence[str], cpus: frozenset[int] | None = None, **popen: Any
    ) -> subprocess.Popen:
        """``python COMMAND`` with this side's runtime path and code first on the path, pinned to
        ``cpus`` when given."""
        first = [self.runtime.path, self.code, os.environ.get("PYTHONPATH")]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(str(p) for p in first if p)}
        pin = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
        command = [self.runtime.python, *command]
        return subprocess.Popen(command, cwd=self.code, env=env, preexec_fn=pin, **popen)

    def measurer_module(self) -> str:
        """The module this side's serbench measures in: ``serbench.runner.measurer``, or
        ``serbench.worker`` in a revision from before serbench's folders by concern."""
        return protocol.MODULE if (self.code / "serbench/runner/measurer.py").exists() else "serbench.worker"

    def run(self, *extra: str, cpus: frozenset[int] | None = None, **popen: Any) -> subprocess.Popen:
        """``python -m serbench run`` with this side's plan and profile as options (``run_options``):
        for a revision from before ``serbench.runner.measurer``."""
        command = ["-m", "serbench", "run", *run_options(self.plan, self.profile), *extra]
        return self.start(command, cpus, **popen)

    def setup(self, ask_backends: bool = False) -> Setup:
        """The ``Setup`` message of this side's worker; ``ask_backends``: it asks for its
        backends' facts instead of checking them (``Worker``'s ``facts``)."""
        argv = ["run", *run_options(self.plan, self.profile)]
        plan, profile = protocol.plan_message(self.plan), protocol.profile_message(self.profile)
        return Setup(plan, profile, argv, ask_backends=ask_backends)


_HELP: dict[Path, str] = {}  # code folder → its `serbench run --help`


def run_help(revisions: Sequence[Revision]) -> list[str]:
    """Each revision's ``serbench run --help``, read only for a revision without
    ``serbench.runner.measurer``: it says whether it has ``--worker`` and ``--measure`` (older
    revisions lack them). Those not asked before are asked all at once: each answer is an
    interpreter start with torch's import, seconds."""
    unasked = {r.code: r for r in revisions if r.code not in _HELP}
    quiet = {"stdout": subprocess.PIPE, "stderr": subprocess.DEVNULL, "text": True}
    asking = {code: r.start(["-m", "serbench", "run", "--help"], **quiet) for code, r in unasked.items()}
    for code, proc in asking.items():
        _HELP[code] = proc.communicate(timeout=RUN_TIMEOUT_S)[0]
    return [_HELP[r.code] for r in revisions]


def _last_line(path: Path, default: str) -> str:
    lines = path.read_text(errors="replace").strip().splitlines() if path.exists() else []
    return lines[-1] if lines else default


def _end(proc: subprocess.Popen) -> None:
    """Tell a worker to end (its stdin closes), without waiting for it."""
    with contextlib.suppress(OSError):
        proc.stdin.close()


def _close(proc: subprocess.Popen) -> None:
    """End a worker: its stdin closes; terminated, then killed, if it does not end in time."""
    _end(proc)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        end_tree(proc.pid)
        proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()


def close_all(measurers: Sequence[Measurer]) -> None:
    """Close every measurer, all told to end before any is waited for: a worker's exit tears
    down its zygote and interpreter, and with a worker per side every round, exits waited for
    one after the other would add up per side per round."""
    for measurer in measurers:
        measurer.end()
    for measurer in measurers:
        measurer.close()


class Worker:
    """A revision's ``python -m serbench.runner.measurer`` (``serbench.runner.protocol``): started once, set up,
    then one case measured per request, so a measurement costs only itself; stderr goes to
    ``log``. Given its backends' ``facts`` (an earlier worker's check of the same code), it
    is handed them instead of checking the backends again."""

    def __init__(
        self,
        revision: Revision,
        log: Path,
        cpus: frozenset[int] | None = None,
        facts: Mapping[str, Backend] | None = None,
    ) -> None:
        """Started; ``greet`` reads its hello and sets it up, ``ready`` waits until it has
        announced its cases (start several, then wait)."""
        self.revision, self.log, self.facts = revision, log, facts
        with log.open("w") as err:
            pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "stderr": err}
            self.proc = revision.start(["-m", revision.measurer_module()], cpus, **pipes)
        self.client = protocol.Client(self.proc)
        self.hello: protocol.Hello | None = None
        self.cases: list[Case] | None = None

    def greet(self) -> bool:
        """Read the worker's hello and send its setup; False (the worker ended) when it ended
        without a hello: a revision from before ``serbench.runner.measurer``. GateError for a worker
        of another protocol, of another tree, or without a dimension or option asked for."""
        try:
            hello = self.client.hello(RUN_TIMEOUT_S)
        except (TimeoutError, WorkerError) as exc:
            self.close()
            raise self._stopped(exc) from None
        if hello is None:
            self.close()
            return False
        self.hello = hello
        label, code = self.revision.label, self.revision.code.resolve()
        problem = None
        if hello.protocol != protocol.PROTOCOL:
            problem = f"its worker speaks protocol {hello.protocol}, this gate {protocol.PROTOCOL}"
        elif Path(hello.code).resolve() != (code / "serbench").resolve():
            problem = f"its worker runs the serbench in {hello.code}, not the one in {code}"
        missing = [dimensions()[f].flag for f in self.revision.plan.dimensions if f not in hello.dimensions]
        missing += [f"option {k}" for k in self.revision.profile.options if k not in hello.options]
        if problem is None and missing:
            problem = f"its serbench has no {', '.join(missing)}"
        if problem:
            self.close()
            raise GateError(f"{label}: {problem}")
        try:
            self.client.send(self.revision.setup(ask_backends=self.facts is not None))
        except WorkerError as exc:
            self.close()
            raise self._stopped(exc) from None
        return True

    def ready(self) -> Worker:
        """This worker once it has announced its cases; GateError if it stopped instead."""
        try:
            handed = None if self.facts is None else (lambda specs: {s: self.facts[s] for s in specs})
            self.cases = self.client.reply(Ready, RUN_TIMEOUT_S, backends=handed).cases
        except (TimeoutError, WorkerError) as exc:
            self.close()
            raise self._stopped(exc) from None
        return self

    def _stopped(self, exc: Exception | None = None) -> GateError:
        """What the worker said (its ``Failed``), else the last line of its log (``exc`` None:
        it ended without a word)."""
        if exc is None or isinstance(exc, WorkerStopped):
            reason = _last_line(self.log, "no reply")
        elif isinstance(exc, TimeoutError):
            reason = f"no answer in {RUN_TIMEOUT_S} s"
        else:
            reason = str(exc)
        return GateError(f"{self.revision.label}: serbench worker stopped: {reason}")

    def request(self, out: Path, case: Case | None = None) -> None:
        """Ask for ``case`` (every case if None) measured into ``out``; ``result`` waits for it."""
        try:
            self.client.send(Measure(str(out), case))
        except WorkerError as exc:
            raise self._stopped(exc) from None

    def result(self, out: Path) -> Results:
        """The results of the request for ``out``, once measured."""
        try:
            done = self.client.reply(Measured, RUN_TIMEOUT_S)
        except (TimeoutError, WorkerError) as exc:
            raise self._stopped(exc) from None
        if done.out != str(out):
            raise GateError(f"{self.revision.label}: measured {done.out}, asked for {out}")
        return results.load(out / "results.json")

    def measure(self, out: Path, case: Case | None = None) -> Results:
        """``case`` (every case if None) measured into ``out``; its loaded results."""
        self.request(out, case)
        return self.result(out)

    def end(self) -> None:
        """Tell the worker to end, without waiting (``close`` waits)."""
        _end(self.proc)

    def close(self) -> None:
        """End the worker (its stdin closes); terminated, then killed, if it does not end in time."""
        _close(self.proc)


def schema_1_cases(keys: Sequence[Sequence[str]]) -> list[Case]:
    """Cases as serbench before the typed model named them, ``[scenario, spec[@transport],
    workload]``, read as its results files are read (``results.decode`` of schema 1)."""
    records = [{"scenario": s, "backend": b, "workload": w} for s, b, w in keys]
    document = {"schema": results.SCHEMA_1, "complete": True, "records": records}
    return [record.case for record in results.decode(json.dumps(document), "the worker's cases").records]


class LegacyWorker:
    """A revision's ``serbench run --worker``, from before ``serbench.runner.measurer``: its options on
    the command line, then JSON lines — it announces ``{"cases": [[scenario, spec@transport,
    workload], ...]}``, and echoes each request ``{"out": FOLDER, "case": [...]}`` once
    measured. Its keys are converted to ``Case``s and its schema-1 results on load."""

    def __init__(self, revision: Revision, log: Path, cpus: frozenset[int] | None = None) -> None:
        self.revision, self.log = revision, log
        with log.open("a") as err:  # after the words of its failed serbench.runner.measurer
            pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "stderr": err}
            self.proc = revision.run("--worker", cpus=cpus, **pipes)
        self.channel = protocol.Channel(self.proc.stdout.fileno(), self.proc.stdin.fileno(), Any)
        self.cases: list[Case] | None = None
        self._keys: dict[Case, list[str]] = {}

    def _reply(self) -> str:
        try:
            line = self.channel.read_line(RUN_TIMEOUT_S)
        except TimeoutError:
            line = None
        return "" if line is None else line.decode().strip()

    def _stopped(self) -> GateError:
        return GateError(
            f"{self.revision.label}: serbench run --worker stopped: {_last_line(self.log, 'no reply')}"
        )

    def ready(self) -> LegacyWorker:
        """This worker once it has announced its cases; GateError if it stopped instead."""
        announced = self._reply()
        if not announced:
            self.close()
            raise self._stopped()
        keys = json.loads(announced)["cases"]
        self.cases = schema_1_cases(keys)
        self._keys = dict(zip(self.cases, keys, strict=True))
        return self

    def measure(self, out: Path, case: Case | None = None) -> Results:
        """``case`` (every case if None) measured into ``out``; its loaded results."""
        request = json.dumps({"out": str(out), **({"case": self._keys[case]} if case else {})})
        try:
            self.channel.write_line(request.encode())
            reply = self._reply()
        except OSError:
            reply = ""
        if reply != request:
            raise self._stopped()
        return results.load(out / "results.json")

    def end(self) -> None:
        """Tell the worker to end, without waiting (``close`` waits)."""
        _end(self.proc)

    def close(self) -> None:
        """End the worker (its stdin closes); terminated, then killed, if it does not end in time."""
        _close(self.proc)


class OneShot:
    """A revision measured by a fresh ``serbench run`` of every case per round: for revisions
    without ``--worker``."""

    cases = None  # unknown until run: every round measures them all

    def __init__(self, revision: Revision, log: Path, cpus: frozenset[int] | None = None) -> None:
        self.revision, self.log, self.cpus = revision, log, cpus

    def ready(self) -> OneShot:
        """Nothing to wait for: each round starts its own process."""
        return self

    def measure(self, out: Path, case: None = None) -> Results:
        """Every case measured into ``out``; its loaded results."""
        return self.finish(self.start(out), out)

    def start(self, out: Path) -> subprocess.Popen:
        """The run that measures every case into ``out``, started."""
        with self.log.open("a") as err:
            return self.revision.run("--out", str(out), cpus=self.cpus, stdout=subprocess.DEVNULL, stderr=err)

    def finish(self, proc: subprocess.Popen, out: Path) -> Results:
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

    def end(self) -> None:
        """Nothing stays running between rounds."""

    def close(self) -> None:
        """Nothing stays running between rounds."""


Measurer = Worker | LegacyWorker | OneShot


def greet_all(workers: Sequence[Worker]) -> list[int]:
    """Greet every worker (``Worker.greet``); the indices of those that ended without a hello:
    revisions from before ``serbench.runner.measurer``. Where every side runs the same serbench (another
    package's change is gated) none predates it: a silent worker failed to start (an interpreter
    without serbench's dependencies, a broken path), a GateError with its last words."""
    older = [i for i, worker in enumerate(workers) if not worker.greet()]
    if older and len({worker.revision.code for worker in workers}) == 1:
        raise workers[older[0]]._stopped()
    return older


@contextmanager
def measurers(
    revisions: Sequence[Revision],
    out: Path,
    log: Callable[[str], None] = print,
    facts: Sequence[Mapping[str, Backend] | None] | None = None,
) -> Iterator[list[Measurer]]:
    """A worker per revision (``serbench.runner.measurer``, else the revision's ``serbench run
    --worker``), or a process per round for both if one of them has neither (the two are
    measured alike either way); all stopped on exit. ``facts``: per revision, its backends'
    facts for its worker (``Worker``), or None for a worker that checks them."""
    cpus = worker_cpus()
    if cpus:
        log(f"workers pinned to CPU(s) {','.join(map(str, sorted(cpus)))}")
    handed = list(facts or [None] * len(revisions))
    started: list[Measurer] = []
    try:
        for revision, known in zip(revisions, handed, strict=True):  # all started, then waited for
            started.append(Worker(revision, out / f"{revision.label}.log", cpus, known))
        older = greet_all(started)
        if older and all("--worker" in text for text in run_help([revisions[i] for i in older])):
            for i in older:
                label = revisions[i].label
                log(
                    f"note: {label} predates serbench.runner.measurer: measured by its `serbench run --worker`"
                )
                started[i] = LegacyWorker(revisions[i], out / f"{revisions[i].label}.log", cpus)
        elif older:
            log("note: a revision predates `serbench run --worker`: a process per round (slower, noisier)")
            close_all(started)
            started = [OneShot(revision, out / f"{revision.label}.log", cpus) for revision in revisions]
        yield [measurer.ready() for measurer in started]
    finally:
        close_all(started)


def _units(sides: Sequence[Measurer]) -> list[Case | None]:
    """What one request measures: each case in turn when every side can measure one case
    (their cases, in order, without repeats), else everything at once."""
    if any(m.cases is None for m in sides):
        return [None]
    return list(dict.fromkeys(case for m in sides for case in m.cases))


def one_round(sides: Sequence[Measurer], r: int, out: Path) -> list[list[Results]]:
    """Round ``r``: every case measured on every side, back to back, the side that goes first
    alternating from case to case and from round to round (per round only, where a side
    cannot measure one case). Each side's results, in order; raw measurements stay under
    ``out/<label>-<round>[-<case>]/``. A case one side lacks is measured on the other only."""
    runs: list[list[Results]] = [[] for _ in sides]
    for k, unit in enumerate(_units(sides), start=1):
        order = list(enumerate(sides))
        for index, measurer in order if (r + k) % 2 == 0 else order[::-1]:
            if unit is None or unit in measurer.cases:
                name = f"{measurer.revision.label}-{r}" + (f"-{k}" if unit else "")
                runs[index].append(measurer.measure(out / name, unit))
    return runs


def fresh_rounds(
    revisions: Sequence[Revision],
    rounds: int,
    out: Path,
    log: Callable[[str], None] = print,
    on_round: Callable[[list[list[Results]]], None] | None = None,
) -> list[list[Results]]:
    """Every revision measured ``rounds`` times (``one_round``), each round by workers started
    for it (``measurers``): whatever a process draws when it starts then changes from round
    to round instead of holding for the whole gate, so the paired ratios and their interval
    see it (docs/gate.md, "A fresh worker every round"). Each side's results, in order;
    ``on_round`` sees them after every round, so a caller can keep the rounds done so far
    when a later one is stopped."""
    runs: list[list[Results]] = [[] for _ in revisions]
    facts: list[dict[str, Backend] | None] = [None] * len(revisions)
    for r in range(1, rounds + 1):
        start = time.perf_counter()
        with measurers(revisions, out, log if r == 1 else _quiet, facts) as sides:
            for side, measured in zip(runs, one_round(sides, r, out), strict=True):
                side.extend(measured)
        if r == 1:  # the first round's workers checked; every later one is handed that
            facts = [checked_facts(side) for side in runs]
        log(f"round {r}/{rounds}: {time.perf_counter() - start:.1f} s")
        if on_round is not None:
            on_round(runs)
    return runs


def checked_facts(measured: Sequence[Results]) -> dict[str, Backend] | None:
    """The backends' facts a side's measurements so far recorded (its first round's worker
    checked every backend of its cases), or None where a case's backend has none: the later
    rounds' workers run the same code on the same specimens, so they are handed these instead
    of checking again (a conformance check is about an eighth of a worker's time)."""
    facts = {spec: fact for data in measured for spec, fact in data.backends.items()}
    used = {record.backend for data in measured for record in data.records}
    return facts if facts and used <= facts.keys() else None


def _quiet(message: str) -> None:
    """A log that says nothing: the later rounds' workers repeat the first round's notes."""


def count(
    revisions: Sequence[Revision], out: Path, log: Callable[[str], None] = print
) -> list[Results] | None:
    """Every case of each revision counted once (their profiles ask for instructions), the
    revisions at once, each on a CPU of its own where there are several; their results, or
    None (with a note) when a side cannot count (a revision older than instruction counts).

    A side with ``serbench.runner.measurer`` counts through it (``serbench.runner.measurer.count``), one
    from before through ``serbench run --measure instructions``.
    """
    available = sorted(os.sched_getaffinity(0))

    def cpu(i: int) -> frozenset[int] | None:
        return frozenset({available[i % len(available)]}) if len(available) > 1 else None

    workers: list[Worker] = []
    running: list[subprocess.Popen] = []
    try:
        for i, revision in enumerate(revisions):
            workers.append(Worker(revision, out / f"{revision.label}-instructions.log", cpu(i)))
        running = [worker.proc for worker in workers]
        sides: list[Worker | OneShot] = list(workers)
        older_sides = greet_all(workers)
        older = [revisions[i] for i in older_sides]
        newer = [worker for i, worker in enumerate(workers) if i not in older_sides]
        if not all("--measure" in text for text in run_help(older)) or not all(
            protocol.INSTRUCTIONS in side.hello.capabilities for side in newer
        ):
            log("note: a revision predates `serbench run --measure`: instructions not counted")
            close_all(sides)
            return None
        start = time.perf_counter()
        folders = [out / f"{revision.label}-instructions" for revision in revisions]
        handles: list[subprocess.Popen | None] = [None] * len(sides)
        for i in older_sides:  # started first: a worker is asked once its backends are checked
            sides[i] = OneShot(revisions[i], out / f"{revisions[i].label}-instructions.log", cpu(i))
            handles[i] = sides[i].start(folders[i])
            running.append(handles[i])
        for i, side in enumerate(sides):
            if isinstance(side, Worker):
                side.ready().request(folders[i])
        counted = [
            side.result(folder) if handle is None else side.finish(handle, folder)
            for side, handle, folder in zip(sides, handles, folders, strict=True)
        ]
        close_all(sides)
    finally:  # ended with SIGTERM first, so that each removes its dump folder
        end_trees([proc.pid for proc in running if proc.poll() is None], COUNTING_GRACE_S)
        for proc in running:
            proc.wait()
    log(f"instructions counted: {time.perf_counter() - start:.1f} s")
    return counted


def add_counts(timed: Results, counted: Results) -> Results:
    """``timed`` with the metrics that only ``counted`` has added to each of its cases; a case
    whose count failed fails (``serbench compare`` then says whether it did on one side only)."""
    counts = counted.by_case()
    records = []
    for rec in timed.records:
        other = counts.get(rec.case)
        if other is not None and rec.ok:
            if not other.ok:
                rec = msgspec.structs.replace(rec, error=f"counting instructions: {other.error}")
            else:
                rec = msgspec.structs.replace(rec, metrics={**other.metrics, **rec.metrics})
        records.append(rec)
    return msgspec.structs.replace(timed, records=records)


@contextmanager
def this_serbench() -> Iterator[Path]:
    """A temporary folder holding only this process's ``serbench`` package (a link to it): put on
    another interpreter's path it adds serbench and nothing else of this environment."""
    folder = Path(tempfile.mkdtemp(prefix="serbench-gate-code-"))
    try:
        (folder / "serbench").symlink_to(Path(serbench.__file__).resolve().parent, target_is_directory=True)
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@contextmanager
def serbench_code(
    repo: Path | None, base_ref: str | None, log: Callable[[str], None]
) -> Iterator[tuple[Path, Path]]:
    """The folders whose serbench base and head run: ``base_ref`` checked out beside the working
    tree of ``repo``; without a ref, this serbench on both sides (another package's change is
    gated, by the sides' runtimes)."""
    if base_ref is None:
        with this_serbench() as code:
            yield code, code
        return
    if repo is None:
        raise GateError("--base needs a git repository")
    with worktree(repo, base_ref) as (base_code, commit):
        log(f"gate: base {base_ref} ({commit[:12]}) against the working tree of {repo}")
        yield base_code, repo


def measure(
    repo: Path | None,
    base_ref: str | None,
    plan: Plan,
    profile: Profile,
    rounds: int,
    out: Path,
    log: Callable[[str], None],
    counting: tuple[Plan, Profile] | None = None,
    runtimes: tuple[Runtime, Runtime] = (Runtime(), Runtime()),
) -> tuple[Results, Results]:
    """Base and head, each case of ``plan`` measured on both ``rounds`` times under ``profile``;
    the merged results of base and of head, with instruction counts added when ``counting``
    (the plan and profile of the counting run) is given — or, with no rounds, the counts alone.
    Base runs ``base_ref``'s serbench (``serbench_code``; this one without a ref) under
    ``runtimes[0]``, head the working tree of ``repo`` under ``runtimes[1]``.

    GateError for anything that stops the measurement: a bad ref, git, a worker
    that stops or a run that takes too long, or no rounds and no counts.
    """
    try:
        with serbench_code(repo, base_ref, log) as codes:
            revisions = [
                Revision(label, code, plan, profile, runtime)
                for label, code, runtime in zip(("base", "head"), codes, runtimes, strict=True)
            ]
            for revision in revisions:
                if revision.runtime != Runtime():
                    log(f"gate: {revision.label} runs {revision.runtime.describe()}")
            timed = None
            if rounds:
                base_runs, head_runs = fresh_rounds(revisions, rounds, out, log)
                timed = results.merge(base_runs), results.merge(head_runs)
            counted = None
            if counting is not None:
                counters = [dataclasses.replace(r, plan=counting[0], profile=counting[1]) for r in revisions]
                counted = count(counters, out, log)
    except (subprocess.TimeoutExpired, OSError) as exc:
        raise GateError(str(exc)) from None
    if timed is None:
        if not counted:
            raise GateError("nothing measured: no counts and no rounds (--rounds N or --measure time)")
        return counted[0], counted[1]
    if counted:
        return add_counts(timed[0], counted[0]), add_counts(timed[1], counted[1])
    return timed
