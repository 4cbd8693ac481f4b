"""Measure the gate itself: false alarms on A/A trials, detection of known slowdowns.

Each trial is one gate run as ``serbench gate`` does it (``serbench.gate.rounds``:
a measurer per side and round, every case on base and head back to back),
except that both sides run this working tree and differ only in what their
slots are slowed by: each slot is a ``serbench.testing:slowed`` backend built by
a module of the trial's own (``gate_quality_slots``), a copy per side first on
that side's path (``serbench.gate.revision.Runtime``). Slot 0 is an A/A trial,
every other slot an A/B trial slowed by a FACTOR. A trial "alarms" when any row
of its case is a regression: what makes ``serbench gate`` exit 1. With
``--measure instructions`` a trial is the gate's counts under its two layouts
(``serbench.gate.counting.count_layouts``); ``--layout-change`` adds to head's slots module
what changes nothing but the interpreter's layout (a class nobody uses, or a method rebound).
The load average of each trial is recorded: how much noise the gate stayed quiet on. Each
case's rounds stop once its rows are settled (``serbench.gate.stopping``), as the gate's
do; ``--all-rounds`` takes every round, as the gate did before.

    python scripts/gate_quality.py --trials 20 --rounds 15 --out reports/gate-quality
    python scripts/gate_quality.py --analyze reports/gate-quality --rounds 5   # as if 5 rounds
    python scripts/gate_quality.py --measure instructions --trials 20 --out reports/gate-quality-instructions
    python scripts/gate_quality.py --bystanders pickle,flat-mmk --factors 1.10   # cross-case isolation
    python scripts/gate_quality.py --factors 1.5 --trials 3 --all-rounds   # every round: the time it took
    python scripts/gate_quality.py --measure instructions --factors 1.02 --layout-change class
    python scripts/gate_quality.py --measure instructions --scenarios ipc --workloads text-sonnet \
        --factors 1.02 --out reports/gate-quality-ipc   # both sides of the ipc path, counted
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import msgspec

from serbench.analysis import attribution, verdicts
from serbench.analysis.verdicts import Verdict
from serbench.cli import gate as gate_command
from serbench.gate.counting import count_layouts
from serbench.gate.revision import Revision, Runtime
from serbench.gate.rounds import fresh_rounds
from serbench.gate.stopping import Stopping
from serbench.model import results
from serbench.model.profiles import PROFILES, Profile
from serbench.model.results import Results
from serbench.probes import instructions
from serbench.runner.matrix import Plan

REPO = Path(__file__).resolve().parent.parent
SLOTS = "gate_quality_slots"  # the module whose copy on each side builds its slots
# What ``--layout-change`` adds to head's slots module: code that runs at import and changes no
# slot's work, only where the interpreter's types and names land (issue 66's false alarm).
LAYOUT_CHANGES = {
    "class": "\n\nclass Unrelated:\n    def method(self):\n        return None\n",
    "rebind": "\n\nSlowed.decode = Slowed.decode\n",
}


def slot_spec(backend: str, slot: int, trial: int) -> str:
    """Slot ``slot``'s spec, the same on both sides (what it is slowed by is each side's
    ``gate_quality_slots``); the trial's number in it gives every trial a process history of
    its own (other spec strings allocated before each case), so counted trials are not one
    layout repeated."""
    return f"{SLOTS}:slot:base={backend},slot={trial}.{slot}"


def slots_module(factors: Sequence[float], extra: str = "") -> str:
    """The source of one side's ``gate_quality_slots``: slot ``k`` slowed by ``factors[k]``, then
    ``extra`` (a ``LAYOUT_CHANGES`` entry)."""
    return (
        f'"""gate_quality.py\'s slots for one side: slot k slowed by FACTORS[k]."""\n\n'
        "from serbench.testing import Slowed, slowed\n\n"
        f"FACTORS = {list(factors)!r}\n\n\n"
        "def slot(base: str, slot: str):\n"
        "    return slowed(base, str(FACTORS[int(slot.rpartition('.')[2])]), slot)\n"
        f"{extra}"
    )


