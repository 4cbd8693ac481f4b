"""``serbench run``: the benchmark matrix, its results file, summary and report."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from tqdm import tqdm

from serbench import instructions, report, results, runner, text
from serbench.commands.options import add_baseline, add_scenario_options, profile, split_specs, transports
from serbench.errors import EXIT_INTERRUPTED, EXIT_TERMINATED, Terminated, UsageError
from serbench.runner import Plan
from serbench.scenarios import SCENARIOS, Case, get_scenario
from serbench.serializers import BUILTINS, get_serializer
from serbench.transport import DEFAULT_KIND, KINDS
from serbench.workloads import default_workloads, expand, get_workload


def plan(args: argparse.Namespace) -> Plan:
    """The run's plan from the command line; SpecError for any unknown name."""
    chosen = Plan(
        backends=split_specs(args.backends) if args.backends else list(BUILTINS),
        workloads=[w for spec in split_specs(args.workloads) for w in expand(spec)]
        if args.workloads
        else default_workloads(),
        scenarios=split_specs(args.scenarios) if args.scenarios else list(SCENARIOS),
        transports=transports(args.transport),
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


def _interrupted(code: int, path: Path, folder: Path) -> int:
    """After Ctrl-C or SIGTERM: the report of the cases so far; ``code`` (130 or 143)."""
    print(f"\ninterrupted: partial results (complete: false) in {path}", file=sys.stderr)
    if path.exists():
        print(f"report:  {report.write_report(results.load(path), folder)}", file=sys.stderr)
    return code


def cmd_run(args: argparse.Namespace) -> int:
    """Run the matrix; write results.json and index.html; print the summary."""
    chosen, settings = plan(args), profile(args)
    for name in chosen.scenarios:
        get_scenario(name).check(settings)  # UsageError before any case runs
    counting = settings.options.get("measure") == "instructions"
    if counting and args.worker:  # the gate counts in a run of its own per side
        raise UsageError("--worker times rounds; counting instructions is one run per side")
    if counting and not instructions.launched():
        problem = instructions.cannot_launch()
        if problem is None:
            return _counted(args, chosen)
        print(f"note: {problem}: no instruction counts, micro measures wall time", file=sys.stderr)
    if args.worker:
        runner.work(chosen, settings, args.argv, sys.stdin, sys.stdout)
        return 0
    handed_folder = instructions.handed_off("out")  # a counting run's parent chose it (``_counted``)
    if handed_folder:
        folder = Path(handed_folder)
    else:
        folder = results.output_folder(args.out, must_be_empty=not args.force)
    path = folder / "results.json"

    tqdm.monitor_interval = 0  # no monitor thread: cases run in forked children
    bar = tqdm(total=len(chosen.cases()), unit="case", file=sys.stderr, dynamic_ncols=True)

    def progress(index: int, total: int, case: Case) -> None:
        bar.update(index - bar.n)
        bar.set_description(case.label)
        bar.set_postfix_str(f"{total - index} left")

    backend_facts = _handed_off_backends if handed_folder else runner.check_backends
    try:
        finished = runner.execute(chosen, settings, path, args.argv, progress, backend_facts)
    except KeyboardInterrupt as exc:
        bar.close()
        code = EXIT_TERMINATED if isinstance(exc, Terminated) else EXIT_INTERRUPTED
        # A counting process leaves the report to the process that started it, which runs at
        # full speed: under valgrind it took seconds that a terminated gate waits for.
        return code if handed_folder else _interrupted(code, path, folder)
    bar.set_description("done")
    bar.set_postfix_str("")
    bar.update(bar.total - bar.n)
    bar.close()
    return 0 if handed_folder else _summarised(args, folder, finished.data)


def _counted(args: argparse.Namespace, chosen: Plan) -> int:
    """The run again in one valgrind process (docs/instructions.md), which only measures: the
    backends are checked, and the summary and report made, here, at full speed."""
    folder = results.output_folder(args.out, must_be_empty=not args.force)
    backends = runner.check_backends(sorted({case.spec for case in chosen.cases()}))
    command = [sys.executable, "-m", "serbench", *args.argv]
    code = instructions.run_under_callgrind(command, {"out": str(folder), "backends": backends})
    if code in (EXIT_INTERRUPTED, EXIT_TERMINATED):
        return _interrupted(code, folder / "results.json", folder)
    if code:
        return code  # the run said why
    return _summarised(args, folder, results.load(folder / "results.json"))


def _handed_off_backends(specs: list[str]) -> dict[str, dict]:
    """The backends' facts, as the process that started this one checked them (``_counted``)."""
    return instructions.handed_off("backends")


def _summarised(args: argparse.Namespace, folder: Path, data: dict) -> int:
    """Print the summary of a finished run and write its report."""
    if not args.out:
        _point_latest(folder)
    print(text.render(data, args.baseline))
    print(f"\nresults: {folder / 'results.json'}")
    print(f"report:  {report.write_report(data, folder, baseline=args.baseline)}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``serbench run`` with every scenario's options."""
    parser = subparsers.add_parser("run", help="run the benchmark matrix")
    parser.set_defaults(func=cmd_run)
    parser.add_argument("--backends", help="comma-separated backend specs (default: the built-ins)")
    parser.add_argument(
        "--workloads",
        help="comma-separated workload specs (default: text-sonnet and images-4..32; "
        "`serbench list` shows the rest, e.g. outputs-1024:logprobs=5,layout=flat, tensor-sweep)",
    )
    parser.add_argument("--scenarios", help="comma-separated scenario names (default: all)")
    parser.add_argument(
        "--transport",
        help=f"comma-separated links between frontend and engine for ipc and memory: {', '.join(KINDS)} "
        f"(default {DEFAULT_KIND}); a case over another than the default is the row BACKEND@TRANSPORT",
    )
    speed = parser.add_mutually_exclusive_group()
    speed.add_argument("--quick", action="store_true", help="quick profile (default)")
    speed.add_argument("--full", action="store_true", help="publication-quality profile")
    parser.add_argument(
        "--out", help="folder for results.json and index.html (default: reports/<UTC time>/); must be empty"
    )
    parser.add_argument("--force", action="store_true", help="write into a non-empty --out folder")
    add_baseline(parser)
    # `serbench gate` looks for --worker in this help to tell whether a revision has it.
    parser.add_argument(
        "--worker", action="store_true", help="used by `serbench gate`: measure cases on request (internal)"
    )
    add_scenario_options(parser)
