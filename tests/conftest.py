"""pytest options shared by the suite.

``--backend SPEC`` (repeatable) runs the conformance suite against any
backend, e.g. ``pytest tests/test_conformance.py --backend mypkg.mod:factory``;
without it the suite covers every built-in backend and threshold variant.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from serbench import transport
from serbench.serializers import BUILTINS

# The suite sends Ctrl-C to processes it starts. Started as a background job of a
# non-interactive shell, pytest inherits SIGINT ignored and would pass that on through every
# exec, so Ctrl-C would do nothing; with Python's handler here, children start with the default.
signal.signal(signal.SIGINT, signal.default_int_handler)

# Backends written outside the package, named by dotted path in tests (tests/plugins).
sys.path.insert(0, str(Path(__file__).parent / "plugins"))

BUILTIN_VARIANTS = [
    *BUILTINS,
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


@pytest.fixture
def ipc_sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """ipc folders under tmp_path; afterwards none left and no child process alive."""
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    yield tmp_path
    assert not list(tmp_path.glob(f"{transport.IPC_PREFIX}*")), "ipc folder left behind"
    assert not psutil.Process().children(recursive=True), "process left behind"