def side(
    label: str, folder: Path, factors: Sequence[float], plan: Plan, profile: Profile, extra: str = ""
) -> Revision:
    """One side of a trial: this working tree, with its own ``gate_quality_slots`` (kept in
    ``folder/<label>-slots/``) first on its path."""
    modules = folder / f"{label}-slots"
    modules.mkdir(parents=True, exist_ok=True)
    results.write_text_atomic(modules / f"{SLOTS}.py", slots_module(factors, extra))
    return Revision(label, REPO, plan, profile, Runtime(path=modules))


def _only(doc: Results, backend: str) -> Results:
    """``doc`` reduced to one backend's records."""
    records = [r for r in doc.records if r.backend == backend]
    return msgspec.structs.replace(doc, records=records)


def _write_json(path: Path, data: dict) -> None:
    results.write_text_atomic(path, json.dumps(data, indent=1))


def _measured(
    sides: list[Revision], folder: Path, rounds: int, measure: str, stopping: Stopping | None
) -> tuple[Results, Results]:
    """Base and head results as the gate gets them: interleaved rounds merged (each case's until
    ``stopping`` settles it; every round without it), or the counts."""
    if measure == "instructions":
        counted = count_layouts(sides, folder, log=print)
        if counted is None:
            raise SystemExit("this serbench cannot count instructions")
        return counted[0], counted[1]
    settled = stopping.settled_cases if stopping is not None else None
    base_runs, head_runs = fresh_rounds(sides, rounds, folder, log=lambda m: None, settled_cases=settled)
    return results.merge(base_runs), results.merge(head_runs)


def run_trial(
    folder: Path,
    trial: int,
    backend: str,
    factors: list[float],
    workloads: str,
    rounds: int,
    measure: str = "time",
    bystanders: Sequence[str] = (),
    scenarios: Sequence[str] = ("micro",),
    stopping: Stopping | None = None,
    layout_change: str = "",
) -> dict:
    """One gate run (interleaved rounds, or instruction counts); both sides' results kept in ``folder``.
    ``bystanders``: backends measured unchanged on both sides beside the slowed slots."""
    profile = PROFILES["quick"].with_options(measure=measure)
    head_factors = [1.0, *factors]
    slots = [slot_spec(backend, slot, trial) for slot in range(len(head_factors))]
    chosen = [w.strip() for w in workloads.split(",") if w.strip()]
    plan = Plan([*slots, *bystanders], chosen, list(scenarios))
    sides = [
        side("base", folder, [1.0] * len(head_factors), plan, profile),
        side("head", folder, head_factors, plan, profile, LAYOUT_CHANGES.get(layout_change, "")),
    ]
    load_before = os.getloadavg()[0]
    folder.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    base, head = _measured(sides, folder, rounds, measure, stopping)
    meta = {
        "load_before": load_before,
        "load_after": os.getloadavg()[0],
        "cpus": os.cpu_count(),
        "rounds": rounds,
        "rounds_taken": max((rec.rounds or 0 for rec in head.records), default=0) if measure == "time" else 0,
        "measure": measure,
        "wall_s": round(time.perf_counter() - start, 1),
    }
    results.save(folder / "base.json", base)
    results.save(folder / "head.json", head)
    facts = {
        "trial": trial,
        "backend": backend,
        "factors": factors,
        "slots": slots,
        "bystanders": list(bystanders),
        "layout_change": layout_change,
    }
    _write_json(folder / "trial.json", {**facts, **meta})
    return meta


def load_side(folder: Path, label: str, rounds: int | None) -> Results:
    """One side of a stored trial, merged: every round, or only the first ``rounds``
    (a round is ``<label>-<round>-<case>/`` per case, or ``<label>-<round>/`` for all)."""
    if rounds is None:
        return results.load(folder / f"{label}.json")
    return results.merge(
        [
            results.load(path / "results.json")
            for r in range(1, rounds + 1)
            for path in sorted(folder.glob(f"{label}-{r}-*")) or [folder / f"{label}-{r}"]
        ]
    )


