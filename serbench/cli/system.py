"""``serbench system``: is this machine fit to benchmark on (``serbench.probes.system``'s checks)."""

from __future__ import annotations

import argparse

from serbench.model.errors import EXIT_OK
from serbench.present.terminal import table
from serbench.probes import system


def cmd_system(args: argparse.Namespace) -> int:
    """Print every check; exit 0 (warnings are advice, not errors)."""
    checks = system.check()
    status = {True: "ok", False: "WARNING", None: "unknown"}
    rows = [[c.name, c.value, status[c.ok], c.advice] for c in checks]
    print(table(["check", "value", "", "advice"], rows))
    found = sum(c.ok is False for c in checks)
    print(f"\n{found} warning(s); every `serbench run` records these checks, its report shows the warnings")
    return EXIT_OK


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``serbench system``."""
    subparsers.add_parser(
        "system",
        help="check the machine for benchmarking: CPU governor, turbo, load, ASLR, swap, busy processes",
        description="Read-only checks in the spirit of `pyperf system`; nothing is changed.",
    ).set_defaults(func=cmd_system)
