"""``serbench compare BASE.json HEAD.json``: exit 0, 1 on a regression, 2 on unusable input."""

from __future__ import annotations

import argparse
from pathlib import Path

from serbench import export, results, text
from serbench.commands.options import add_comparison_options, tolerances
from serbench.compare import compare
from serbench.errors import EXIT_OK, EXIT_REGRESSION, ResultsError


def conclude(args: argparse.Namespace, base: results.Results, head: results.Results) -> int:
    """Compare, print the table, write the Markdown and export files; the exit code.

    Shared by ``compare`` and ``gate``, which differ only in where the two
    documents come from.
    """
    max_regression, overrides = tolerances(args)
    comparison = compare(base, head, max_regression, overrides, strict=args.strict)
    if comparison.environment_differences and not args.force:
        named = "; ".join(f"{k}: {b!r} vs {h!r}" for k, (b, h) in comparison.environment_differences.items())
        raise ResultsError(f"environments differ ({named}); --force compares them anyway")
    print(text.comparison_table(comparison, base, head, changes_only=args.changes_only))
    if args.markdown:
        Path(args.markdown).write_text(text.comparison_markdown(comparison, base, head))
    if args.export:
        export.write(head, args.export, args.export_format)
    return EXIT_REGRESSION if comparison.regressions else EXIT_OK


def cmd_compare(args: argparse.Namespace) -> int:
    """Check the options, load both files and conclude."""
    tolerances(args)  # a malformed option is named before a file is read
    return conclude(args, results.load(args.base), results.load(args.head))


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``serbench compare``."""
    parser = subparsers.add_parser(
        "compare",
        help="compare two results files; exit 1 on a regression",
        description="Ratio head/base with a bootstrap CI for every case and metric in both files. "
        "Two plain runs (one process a side, as `serbench run` makes them) give indicative verdicts "
        "only: they are shown and do not fail unless --strict; `serbench gate` measures both sides "
        "in interleaved pairs and gives real verdicts. "
        "Exit 0: no regression; 1: regression; 2: unusable input or incomparable environments.",
    )
    parser.add_argument("base", help="results.json of the base revision")
    parser.add_argument("head", help="results.json of the revision under test")
    add_comparison_options(parser)
    parser.set_defaults(func=cmd_compare)
