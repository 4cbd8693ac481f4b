"""pytest options shared by the suite.

``--backend SPEC`` (repeatable) runs the conformance suite against any
backend, e.g. ``pytest tests/test_conformance.py --backend mypkg.mod:factory``;
without it the suite covers every built-in backend and threshold variant.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# Backends written outside the package, named by dotted path in tests (tests/plugins).
sys.path.insert(0, str(Path(__file__).parent / "plugins"))

BUILTIN_VARIANTS = [
    "pickle",
    "pickle-oob",
    "cloudpickle",
    "numpy-intermediate",
    "msgspec-frombuffer",
    "flat-mmk",
    "pickle-oob:threshold=inf",
    "numpy-intermediate:threshold=inf",
    "msgspec-frombuffer:threshold=inf",
    "flat-mmk:threshold=inf",
    "msgspec-frombuffer:threshold=0",
]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--backend",
        action="append",
        default=[],
        help="backend spec to run the conformance suite against (repeatable)",
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "backend_spec" in metafunc.fixturenames:
        specs = metafunc.config.getoption("--backend") or BUILTIN_VARIANTS
        metafunc.parametrize("backend_spec", specs)
