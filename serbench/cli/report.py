"""``serbench report``: the HTML page of a results file, or of head against base."""

from __future__ import annotations

import argparse
from pathlib import Path

from serbench.analysis.summary import summarize_comparison, summarize_run
from serbench.analysis.verdicts import compare
from serbench.cli.options import add_baseline, add_max_regression, baseline, max_regression
from serbench.model import results
from serbench.model.errors import UsageError
from serbench.present import export, markdown, terminal
from serbench.present import html as report


def cmd_report(args: argparse.Namespace) -> int:
    """Render one results file, or base against head; print the page's path. With --format,
    print instead what ``serbench run --verbose`` printed at its end (text: every table, the
    rankings, the decision), those tables as Markdown (md), or every measured metric as a table
    a program reads (csv, json: ``export.table``)."""
    tolerance = max_regression(args)
    base = results.load(args.results)
    head = None if args.head is None else results.load(args.head)
    ranked_against = baseline(args, (r.row for r in base.records))
    if args.format:
        if head is not None:
            raise UsageError("--format exports one run's tables; `serbench compare --markdown` compares two")
        if args.format in export.TABLES:
            print(export.table(base, args.format), end="")
        elif args.format == "text":
            print(terminal.render(summarize_run(base, ranked_against), verbose=True))
        else:
            print(markdown.run_markdown(summarize_run(base, ranked_against)), end="")
        return 0
    if args.out:
        out = Path(args.out)
        try:  # before rendering: a bad folder fails at once
            out.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UsageError(f"cannot write the report to {out}: {exc.strerror or exc}") from None
    elif head is None:
        out = Path(args.results).parent
    else:
        out = results.output_folder(None, "compare-")
    if head is None:
        page = report.render(summarize_run(base, ranked_against), args.results)
    else:
        summary = summarize_comparison(compare(base, head, tolerance), base, head)
        page = report.render_comparison(summary, (args.results, args.head), tolerance)
    print(f"report: {report.write_page(page, out)}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``serbench report RESULTS.json [HEAD.json] [--out DIR]``."""
    parser = subparsers.add_parser("report", help="HTML report of a results file, or of head against base")
    parser.add_argument(
        "results", metavar="RESULTS.json", help="a results file (the base when HEAD is given)"
    )
    parser.add_argument(
        "head", nargs="?", metavar="HEAD.json", help="a second results file: compare it to the first"
    )
    parser.add_argument(
        "--out",
        help="folder for index.html (default: beside RESULTS.json; for two files reports/compare-<time>/)",
    )
    add_max_regression(parser)
    add_baseline(parser)
    parser.add_argument(
        "--format",
        choices=("text", "md", *export.TABLES),
        help="print instead of writing the page: every table of the run, its rankings and decision (text), "
        "those tables as Markdown (md), or "
        "every measured metric, one row per case and metric with median, CI and samples (csv, json)",
    )
    parser.set_defaults(func=cmd_report)