class Flag(NamedTuple):
    """A row the gate flagged as a regression; for a count row, the functions whose self
    instructions per call grew most between the sides' kept profiles (``None``: none kept)."""

    metric: str
    workload: str
    slowdown: float
    grown: tuple[str, ...] | None = ()

    def __str__(self) -> str:
        row = f"{self.metric} {self.workload} {self.slowdown:.4f}"
        if self.grown is None:
            return f"{row} [no profiles]"
        return f"{row} [grew most: {', '.join(self.grown)}]" if self.grown else row


def evaluate(folder: Path, max_regression: float, rounds: int | None = None) -> dict[float, list[Flag]]:
    """Factor → the regressions the gate flags for it in this trial."""
    trial = json.loads((folder / "trial.json").read_text())
    base, head = load_side(folder, "base", rounds), load_side(folder, "head", rounds)
    flagged = {}
    for factor, spec in zip([1.0, *trial["factors"]], trial["slots"], strict=True):
        comparison = verdicts.compare(
            _only(base, spec),
            _only(head, spec),
            max_regression,
            side_by_side=True,  # the gate's rounds: base and head measured in pairs
        )
        flagged[factor] = [
            Flag(r.metric, r.workload, r.slowdown, _grown(folder, r, spec)) for r in comparison.regressions
        ]
    return flagged


def _grown(folder: Path, row: verdicts.MetricComparison, spec: str) -> tuple[str, ...] | None:
    """For a flagged count row: the three functions whose self instructions per call grew most
    between the two sides' kept profiles (what the gate's summary names first); ``()`` for a
    timed row, ``None`` where a side kept no profile."""
    if row.metric not in attribution.COUNTED:
        return ()
    case = msgspec.structs.replace(row.case, backend=spec)
    sides = [
        attribution.per_call(instructions.profile_folder(folder / f"{label}-instructions", case), row.metric)
        for label in ("base", "head")
    ]
    if None in sides:
        return None
    _, grown = attribution.attribute(*sides, top=3)
    return tuple(g.function for g in grown)


def disturbed(folder: Path, max_regression: float, rounds: int | None = None) -> list[str]:
    """The rows of the trial's bystanders (backends unchanged on both sides, measured in the same
    measurers as the slowed slots) that the gate labels a regression or an improvement: each one is
    a case whose timing another case's slowdown moved (issue 32's cross-case isolation)."""
    trial = json.loads((folder / "trial.json").read_text())
    base, head = load_side(folder, "base", rounds), load_side(folder, "head", rounds)
    moved = []
    for backend in trial.get("bystanders", []):
        rows = verdicts.compare(
            _only(base, backend), _only(head, backend), max_regression, side_by_side=True
        ).rows
        moved += [
            f"{backend} {r.metric} {r.workload} {r.verdict} {r.slowdown:.4f}"
            for r in rows
            if r.verdict in (Verdict.REGRESSION, Verdict.IMPROVEMENT)
        ]
    return moved


# Verdicts that say nothing got worse: a row that could not have seen its tolerance must not get them.
CLEARING = (Verdict.NO_CHANGE, Verdict.IMPROVEMENT, Verdict.FASTER_TOLERATED)


