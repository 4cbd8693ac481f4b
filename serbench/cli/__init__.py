"""The ``serbench`` command line: one module per command, each adding itself with ``register``.

These are the only modules that see argparse. An error that a lower layer
raises for bad input (``errors.SerbenchError``, ``specs.SpecError``) is
reported here as one line on stderr with its exit code.
"""

from __future__ import annotations

import argparse
import sys

from serbench import __version__
from serbench.cli import compare, conformance, engine, fanout_worker, gate, listing, report, run, system
from serbench.model.errors import EXIT_USAGE, SerbenchError
from serbench.model.specs import SpecError

COMMANDS = (listing, run, report, compare, gate, conformance, system, engine, fanout_worker)


def build_parser() -> argparse.ArgumentParser:
    """The parser of every command."""
    parser = argparse.ArgumentParser(
        prog="serbench",
        description="Benchmark and regression harness for serializers between an LLM-serving "
        "frontend and its engine process.",
    )
    parser.add_argument("--version", action="version", version=f"serbench {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one command; its exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    args.argv = argv
    try:
        return args.func(args)
    except SerbenchError as exc:
        print(f"serbench: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except SpecError as exc:
        print(f"serbench: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
