"""``serbench run``: the benchmark matrix, its results file, summary and report."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from tqdm import tqdm

from serbench import instructions, report, runner, text
from serbench.commands.options import add_scenario_options, profile, split_specs
from serbench.errors import EXIT_INTERRUPTED
from serbench.results import output_folder
from serbench.runner import Plan
from serbench.scenarios import SCENARIOS, Case, get_scenario
from serializers import BUILTINS, get_serializer
from workloads import available_workloads, get_workload


def plan(args: argparse.Namespace) -> Plan:
    """The run's plan from the command line; SpecError for any unknown name."""
    chosen = Plan(
        backends=split_specs(args.backends) if args.backends else list(BUILTINS),
        workloads=split_specs(args.workloads) if args.workloads else available_workloads(),
        scenarios=split_specs(args.scenarios) if args.scenarios else list(SCENARIOS),
    )
    for spec in chosen.backends:
        get_serializer(spec)
    for spec in chosen.workloads:
        get_workload(spec)
    for name in chosen.scenarios:
        get_scenario(name)
    return chosen


def _point_latest(folder: Path) -> None:
    """``reports/latest`` → this run's folder (only for the default location)."""
    latest = folder.parent / "latest"
    tmp = folder.parent / ".latest.tmp"
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(folder.name)
    os.replace(tmp, latest)


def cmd_run(args: argparse.Namespace) -> int:
    """Run the matrix; write results.json; print the summary."""
    chosen, settings = plan(args), profile(args)
    if settings.options.get("measure") == "instructions" and not instructions.launched():
        problem = instructions.cannot_launch()
        if problem is None:  # the same command again, in one valgrind process (docs/instructions.md)
            return instructions.run_under_callgrind([sys.executable, "-m", "serbench", *args.argv])
        print(f"note: {problem}: no instruction counts, micro measures wall time", file=sys.stderr)
    if args.worker:
        runner.work(chosen, settings, args.argv, sys.stdin, sys.stdout)
        return 0
    folder = output_folder(args.out)
    path = folder / "results.json"

    tqdm.monitor_interval = 0  # no monitor thread: cases run in forked children
    bar = tqdm(total=len(chosen.cases()), unit="case", file=sys.stderr, dynamic_ncols=True)

    def progress(index: int, total: int, case: Case) -> None:
        bar.update(index - bar.n)
        bar.set_description(case.label)
        bar.set_postfix_str(f"{total - index} left")

    try:
        results = runner.execute(chosen, settings, path, args.argv, progress)
    except KeyboardInterrupt:
        bar.close()
        print(f"\ninterrupted: partial results (complete: false) in {path}", file=sys.stderr)
        return EXIT_INTERRUPTED
    bar.update(bar.total - bar.n)
    bar.close()
    if not args.out:
        _point_latest(folder)
    print(text.render(results.data))
    print(f"\nresults: {path}")
    print(f"report:  {report.write_report(results.data, folder)}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``serbench run`` with every scenario's options."""
    parser = subparsers.add_parser("run", help="run the benchmark matrix")
    parser.set_defaults(func=cmd_run)
    parser.add_argument("--backends", help="comma-separated backend specs (default: the built-ins)")
    parser.add_argument("--workloads", help="comma-separated workload specs (default: all built-in)")
    parser.add_argument("--scenarios", help="comma-separated scenario names (default: all)")
    speed = parser.add_mutually_exclusive_group()
    speed.add_argument("--quick", action="store_true", help="quick profile (default)")
    speed.add_argument("--full", action="store_true", help="publication-quality profile")
    parser.add_argument("--out", help="folder for results.json (default: reports/<UTC timestamp>/)")
    parser.add_argument(
        "--worker",
        action="store_true",
        help="run as `serbench gate`'s worker: announce the cases, then measure one per JSON "
        "request on stdin (see serbench.runner.work)",
    )
    add_scenario_options(parser)