def honesty(folder: Path, max_regression: float, rounds: int | None = None) -> dict[float, dict[str, int]]:
    """Factor → how its rows were labelled in this trial: ``rows``, ``inconclusive``,
    ``overclaimed`` (a clearing verdict on a row whose ``detects`` is above its threshold or
    unknown: what the gate must never say) and ``cleared`` (any clearing verdict: in an A/B
    slot, a slowdown the gate said was not there)."""
    trial = json.loads((folder / "trial.json").read_text())
    base, head = load_side(folder, "base", rounds), load_side(folder, "head", rounds)
    scores = {}
    for factor, spec in zip([1.0, *trial["factors"]], trial["slots"], strict=True):
        rows = verdicts.compare(
            _only(base, spec),
            _only(head, spec),
            max_regression,
            side_by_side=True,  # the gate's rounds: base and head measured in pairs
        ).rows
        sampled = [r for r in rows if not r.exact]
        scores[factor] = {
            "rows": len(sampled),
            "inconclusive": sum(r.verdict == Verdict.INCONCLUSIVE for r in sampled),
            "overclaimed": sum(
                r.verdict in CLEARING and (r.detectable is None or r.detectable > r.threshold)
                for r in sampled
            ),
            "cleared": sum(r.verdict in CLEARING for r in sampled),
        }
    return scores


