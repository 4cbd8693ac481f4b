"""``serbench run``: the benchmark matrix, its results file, summary and report."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from tqdm import tqdm

from serbench.analysis.settled import still_open
from serbench.analysis.summary import summarize_run
from serbench.cli import options
from serbench.cli.options import (
    add_baseline,
    add_dimension_options,
    add_scenario_options,
    baseline,
    profile,
)
from serbench.model import results
from serbench.model.errors import EXIT_INTERRUPTED, EXIT_TERMINATED, Terminated
from serbench.model.profiles import Profile
from serbench.model.results import Results
from serbench.present import html as report
from serbench.present import terminal
from serbench.probes import instructions
from serbench.scenarios import Case, get_scenario

if TYPE_CHECKING:
    from serbench.runner.matrix import Plan


def plan(args: argparse.Namespace) -> Plan:
    """The run's plan from the command line; UsageError for a bad dimension value (first),
    SpecError for any unknown name."""
    # Here, not at the top: the runner loads torch for the cases it forks, which every other
    # command's parser (this module's included) must not pay for.
    from serbench.runner import measurer

    return measurer.checked(options.plan(args))


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
        summary = summarize_run(results.load(path))
        print(f"report:  {report.write_report(summary, folder)}", file=sys.stderr)
    return code


# One live line: cases done of the total and the time left, then the case being measured.
BAR_FORMAT = "{n_fmt}/{total_fmt} cases, {remaining} left |{bar:20}| {desc}"


class _Bar:
    """Progress on a terminal: one live line on stderr, drawn by tqdm, one step per case."""

    def __init__(self, total: int) -> None:
        tqdm.monitor_interval = 0  # no monitor thread: cases run in forked children
        self.bar = tqdm(total=total, file=sys.stderr, dynamic_ncols=True, bar_format=BAR_FORMAT)

    def __call__(self, index: int, total: int, case: Case) -> None:
        self.bar.total = total  # the runner's count: a case measured in rounds is visited each round
        self.bar.update(index - self.bar.n)
        self.bar.set_description(case.label)

    def done(self) -> None:
        self.bar.set_description("done")
        self.bar.update(self.bar.total - self.bar.n)
        self.bar.close()

    def close(self) -> None:
        self.bar.close()


class _Lines:
    """Progress into a log (CI, a pipe, a file): one plain line per case (per visit, for a case
    measured in rounds) as it begins, and one when the last has ended, where a bar's
    carriage-return frames would pile up."""

    def __init__(self, total: int) -> None:
        self.total = total

    def __call__(self, index: int, total: int, case: Case) -> None:
        self.total = total
        print(f"[{index + 1}/{total}] {case.label}", file=sys.stderr, flush=True)

    def done(self) -> None:
        print(f"[{self.total}/{self.total}] done", file=sys.stderr, flush=True)

    def close(self) -> None:
        """Nothing to close: every line is complete."""


def _progress(total: int) -> _Bar | _Lines:
    """A bar when stderr is a terminal, plain lines otherwise."""
    return _Bar(total) if sys.stderr.isatty() else _Lines(total)


def cmd_run(args: argparse.Namespace) -> int:
    """Run the matrix; write results.json and index.html; print the summary."""
    # Here, not at the top: the runner loads torch for the cases it forks, which every other
    # command's parser (this module's included) must not pay for.
    from serbench.runner import matrix as runner
    from serbench.runner import measurer

    chosen, settings = plan(args), profile(args)
    args.baseline = baseline(args, (case.row for case in chosen.cases()))  # before any case runs
    for name in chosen.scenarios:
        get_scenario(name).check(settings)  # UsageError before any case runs
    if measurer.counts(settings):
        problem = instructions.cannot_launch()
        if problem is None:
            return _counted(args, chosen, settings)
        print(instructions.wall_time_note(problem), file=sys.stderr)
    folder = results.output_folder(args.out, must_be_empty=not args.force)
    path = folder / "results.json"
    progress = _progress(len(chosen.cases()))
    try:
        finished = runner.execute(chosen, settings, path, args.argv, progress, stop_rule=still_open)
    except KeyboardInterrupt as exc:
        progress.close()
        return _interrupted(
            EXIT_TERMINATED if isinstance(exc, Terminated) else EXIT_INTERRUPTED, path, folder
        )
    progress.done()
    return _summarised(args, folder, finished.results)


def _counted(args: argparse.Namespace, chosen: Plan, settings: Profile) -> int:
    """The run in one measurer under valgrind (docs/instructions.md), which only measures: the
    backends are checked, and the summary and report made, here, at full speed; the
    measurer gets those checks, the output folder and where callgrind dumps in its messages
    (``measurer.count``)."""
    from serbench.runner import matrix as runner  # here, not at the top: see ``cmd_run``
    from serbench.runner import measurer

    folder = results.output_folder(args.out, must_be_empty=not args.force)
    backends = runner.check_backends(sorted({case.backend for case in chosen.cases()}))
    progress = _progress(len(chosen.cases()))
    try:
        code = measurer.count(chosen, settings, args.argv, folder, backends, progress)
    finally:
        progress.close()
    if code in (EXIT_INTERRUPTED, EXIT_TERMINATED):
        return _interrupted(code, folder / "results.json", folder)
    if code:
        return code  # the counting process said why on stderr
    return _summarised(args, folder, results.load(folder / "results.json"))


def _summarised(args: argparse.Namespace, folder: Path, data: Results) -> int:
    """Write a finished run's report; print where its files are, then its summary (every table
    with --verbose), which ends with the decision."""
    if not args.out:
        _point_latest(folder)
    summary = summarize_run(data, args.baseline)
    page = report.write_report(summary, folder)
    print(f"results: {folder}{os.sep} ({(folder / 'results.json').name}, {page.name})\n")
    print(terminal.render(summary, verbose=args.verbose))  # the decision last, where the eye lands
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``serbench run`` with every scenario's options."""
    parser = subparsers.add_parser("run", help="run the benchmark matrix")
    parser.set_defaults(func=cmd_run)
    parser.add_argument("--backends", help="comma-separated backend specs (default: the built-ins)")
    parser.add_argument(
        "--workloads",
        help="comma-separated workload specs (default: text-sonnet, images-4, images-32; "
        "`serbench list` shows the rest, e.g. outputs-1024:logprobs=5,layout=flat, tensor-sweep)",
    )
    parser.add_argument(
        "--scenarios",
        help="comma-separated scenario names (default: micro, ipc, memory; fanout runs when named)",
    )
    add_dimension_options(parser)
    speed = parser.add_mutually_exclusive_group()
    speed.add_argument("--quick", action="store_true", help="quick profile (default)")
    speed.add_argument("--full", action="store_true", help="publication-quality profile")
    parser.add_argument(
        "--out", help="folder for results.json and index.html (default: reports/<UTC time>/); must be empty"
    )
    parser.add_argument("--force", action="store_true", help="write into a non-empty --out folder")
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="print every table (each metric's, each scenario's own, the rankings), not only the "
        "headline table per scenario and the decision",
    )
    add_baseline(parser)
    add_scenario_options(parser)
