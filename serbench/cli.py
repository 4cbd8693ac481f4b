"""The ``serbench`` command: list, run (and the commands other modules add).

Bad input — an unknown name, a bad option, an unwritable folder, an
unusable results file — is one line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from serbench.profiles import PROFILES
from serbench.results import ResultsError, output_folder
from specs import SpecError

EXIT_USAGE = 2


class UsageError(Exception):
    """Bad input from the command line: reported in one line, exit 2."""


def _csv(text: str) -> list[str]:
    """Split a comma-separated list of specs, keeping options (``a:k=v,k2=v``) whole."""
    items: list[str] = []
    for part in (p.strip() for p in text.split(",")):
        if items and "=" in part and ":" not in part:
            items[-1] += "," + part
        elif part:
            items.append(part)
    return items


def cmd_list(args: argparse.Namespace) -> int:
    """Backends (strategy, safety), workloads (payload per request), scenarios."""
    from serbench.scenarios import SCENARIOS
    from serbench.summary import table
    from serializers import available_serializers, describe, get_serializer, is_safe
    from workloads import available_workloads, get_workload

    rows = []
    for name in available_serializers():
        backend = get_serializer(name)
        rows.append([name, "yes" if is_safe(backend) else "NO (runs code from input)", describe(backend)])
    print(table(["backend", "safe for untrusted input", "strategy"], rows))
    print()
    rows = []
    for name in available_workloads():
        workload = get_workload(name)
        rows.append([name, f"{workload.payload_bytes() / 1e6:.1f} MB", workload.description])
    print(table(["workload", "payload/request", "what"], rows))
    print()
    print(table(["scenario", "what"], [[s.name, s.description] for s in SCENARIOS.values()]))
    return 0


def _point_latest(folder: Path) -> None:
    """``reports/latest`` → this run's folder (only for the default location)."""
    latest = folder.parent / "latest"
    tmp = folder.parent / ".latest.tmp"
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(folder.name)
    os.replace(tmp, latest)


def _plan(args: argparse.Namespace):
    """The run's plan from the command line; SpecError for any unknown name."""
    from serbench.runner import Plan
    from serbench.scenarios import SCENARIOS, get_scenario
    from serializers import BUILTINS, get_serializer
    from workloads import available_workloads, get_workload

    plan = Plan(
        backends=_csv(args.backends) if args.backends else list(BUILTINS),
        workloads=_csv(args.workloads) if args.workloads else available_workloads(),
        scenarios=_csv(args.scenarios) if args.scenarios else list(SCENARIOS),
    )
    for spec in plan.backends:
        get_serializer(spec)
    for spec in plan.workloads:
        get_workload(spec)
    for name in plan.scenarios:
        get_scenario(name)
    return plan


def cmd_run(args: argparse.Namespace) -> int:
    """Run the matrix; write results.json; print the summary."""
    from tqdm import tqdm

    from serbench import runner, summary
    from serbench.scenarios import SCENARIOS

    plan = _plan(args)
    profile = PROFILES["full" if args.full else "quick"]
    for scenario in SCENARIOS.values():
        profile = profile.with_options(**scenario.options(args))
    if args.worker:
        runner.work(plan, profile, args.argv, sys.stdin, sys.stdout)
        return 0
    folder = output_folder(args.out)
    path = folder / "results.json"

    tqdm.monitor_interval = 0  # no monitor thread: cases run in forked children
    bar = tqdm(total=len(plan.cases()), unit="case", file=sys.stderr, dynamic_ncols=True)

    def progress(index: int, total: int, case) -> None:
        bar.update(index - bar.n)
        bar.set_description(case.label)
        bar.set_postfix_str(f"{total - index} left")

    try:
        results = runner.execute(plan, profile, path, args.argv, progress)
    except KeyboardInterrupt:
        bar.close()
        print(f"\ninterrupted: partial results (complete: false) in {path}", file=sys.stderr)
        return 130
    bar.update(bar.total - bar.n)
    bar.close()
    if not args.out:
        _point_latest(folder)
    print(summary.render(results.data))
    print(f"\nresults: {path}")
    from serbench.report import write_report

    print(f"report:  {write_report(results.data, folder)}")
    return 0


# Modules that add a subcommand through ``register(subparsers)``.
COMMAND_MODULES: tuple = tuple(
    __import__(f"serbench.{m}", fromlist=["_"]) for m in ("compare", "gate", "report", "engine")
)


def build_parser() -> argparse.ArgumentParser:
    from serbench.scenarios import SCENARIOS

    parser = argparse.ArgumentParser(prog="serbench", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="backends, workloads and scenarios").set_defaults(func=cmd_list)
    run = sub.add_parser("run", help="run the benchmark matrix")
    run.set_defaults(func=cmd_run)
    run.add_argument("--backends", help="comma-separated backend specs (default: the built-ins)")
    run.add_argument("--workloads", help="comma-separated workload specs (default: all built-in)")
    run.add_argument("--scenarios", help="comma-separated scenario names (default: all)")
    speed = run.add_mutually_exclusive_group()
    speed.add_argument("--quick", action="store_true", help="quick profile (default)")
    speed.add_argument("--full", action="store_true", help="publication-quality profile")
    run.add_argument("--out", help="folder for results.json (default: reports/<UTC timestamp>/)")
    run.add_argument(
        "--worker",
        action="store_true",
        help="run as `serbench gate`'s worker: announce the cases, then measure one per JSON "
        "request on stdin (see serbench.runner.work)",
    )
    for scenario in SCENARIOS.values():
        scenario.add_arguments(run.add_argument_group(f"{scenario.name} scenario"))
    for module in COMMAND_MODULES:
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    args.argv = argv
    try:
        return args.func(args)
    except (SpecError, UsageError, ResultsError) as exc:
        print(f"serbench: error: {exc}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
