"""``serbench gate --base REF``: the CI performance gate, in one command.

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
sides are measured alike.
"""

from __future__ import annotations

import argparse
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

from serbench import compare, results
from serbench.isolation import kill_tree
from serbench.stats import summarize

# The default matrix: quick enough for every pull request (DESIGN §5), wide
# enough to cover in-band pickling, zero-copy msgpack and flattened
# multimodal kwargs, on a text request and a 4-image request.
DEFAULT_BACKENDS = "pickle,msgspec-frombuffer,flat-mmk"
DEFAULT_WORKLOADS = "text-sonnet,images-4"
DEFAULT_SCENARIOS = "micro"
DEFAULT_ROUNDS = 15
RUN_TIMEOUT_S = 1800


class GateError(Exception):
    """A step of the gate that could not run (bad ref, git failure, a run that crashed)."""


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
class Side:
    """One side of the comparison: a label, the folder whose code runs, its run options."""

    label: str
    code: Path
    run_args: tuple[str, ...]

    def run(self, *extra: str, **popen: Any) -> subprocess.Popen:
        """``python -m serbench run`` with this side's options and its code first on the path."""
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(self.code), os.environ.get("PYTHONPATH")])),
        }
        command = [sys.executable, "-m", "serbench", "run", *self.run_args, *extra]
        return subprocess.Popen(command, cwd=self.code, env=env, text=True, **popen)

    def has_worker(self) -> bool:
        """Whether this side's ``serbench run`` has ``--worker`` (revisions before it do not)."""
        proc = self.run("--help", stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        return "--worker" in proc.communicate(timeout=RUN_TIMEOUT_S)[0]


def _last_line(path: Path, default: str) -> str:
    lines = path.read_text(errors="replace").strip().splitlines() if path.exists() else []
    return lines[-1] if lines else default


CaseKey = tuple[str, str, str]  # scenario, backend, workload


class Worker:
    """A side's ``serbench run --worker`` process (see ``runner.work``): started once, then
    one case measured per request, so a measurement costs only itself; stderr goes to ``log``."""

    def __init__(self, side: Side, log: Path) -> None:
        self.side, self.log = side, log
        with log.open("w") as err:
            self.proc = side.run("--worker", stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err)
        announced = self._reply()
        if not announced:
            self.close()
            raise self._stopped()
        self.cases: list[CaseKey] = [tuple(key) for key in json.loads(announced)["cases"]]

    def _reply(self) -> str:
        ready, _, _ = select.select([self.proc.stdout], [], [], RUN_TIMEOUT_S)
        return self.proc.stdout.readline().strip() if ready else ""

    def _stopped(self) -> GateError:
        return GateError(
            f"{self.side.label}: serbench run --worker stopped: {_last_line(self.log, 'no reply')}"
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
        """End the worker (its stdin closes); killed if it does not end in time."""
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            kill_tree(self.proc.pid)
            self.proc.wait()


class OneShot:
    """A side measured by a fresh ``serbench run`` of every case per round: for revisions
    without ``--worker``."""

    cases = None  # unknown until run: every round measures them all

    def __init__(self, side: Side, log: Path) -> None:
        self.side, self.log = side, log

    def measure(self, out: Path, case: None = None) -> dict:
        """Every case measured into ``out``; its loaded results."""
        with self.log.open("a") as err:
            proc = self.side.run("--out", str(out), stdout=subprocess.DEVNULL, stderr=err)
        try:
            code = proc.wait(timeout=RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            kill_tree(proc.pid)
            raise GateError(f"{self.side.label}: serbench run took over {RUN_TIMEOUT_S} s") from None
        if code:
            raise GateError(
                f"{self.side.label}: serbench run failed: {_last_line(self.log, f'exit code {code}')}"
            )
        return results.load(out / "results.json")

    def close(self) -> None:
        """Nothing stays running between rounds."""


Measurer = Worker | OneShot


@contextmanager
def measurers(
    sides: Sequence[Side], out: Path, log: Callable[[str], None] = print
) -> Iterator[list[Measurer]]:
    """A worker per side, or a process per round for every side if one of them has no worker
    (the sides are measured alike either way); all stopped on exit."""
    workers = all(side.has_worker() for side in sides)
    if not workers:
        log("note: a side predates `serbench run --worker`: every round is a fresh process (slower, noisier)")
    kind = Worker if workers else OneShot
    started: list[Measurer] = []
    try:
        for side in sides:
            started.append(kind(side, out / f"{side.label}.log"))
        yield started
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
                    name = f"{measurer.side.label}-{r}" + (f"-{k}" if unit else "")
                    runs[index].append(measurer.measure(out / name, unit))
        log(f"round {r}/{rounds}: {time.perf_counter() - start:.1f} s")
    return runs


def _merge_metric(metrics: list[dict]) -> dict:
    """One metric from several rounds: samples concatenated, each round's count kept."""
    values = [v for m in metrics for v in m["values"]]
    return {**summarize(values, metrics[0]["unit"]), "rounds": [len(m["values"]) for m in metrics]}


def _merge_case(recs: list[dict]) -> dict:
    """One record from the same case in several rounds; failed if any round failed."""
    failed = [r["error"] for r in recs if r.get("error")]
    error = f"failed in {len(failed)} of {len(recs)} rounds: {failed[0]}" if failed else None
    names = [n for n in recs[0]["metrics"] if all(n in r["metrics"] for r in recs)]
    metrics = {} if error else {n: _merge_metric([r["metrics"][n] for r in recs]) for n in names}
    info = {**recs[0].get("info", {}), "rounds": len(recs)}
    duration = round(sum(r.get("duration_s", 0.0) for r in recs), 3)
    return results.record(*results.case_key(recs[0]), metrics, info, error, duration)


def merge(docs: Sequence[dict]) -> dict:
    """One results document from several runs of the same matrix (see ``_merge_case``).

    A case missing from some rounds (an interrupted run) is merged from the
    rounds that have it.
    """
    by_case: dict[tuple[str, str, str], list[dict]] = {}
    for doc in docs:
        for rec in doc["records"]:
            by_case.setdefault(results.case_key(rec), []).append(rec)
    first = docs[0]
    return {
        **first,
        "complete": all(d["complete"] for d in docs),
        "finished": docs[-1]["finished"],
        "records": [_merge_case(recs) for recs in by_case.values()],
    }


def say(message: str) -> None:
    """Progress goes to stderr; stdout is the verdict."""
    print(message, file=sys.stderr)


def _run_args(args: argparse.Namespace) -> tuple[str, ...]:
    return ("--backends", args.backends, "--workloads", args.workloads, "--scenarios", args.scenarios)


def cmd_gate(args: argparse.Namespace) -> int:
    """Measure base and working tree interleaved, compare; exit 0, 1 (regression) or 2."""
    from serbench.cli import UsageError

    compare.thresholds(args)  # a malformed threshold fails before minutes of measuring
    if args.rounds < 1:
        raise UsageError("--rounds must be at least 1")
    try:
        repo = repository_root(Path.cwd())
        folder = results.output_folder(args.out, "gate-").resolve()  # runs work in the sides' trees
        with worktree(repo, args.base) as (base_code, commit):
            say(f"gate: base {args.base} ({commit[:12]}) against the working tree of {repo}")
            sides = [Side("base", base_code, _run_args(args)), Side("head", repo, _run_args(args))]
            with measurers(sides, folder, say) as started:
                base_runs, head_runs = interleave(started, args.rounds, folder, say)
    except (GateError, subprocess.TimeoutExpired, OSError) as exc:
        raise UsageError(str(exc)) from None
    base, head = merge(base_runs), merge(head_runs)
    results.write_json_atomic(folder / "base.json", base)
    results.write_json_atomic(folder / "head.json", head)
    if not args.markdown:
        args.markdown = str(folder / "summary.md")
    code = compare.conclude(args, base, head)
    print(f"gate report: {folder} (base.json, head.json, {Path(args.markdown).name})")
    return code


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``serbench gate``."""
    parser = subparsers.add_parser(
        "gate",
        help="CI gate: measure REF and the working tree interleaved, exit 1 on a regression",
        description="Check out REF in a temporary worktree, run base and working tree interleaved "
        "(A B, B A, ...) on this machine, then compare as `serbench compare` does.",
    )
    parser.add_argument("--base", required=True, metavar="REF", help="git revision to compare against")
    parser.add_argument("--backends", default=DEFAULT_BACKENDS, help=f"(default: {DEFAULT_BACKENDS})")
    parser.add_argument("--workloads", default=DEFAULT_WORKLOADS, help=f"(default: {DEFAULT_WORKLOADS})")
    parser.add_argument("--scenarios", default=DEFAULT_SCENARIOS, help=f"(default: {DEFAULT_SCENARIOS})")
    parser.add_argument(
        "--rounds", type=int, default=DEFAULT_ROUNDS, help=f"runs per side (default {DEFAULT_ROUNDS})"
    )
    parser.add_argument(
        "--out", help="folder for the rounds, merged results and summary.md (default reports/gate-<UTC>)"
    )
    compare.add_options(parser)
    parser.set_defaults(func=cmd_gate)
