"""``serbench compare BASE.json HEAD.json``: exit 0, 1 on a regression, 2 when it cannot decide.

The exit code is a contract (docs/gate.md, "Exit codes"): 0 no regression, 1 a regression,
2 the comparison could not decide — unusable or unwritable files, unknown names, incomparable
environments, nothing in common, and with ``--require-decisive`` any inconclusive row. Each
2 is one line on stderr.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from serbench.analysis import attribution
from serbench.analysis.summary import summarize_comparison
from serbench.analysis.verdicts import Comparison, compare
from serbench.cli.options import add_comparison_options, check_metric_names, check_writable, tolerances
from serbench.model import results
from serbench.model.errors import EXIT_OK, EXIT_REGRESSION, ResultsError, UsageError
from serbench.present import export, markdown, terminal
from serbench.probes import instructions


def check_outputs(args: argparse.Namespace) -> None:
    """UsageError for an output file that cannot be written (before minutes of measuring)."""
    check_writable(args.markdown, "--markdown")
    check_writable(args.export, "--export")


def undecided(comparison: Comparison, base: results.Results, head: results.Results) -> str | None:
    """Why nothing could be decided (no case or no metric in common), or None."""
    if comparison.rows:
        return None
    common = len(base.by_case().keys() & head.by_case().keys())
    if not common:
        return f"no case in common (base has {len(base.records)}, head {len(head.records)}): nothing compared"
    return f"nothing compared in the {common} case(s) in common (no metric in both, or failed on both sides)"


def _write(path: str, content: str, flag: str) -> None:
    try:
        Path(path).write_text(content)
    except OSError as exc:
        raise UsageError(f"{flag} {path}: {exc.strerror or exc}") from None


def conclude(
    args: argparse.Namespace,
    base: results.Results,
    head: results.Results,
    first_line: str | None = None,
    profiles: tuple[Path, Path] | None = None,
    side_by_side: bool = False,
) -> int:
    """Compare, print the table, write the Markdown and export files; the exit code.

    Shared by ``compare`` and ``gate``, which differ only in where the two
    documents come from (the gate says how it measured in ``first_line``).
    ``profiles``: base's and head's counting-run folders, whose callgrind profiles name
    the functions that grew in a flagged count row (``serbench.analysis.attribution``).
    ``side_by_side``: round i of base and of head were measured together (the gate), so the
    rounds pair and sampled verdicts are decisive (``compare.compare``).
    """
    max_regression, overrides = tolerances(args)
    check_metric_names(overrides, (n for data in (base, head) for r in data.records for n in r.metrics))
    comparison = compare(base, head, max_regression, overrides, strict=args.strict, side_by_side=side_by_side)
    if comparison.environment_differences and not args.force:
        named = "; ".join(f"{k}: {b!r} vs {h!r}" for k, (b, h) in comparison.environment_differences.items())
        raise ResultsError(f"environments differ ({named}); --force compares them anyway")
    runtimes = getattr(args, "runtime_options", ())  # the gate's --base-path ..., for its reproduce lines
    found = (
        attribution.explain_rows(attribution.flagged_counts(comparison.rows), *profiles) if profiles else []
    )
    grew = [line for row in found for line in row.lines]
    lookups = [(row.case, row.metric) for row in found if row.lookups_only]
    summary = summarize_comparison(comparison, base, head, runtimes, grew, lookups)
    table = terminal.comparison_table(summary, args.changes_only)
    print(table if first_line is None else f"{first_line}\n{table}")
    if grew:
        print("\n".join(grew))
    if args.markdown:
        _write(args.markdown, markdown.comparison_markdown(summary, first_line), "--markdown")
    if args.export:
        try:
            export.write(head, args.export, args.export_format)
        except OSError as exc:
            raise UsageError(f"--export {args.export}: {exc.strerror or exc}") from None
    reason = undecided(comparison, base, head)
    if reason:
        raise ResultsError(reason)
    if comparison.regressions:
        return EXIT_REGRESSION
    unsure = comparison.inconclusive
    if unsure and args.require_decisive:
        raise ResultsError(f"{len(unsure)} inconclusive row(s) and --require-decisive (see the notes above)")
    if unsure:
        print(
            f"serbench: warning: {len(unsure)} inconclusive row(s): no regression found, but they could not "
            "have shown one of their tolerance (--require-decisive makes this exit 2)",
            file=sys.stderr,
        )
    return EXIT_OK


def cmd_compare(args: argparse.Namespace) -> int:
    """Check the options, load both files and conclude."""
    tolerances(args)  # a malformed option is named before a file is read
    check_outputs(args)
    # A counting run's profiles/ is beside its results.json; named only where a side has one.
    profiles = (Path(args.base).parent, Path(args.head).parent)
    if not any((side / instructions.PROFILE_FOLDER).is_dir() for side in profiles):
        profiles = None
    base, head = results.load(args.base), results.load(args.head)
    return conclude(args, base, head, profiles=profiles, side_by_side=args.side_by_side)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``serbench compare``."""
    parser = subparsers.add_parser(
        "compare",
        help="compare two results files; exit 1 on a regression",
        description="Ratio head/base with a bootstrap CI for every case and metric in both files. "
        "Two separate runs (as `serbench run` makes them) give indicative verdicts only: they are "
        "shown and do not fail unless --strict; `serbench gate` measures both sides in interleaved "
        "pairs and gives real verdicts (--side-by-side reads its base.json and head.json so again). "
        "A row that could not have seen a slowdown of its tolerance is 'inconclusive'. "
        "Exit 0: no regression; 1: regression; 2: could not decide (unusable or unwritable files, "
        "unknown names, incomparable environments, no case in common, and with --require-decisive "
        "any inconclusive row).",
    )
    parser.add_argument("base", help="results.json of the base revision")
    parser.add_argument("head", help="results.json of the revision under test")
    parser.add_argument(
        "--side-by-side",
        action="store_true",
        help="the two files are a gate's base.json and head.json: round i of each was measured "
        "beside the other, so the rounds pair and verdicts are decisive",
    )
    add_comparison_options(parser)
    parser.set_defaults(func=cmd_compare)