def report(out: Path, max_regression: float, rounds: int | None = None) -> dict:
    """Alarm counts per factor over every stored trial, printed and written to ``summary.json``."""
    trials = sorted(p for p in out.glob("trial-*") if (p / "trial.json").exists())
    if not trials:
        raise SystemExit(f"no finished trials in {out}")
    counts: dict[float, int] = {}
    labels: dict[float, dict[str, int]] = {}
    loads = []
    moved_trials = 0
    named: collections.Counter[tuple[float, str, str]] = collections.Counter()
    for folder in trials:
        meta = json.loads((folder / "trial.json").read_text())
        loads.append((meta["load_before"] + meta["load_after"]) / 2)
        flagged = evaluate(folder, max_regression, rounds)
        for factor, regressions in flagged.items():
            counts[factor] = counts.get(factor, 0) + bool(regressions)
            named.update(
                (factor, f"{f.metric} {f.workload}", ", ".join(f.grown))
                for f in regressions
                if factor > 1 and f.grown
            )
        for factor, scored in honesty(folder, max_regression, rounds).items():
            total = labels.setdefault(factor, dict.fromkeys(scored, 0))
            for key, value in scored.items():
                total[key] += value
        marks = " ".join(f"{f:g}:{'X' if r else '.'}" for f, r in flagged.items())
        print(f"{folder.name} (load {loads[-1]:.1f}): {marks}")
        if flagged[1.0]:
            print(f"  false alarm: {'; '.join(map(str, flagged[1.0]))}")
        moved = disturbed(folder, max_regression, rounds)
        moved_trials += bool(moved)
        if moved:
            print(f"  bystander moved: {'; '.join(moved)}")
    n = len(trials)
    reliable = [f for f, c in sorted(counts.items()) if f > 1 and c >= 0.95 * n]
    summary = {
        "trials": n,
        "max_regression": max_regression,
        "rounds_scored": rounds or "all",
        "false_alarms_aa": counts[1.0],
        "detections": {f"{f:g}": c for f, c in sorted(counts.items()) if f > 1},
        "smallest_reliably_detected": reliable[0] if reliable else None,
        "labels": {f"{f:g}": scored for f, scored in sorted(labels.items())},
        "bystanders_moved_trials": moved_trials,
        "grew_most": [
            {"factor": f, "row": row, "functions": functions, "trials": c}
            for (f, row, functions), c in sorted(named.items())
        ],
        "load_average": {"min": min(loads), "mean": sum(loads) / n, "max": max(loads)},
        "cpus": os.cpu_count(),
    }
    scored = f"first {rounds} rounds" if rounds else "all rounds"
    print(f"A/A: alarm in {counts[1.0]}/{n} trials (threshold {max_regression:.0%}, {scored})")
    for factor, hits in summary["detections"].items():
        print(f"A/B slowed {factor}x: flagged in {hits}/{n} trials")
    print(f"smallest slowdown flagged in >=95% of trials: {summary['smallest_reliably_detected']}")
    print(f"trials where an unchanged bystander's row read regression or improvement: {moved_trials}/{n}")
    for factor, scored in summary["labels"].items():
        print(
            f"rows of {factor}x: {scored['rows']}, inconclusive {scored['inconclusive']}, "
            f"said no change / faster {scored['cleared']}, "
            f"of which could not have seen it {scored['overclaimed']}"
        )
    for entry in summary["grew_most"]:
        print(
            f"flagged at {entry['factor']:g}x, {entry['row']}: grew most {entry['functions']} "
            f"({entry['trials']}/{n} trials)"
        )
    load = summary["load_average"]
    print(f"1-min load average during trials: {load['min']:.1f}..{load['max']:.1f} (mean {load['mean']:.1f})")
    _write_json(out / "summary.json", summary)
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument(
        "--rounds",
        type=int,
        help=f"rounds per side (default {gate_command.DEFAULT_ROUNDS}); with --analyze: score only the first "
        "ROUNDS of each stored trial, as if the gate had stopped there (default: all)",
    )
    parser.add_argument("--backend", default="msgspec-frombuffer", help="the backend that gets slowed")
    parser.add_argument("--workloads", default=gate_command.DEFAULT_WORKLOADS)
    parser.add_argument(
        "--factors", help="slowdowns to detect (default 1.03,1.05,1.07,1.10; instructions 1.005,1.01,1.02)"
    )
    parser.add_argument("--measure", choices=("time", "instructions"), default="time")
    parser.add_argument(
        "--scenarios",
        default="micro",
        help="micro (default), or ipc with --measure instructions: both sides' paths",
    )
    parser.add_argument(
        "--bystanders",
        default="",
        help="backends measured unchanged on both sides beside the slowed ones (e.g. pickle,flat-mmk): "
        "does a slowdown in one case move another's verdict?",
    )
    parser.add_argument(
        "--max-regression", default="10%", help="of the timings (counts have their own tolerance)"
    )
    parser.add_argument(
        "--layout-change",
        choices=sorted(LAYOUT_CHANGES),
        default="",
        help="add to head's slots module a change of the interpreter's layout alone",
    )
    parser.add_argument(
        "--all-rounds",
        action="store_true",
        help="take every round, as the gate did before it stopped measuring settled cases",
    )
    parser.add_argument("--out", default="reports/gate-quality")
    parser.add_argument("--analyze", metavar="DIR", help="only re-evaluate the trials stored in DIR")
    args = parser.parse_args(argv)
    max_regression = verdicts.parse_tolerance(args.max_regression)
    if args.analyze:
        report(Path(args.analyze), max_regression, args.rounds)
        return 0
    out = Path(args.out)
    rounds = args.rounds or gate_command.DEFAULT_ROUNDS
    default = "1.005,1.01,1.02" if args.measure == "instructions" else "1.03,1.05,1.07,1.10"
    factors = [float(f) for f in (args.factors or default).split(",")]
    bystanders = [b.strip() for b in args.bystanders.split(",") if b.strip()]
    stopping = None if args.all_rounds else Stopping(max_regression)
    for t in range(args.trials):
        folder = out / f"trial-{t + 1:02d}"
        scenarios = [s.strip() for s in args.scenarios.split(",") if s.strip()]
        meta = run_trial(
            folder,
            t + 1,
            args.backend,
            factors,
            args.workloads,
            rounds,
            args.measure,
            bystanders,
            scenarios,
            stopping,
            args.layout_change,
        )
        flagged = evaluate(folder, max_regression)
        hits = " ".join(f"{f:g}:{'X' if r else '.'}" for f, r in flagged.items())
        taken = f", {meta['rounds_taken']} rounds" if meta["rounds_taken"] else ""
        load = f"load {meta['load_before']:.1f}, {meta['wall_s']:.0f} s{taken}"
        print(f"trial {t + 1}/{args.trials} ({load}): {hits}", file=sys.stderr)
    report(out, max_regression)
    return 0


if __name__ == "__main__":
    sys.exit(main())
