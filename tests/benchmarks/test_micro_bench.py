"""The micro scenario as a pytest-benchmark suite.

    pytest tests/benchmarks --benchmark-autosave
    pytest tests/benchmarks --benchmark-compare --benchmark-compare-fail=median:10%

Each benchmark times the same operation as ``serbench run --scenarios micro``
(``serbench.scenarios.micro.operations``). Under ``make test`` they run once
each with ``--benchmark-disable``, as a check that every operation works.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import pytest

from serbench.scenarios.micro import operations
from serbench.serializers import BUILTINS, get_serializer
from serbench.serializers.conformance import assert_same, verify
from serbench.workloads import get_workload

WORKLOADS = ["text-sonnet", "images-4", "images-32"]
OPERATIONS = ["encode_s", "decode_s", "roundtrip_s"]


@cache
def _message(workload: str) -> Any:
    return get_workload(workload).request(0)


@pytest.mark.parametrize("operation", OPERATIONS)
@pytest.mark.parametrize("workload", WORKLOADS)
@pytest.mark.parametrize("backend", list(BUILTINS))
def test_micro(benchmark: Any, backend: str, workload: str, operation: str) -> None:
    message = _message(workload)
    serializer = get_serializer(backend)
    benchmark.group = f"{workload} {operation}"
    benchmark.extra_info["payload_bytes"] = get_workload(workload).payload_bytes()
    verify(serializer, [message], "request")  # round-trips bit-exact before it is timed
    result = benchmark(operations(serializer, message)[operation])
    if operation != "encode_s":
        assert_same(message, result)
