"""``serbench list``: backends (with their safety), workloads, scenarios."""

from __future__ import annotations

import argparse

from serbench.scenarios import SCENARIOS
from serbench.serializers import available_serializers, declared_safety, describe, get_serializer, safety_text
from serbench.text import table
from serbench.units import format_value
from serbench.workloads import SWEEPS, available_workloads, default_workloads, get_workload


def cmd_list(args: argparse.Namespace) -> int:
    """Backends (strategy, safety), workloads (payload per request), scenarios."""
    rows = []
    for name in available_serializers():
        backend = get_serializer(name)
        rows.append([name, safety_text(declared_safety(backend)), describe(backend)])
    print(table(["backend", "safe for untrusted input", "strategy"], rows))
    print()
    rows = []
    default = default_workloads()
    for name in available_workloads():
        workload = get_workload(name)
        payload = format_value(workload.payload_bytes(), "bytes")
        rows.append([name, payload, "yes" if name in default else "by name", workload.description])
    print(table(["workload", "payload/request", "default run", "what"], rows))
    print(
        "any images-N, outputs-B, tensor-N works; outputs-B takes logprobs=K, layout=nested|flat, steps=N; "
        f"sweeps: {', '.join(SWEEPS)} (with options, e.g. outputs-sweep:logprobs=5)"
    )
    print()
    print(table(["scenario", "what"], [[s.name, s.description] for s in SCENARIOS.values()]))
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``serbench list``."""
    subparsers.add_parser("list", help="backends, workloads and scenarios").set_defaults(func=cmd_list)
