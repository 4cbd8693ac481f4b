"""``serbench gate --base REF``: the CI performance gate, in one command; ``--base-path`` /
``--base-python`` and head's gate a change to another package (vLLM) with one serbench."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from serbench.analysis.verdicts import MIN_PAIRS
from serbench.cli import options
from serbench.cli.compare import check_outputs, conclude
from serbench.cli.options import (
    add_comparison_options,
    add_dimension_options,
    check_metric_names,
    tolerances,
)
from serbench.model import metrics, results
from serbench.model.errors import EXIT_INTERRUPTED, EXIT_TERMINATED, Terminated, UsageError
from serbench.model.profiles import Profile
from serbench.probes import instructions

if TYPE_CHECKING:
    from serbench.gate.revision import Runtime
    from serbench.runner.matrix import Plan

# The default matrix: quick enough for every pull request, wide enough to
# cover in-band pickling, zero-copy msgpack and flattened multimodal kwargs,
# on a text request and a 4-image request.
DEFAULT_BACKENDS = "pickle,msgspec-frombuffer,flat-mmk"
DEFAULT_WORKLOADS = "text-sonnet,images-4"
DEFAULT_SCENARIOS = "micro"
DEFAULT_ROUNDS = 15
# With instruction counts beside them, the timed rounds are there for what counts miss (memory
# traffic, the kernel, waiting), so fewer keep the gate within its time budget
# (docs/measurements/2026-12-02-gate.md).
DEFAULT_ROUNDS_COUNTED = 10
# auto: instructions where valgrind can count (and micro or ipc is measured), the clock otherwise
MEASURES = ("auto", "time", "instructions")
COUNTED_SCENARIOS = ("micro", "ipc", "fanout")  # whose CPU work ``--measure instructions`` counts
# How the rounds end (``serbench.gate.stopping``), as the summary's first line says it.
STOPPING = "a case stopping once its rows settle"
# Scenario flags the gate means otherwise: its --measure chooses counts or the clock, and it sets
# the scenarios' own --measure for its counting run.
OWN_FLAGS = ("--measure",)


def say(message: str) -> None:
    """Progress goes to stderr; stdout is the verdict."""
    print(message, file=sys.stderr)


def cmd_gate(args: argparse.Namespace) -> int:
    """Measure base and working tree interleaved, compare; exit 0, 1 (regression) or 2."""
    # Here, not at the top: measuring imports the runner and with it torch, which every other
    # command's parser must not pay for.
    from serbench.gate import measure as gate
    from serbench.gate.stopping import Stopping
    from serbench.gate.worktree import repository_root
    from serbench.runner import matrix as runner

    max_regression, overrides = tolerances(args)  # a malformed tolerance fails before minutes of measuring
    check_metric_names(overrides)
    check_outputs(args)
    if args.rounds is not None and args.rounds < 1:
        raise UsageError("--rounds must be at least 1")
    runtimes = side_runtimes(args)
    args.runtime_options = runtime_options(args.base, runtimes)
    chosen = options.plan(args)  # each side's measurer gets it as it is; each looks its names up
    settings = options.profile(args, OWN_FLAGS)  # quick, with the scenario options given
    repo = repository_root(Path.cwd()) if args.base else None
    folder = results.output_folder(args.out, "gate-").resolve()  # runs work in the revisions' trees
    counting, why = count_plan(args, chosen, settings)
    rounds = timed_rounds(args, chosen, counting is not None)
    how = measured_by(counting is not None, rounds, why)
    stopping = Stopping(max_regression, overrides)
    say(how)
    try:
        with runner.sigterm_as_interrupt():  # so that the worktree and every process go on SIGTERM too
            base, head = gate.measure(
                repo, args.base, chosen, settings, rounds, folder, say, counting, runtimes, stopping=stopping
            )
    except KeyboardInterrupt as exc:
        say(f"\ninterrupted: nothing compared; the rounds so far are in {folder}")
        return EXIT_TERMINATED if isinstance(exc, Terminated) else EXIT_INTERRUPTED
    results.save(folder / "base.json", base)
    results.save(folder / "head.json", head)
    if not args.markdown:
        args.markdown = str(folder / "summary.md")
    profiles = (folder / "base-instructions", folder / "head-instructions") if counting else None
    code = conclude(args, base, head, how, profiles, side_by_side=True)
    print(f"gate report: {folder} (base.json, head.json, {Path(args.markdown).name})")
    return code


def side_runtimes(args: argparse.Namespace) -> tuple[Runtime, Runtime]:
    """Base's and head's interpreter and path (``--base-python``, ``--base-path`` and head's);
    UsageError for one that is not there, or for a gate given nothing to compare."""
    from serbench.gate.revision import Runtime  # here: it imports the runner, and with it torch

    runtimes = []
    for side in ("base", "head"):
        python, path = getattr(args, f"{side}_python"), getattr(args, f"{side}_path")
        if python and not (Path(python).is_file() and os.access(python, os.X_OK)):
            raise UsageError(f"--{side}-python {python}: not an executable file")
        if path and not Path(path).is_dir():
            raise UsageError(f"--{side}-path {path}: not a folder")
        # absolute, not resolved: a venv's python is a link to the base interpreter
        python = os.path.abspath(python) if python else sys.executable
        runtimes.append(Runtime(python, Path(path).resolve() if path else None))
    if args.base is None and runtimes[0] == runtimes[1]:
        raise UsageError(
            "nothing to compare: give --base REF (a serbench revision), or base and head runtimes that "
            "differ (--base-path / --head-path, --base-python / --head-python: another package's change)"
        )
    return runtimes[0], runtimes[1]


def runtime_options(base: str | None, runtimes: tuple[Runtime, Runtime]) -> list[str]:
    """The ``--base-path`` / ``--base-python`` (and head's) options the sides run under, with
    ``--base`` when it was given too: what a reproduce line needs; none for a gate of serbench
    revisions run as this process runs."""
    options = []
    for side, runtime in zip(("base", "head"), runtimes, strict=True):
        if runtime.path:
            options += [f"--{side}-path", str(runtime.path)]
        if runtime.python != sys.executable:
            options += [f"--{side}-python", runtime.python]
    return [*(["--base", base] if options and base else []), *options]


def count_plan(
    args: argparse.Namespace, plan: Plan, profile: Profile
) -> tuple[tuple[Plan, Profile] | None, str | None]:
    """The plan and profile of the instruction-counting run (``--measure instructions``, or
    ``auto`` where valgrind can count: the micro, ipc and fanout cases), or None and why not (None when
    the clock alone was asked for)."""
    if args.measure == "time":
        return None, None
    problem = instructions.cannot_launch()
    counted = [name for name in plan.scenarios if name in COUNTED_SCENARIOS]
    if not counted:
        problem = "instructions are counted for micro, ipc and fanout cases and --scenarios has none"
    if problem:
        if args.measure == "instructions":
            say(f"note: {problem}: no instruction counts, wall time only")
        return None, problem
    return (
        dataclasses.replace(plan, scenarios=counted),
        profile.with_options(measure="instructions"),
    ), None


def timed_rounds(args: argparse.Namespace, plan: Plan, counted: bool) -> int:
    """Wall-clock rounds per side: ``--rounds`` as given; else none where ``--measure
    instructions`` counts every scenario (the counts alone: deterministic, and minutes rather
    than a quarter of an hour with ipc), ``DEFAULT_ROUNDS_COUNTED`` beside counts, and
    ``DEFAULT_ROUNDS`` without them."""
    if args.rounds is not None:
        return args.rounds
    if not counted:
        return DEFAULT_ROUNDS
    if args.measure == "instructions" and set(plan.scenarios) <= set(COUNTED_SCENARIOS):
        return 0
    return DEFAULT_ROUNDS_COUNTED


def measured_by(counted: bool, rounds: int, why_not: str | None) -> str:
    """The summary's first line: how this gate measured (``--measure``), and why without counts."""
    if counted:
        return (
            f"measured by: instruction counts (callgrind, within "
            f"{metrics.metric('decode_instructions').tolerance:.0%}: micro's encode and decode, ipc's "
            "send and receive path per request, fan-out's core and worker per step; not syscalls, "
            "the socket library's threads or waiting) "
            + (
                f"and the wall clock ({rounds} paired rounds) for what counts cannot see, {STOPPING}"
                if rounds
                else "alone: no wall clock (--measure auto adds it)"
            )
        )
    return f"measured by: the wall clock ({rounds} paired rounds), {STOPPING}" + (
        f"; no counts: {why_not}" if why_not else ""
    )


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``serbench gate``."""
    parser = subparsers.add_parser(
        "gate",
        help="CI gate: measure REF and the working tree interleaved, exit 1 on a regression",
        description="Check out REF in a temporary worktree, run base and working tree interleaved "
        "(A B, B A, ...) on this machine, then compare as `serbench compare` does. Without REF, both "
        "sides run this serbench under their own --base-path / --base-python and head's: a change "
        "to another package (e.g. vLLM) is gated.",
    )
    parser.add_argument(
        "--base",
        metavar="REF",
        help="git revision of serbench to compare the working tree against (optional where the "
        "sides' runtimes differ: then both run this serbench)",
    )
    parser.add_argument("--backends", default=DEFAULT_BACKENDS, help=f"(default: {DEFAULT_BACKENDS})")
    parser.add_argument("--workloads", default=DEFAULT_WORKLOADS, help=f"(default: {DEFAULT_WORKLOADS})")
    parser.add_argument("--scenarios", default=DEFAULT_SCENARIOS, help=f"(default: {DEFAULT_SCENARIOS})")
    add_dimension_options(parser)
    parser.add_argument(
        "--rounds",
        type=int,
        help=f"the most runs per revision (default {DEFAULT_ROUNDS}; {DEFAULT_ROUNDS_COUNTED} when "
        "instructions are counted beside them; none with --measure instructions of counted scenarios "
        f"alone); a case is measured no more once its rows are settled, from {MIN_PAIRS} rounds on",
    )
    parser.add_argument(
        "--out", help="folder for the rounds, merged results and summary.md (default reports/gate-<UTC>)"
    )
    parser.add_argument(
        "--measure",
        choices=MEASURES,
        default="auto",
        help="instructions: count each micro case's instructions per encode / decode and each "
        "ipc case's per request on the frontend's send and the engine's receive path (fanout: "
        "per step on the core's and a worker's), under "
        "callgrind (one valgrind process per side), and compare them within "
        f"{metrics.metric('decode_instructions').tolerance * 100:g} %%; with counted scenarios alone, "
        "the counts alone, without wall-clock rounds unless --rounds asks for them "
        "(docs/instructions.md); time: the clock alone; auto (default): counts beside "
        f"{DEFAULT_ROUNDS_COUNTED} wall-clock rounds where valgrind is installed and micro, ipc or fanout "
        "is measured, else time",
    )
    package = parser.add_argument_group(
        "gating another package (e.g. vLLM)",
        "each side runs under its own interpreter or with a folder first on its path; without "
        "--base both run this serbench, so only that package differs (docs/vllm.md)",
    )
    for side in ("base", "head"):
        package.add_argument(
            f"--{side}-path",
            metavar="DIR",
            help=f"a folder put first on {side}'s PYTHONPATH: a checkout holding the package (vllm/)",
        )
        package.add_argument(
            f"--{side}-python",
            metavar="PYTHON",
            help=f"{side}'s interpreter (a venv with the other version and serbench installed; "
            "default: this one)",
        )
    add_comparison_options(parser)
    options.add_scenario_options(parser, OWN_FLAGS)
    parser.set_defaults(func=cmd_gate)
