"""``serbench conformance SPEC...``: the conformance suite on any backend, from any folder.

Exit 0 when every backend round-trips every specimen (or truly fails the ones
it declares unsupported), 1 when one does not; each failure is printed with
its first mismatch. The backends' rows carry their own ``name``; a backend
named by dotted path must be importable (installed, or under the current
folder, which ``serbench.cli.main`` puts on the path).
"""

from __future__ import annotations

import argparse

from serbench.cli.options import split_specs
from serbench.model.errors import EXIT_CHECK_FAILED, EXIT_OK
from serbench.present.terminal import table
from serbench.serializers import declared_safety, get_serializer, safety_text


def cmd_conformance(args: argparse.Namespace) -> int:
    """Check each backend; a summary row each, then every failure; exit 0 or 1."""
    # Here, not at the top: the suite's specimens are tensors (torch), which every other command's
    # parser must not pay for.
    from serbench.serializers import conformance

    specs = [spec for item in args.specs for spec in split_specs(item)]
    backends = {spec: get_serializer(spec) for spec in specs}  # a bad spec fails before any check
    rows, failures = [], []
    for spec, backend in backends.items():
        verdicts = list(conformance.check(backend))
        failed = [v for v in verdicts if v.status == "fail"]
        count = {s: sum(v.status == s for v in verdicts) for s in ("pass", "unsupported", "fail")}
        rows.append([backend.name, spec, safety_text(declared_safety(backend)), *map(str, count.values())])
        failures += [f"{backend.name}  {v.id}: {v.detail}" for v in failed[: args.max_failures]]
        if len(failed) > args.max_failures:
            failures.append(f"{backend.name}  … and {len(failed) - args.max_failures} more failed case(s)")
    headers = ["backend", "spec", "safe for untrusted input", "passed", "unsupported", "failed"]
    print(table(headers, rows))
    if failures:
        print("\nfailed (first mismatch of each case):")
        print("\n".join(f"  {line}" for line in failures))
    return EXIT_CHECK_FAILED if failures else EXIT_OK


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``serbench conformance``."""
    parser = subparsers.add_parser(
        "conformance",
        help="bit-exact round trips of every specimen through backends; exit 1 on a failure",
        description="Round-trip every conformance specimen (dtypes, 0-d, empty, strided, numpy, nested, "
        "MultiModalKwargs, whole workload messages) through each backend and compare bit-exact. "
        "A backend by dotted path (package.module:factory) must be importable: installed "
        "(pip install -e .) or in the current folder. Exit 0: all pass; 1: a failure; 2: a bad spec.",
    )
    parser.add_argument("specs", nargs="+", metavar="SPEC", help="backend: a name or package.module:factory")
    parser.add_argument(
        "--max-failures", type=int, default=10, metavar="N", help="failed cases shown per backend (10)"
    )
    parser.set_defaults(func=cmd_conformance)
