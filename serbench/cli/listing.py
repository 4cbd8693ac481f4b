"""``serbench list``: backends (with their safety), workloads, scenarios, within 100 columns."""

from __future__ import annotations

import argparse
import textwrap
from collections.abc import Sequence

from serbench.model.units import format_value
from serbench.present.terminal import table
from serbench.scenarios import SCENARIOS
from serbench.serializers import available_serializers, declared, declared_safety, describe, safety_text
from serbench.workloads import SWEEPS, available_workloads, default_workloads, get_workload

WIDTH = 100  # columns every line fits: a terminal's, with room to spare


def wrapped_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """``text.table`` of every column but the last, which is free text (a description), left
    aligned after them and wrapped within ``WIDTH``, its further lines under its first."""
    fixed = table(headers[:-1], [row[:-1] for row in rows]).split("\n")
    indent = len(fixed[0]) + 2
    lines = [f"{fixed[0]}  {headers[-1]}", "-" * WIDTH]
    for line, row in zip(fixed[2:], rows, strict=True):
        first, *more = textwrap.wrap(row[-1], WIDTH - indent) or [""]
        lines += [f"{line}  {first}", *(" " * indent + part for part in more)]
    return "\n".join(lines)


def cmd_list(args: argparse.Namespace) -> int:
    """Backends (strategy, safety), workloads (payload per request), scenarios."""
    rows = []
    for name in available_serializers():
        backend = declared(name)
        rows.append([name, safety_text(declared_safety(backend)), describe(backend)])
    print(wrapped_table(["backend", "safe for untrusted input", "strategy"], rows))
    print()
    rows = []
    default = default_workloads()
    for name in available_workloads():
        workload = get_workload(name)
        payload = format_value(workload.payload_bytes(), "bytes")
        rows.append([name, payload, "yes" if name in default else "by name", workload.description])
    print(wrapped_table(["workload", "payload/request", "default run", "what"], rows))
    families = (
        "any images-N, outputs-B, tensor-N works; outputs-B takes logprobs=K, layout=nested|flat, steps=N "
        "(images-N and outputs-B: layout=vllm-native with the vLLM plugin); "
        f"sweeps: {', '.join(SWEEPS)} (with options, e.g. outputs-sweep:logprobs=5)"
    )
    print(textwrap.fill(families, WIDTH))
    print()
    print(wrapped_table(["scenario", "what"], [[s.name, s.description] for s in SCENARIOS.values()]))
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``serbench list``."""
    subparsers.add_parser("list", help="backends, workloads and scenarios").set_defaults(func=cmd_list)
