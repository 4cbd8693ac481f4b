"""pytest options shared by the suite.

``--backend SPEC`` (repeatable) runs the conformance suite against any
backend, e.g. ``pytest tests/serializers/test_conformance.py --backend mypkg.mod:factory``;
without it the suite covers every built-in backend and threshold variant.

The tests of ``SLOW_MODULES`` are marked ``slow``: ``make check`` (the edit-test
loop, ``-m "not slow"``) leaves them to ``make test``, which runs everything.
"""

from __future__ import annotations

import gc
import importlib.util
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from multiprocessing import resource_tracker
from pathlib import Path
from typing import NamedTuple

import psutil
import pytest
from as_user import serbench_command
from filelock import FileLock
from segments import left_named
from suite_paths import BACKENDS

from serbench.links import shm, transport
from serbench.serializers import BUILTINS

# The suite sends Ctrl-C to processes it starts. Started as a background job of a
# non-interactive shell, pytest inherits SIGINT ignored and would pass that on through every
# exec, so Ctrl-C would do nothing; with Python's handler here, children start with the default.
signal.signal(signal.SIGINT, signal.default_int_handler)

# Backends written outside the package, named by dotted path in tests (tests/backends).
sys.path.insert(0, str(BACKENDS))

BUILTIN_VARIANTS = [
    *BUILTINS,
    "pickle-oob:threshold=inf",
    "numpy-intermediate:threshold=inf",
    "msgspec-frombuffer:threshold=inf",
    "flat-mmk:threshold=inf",
    "msgspec-frombuffer:threshold=0",
]


# Modules whose tests start what takes seconds each: serbench runs, engines, gates, workers,
# valgrind, asv, Chromium, pytest or a wheel build in a subprocess, or long calibrated loops.
# What is left (unit tests, the conformance suite, the smoke run) takes about a minute.
SLOW_MODULES = {
    "test_asv",
    "test_cache",
    "test_cache_gate",
    "test_clean_output",
    "test_cli_imports",
    "test_conformance_command",
    "test_decoder_robustness",
    "test_engine",
    "test_fanout",
    "test_fanout_cache",
    "test_fanout_counted",
    "test_gate",
    "test_gate_packages",
    "test_heap",
    "test_instructions",
    "test_interrupt",
    "test_ipc",
    "test_ipc_counted",
    "test_memory",
    "test_micro_bench",
    "test_mutants",
    "test_packaging",
    "test_report",
    "test_rounds",
    "test_rss",
    "test_run_hygiene",
    "test_runner",
    "test_shm",
    "test_shm_lifetime",
    "test_sglang",
    "test_staging",
    "test_verified",
    "test_vllm",
    "test_vllm_scenarios",
    "test_worker",
}


def pytest_collection_finish(session: pytest.Session) -> None:
    """What collection imported (torch, numpy, serbench, every test module) lives as long as the
    test process: out of the cyclic collector's reach from here on (``gc.freeze``), as a serving
    process does once started. Each full pass would walk it again: a test process made 8-13
    full passes over 330,000-720,000 objects, 2-7 s of CPU each process."""
    gc.freeze()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.stem in SLOW_MODULES:
            item.add_marker(pytest.mark.slow)


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
    assert not children(), "process left behind"


@pytest.fixture(scope="session")
def made_once(
    tmp_path_factory: pytest.TempPathFactory, worker_id: str
) -> Callable[[str, Callable[[Path], None]], Path]:
    """``made_once(name, make)``: the folder ``name``, filled by ``make(folder)`` once in the
    whole test session, whichever of xdist's processes asks first; the others wait for it.

    A module fixture runs again in every test process that gets one of its module's tests, and
    again in one that ran another module's tests in between (``--dist worksteal`` does both):
    the fixtures that start a serbench run (under valgrind: over a minute) make their folder here
    instead. A ``make`` that fails leaves no folder, so the next asker tries again and fails alike.
    """
    shared = tmp_path_factory.getbasetemp()
    if worker_id != "master":
        shared = shared.parent  # the session's folder, above each process's own
    made: dict[str, Path] = {}

    def get(name: str, make: Callable[[Path], None]) -> Path:
        folder = shared / f"made-once-{name}"
        if name not in made:
            done = folder.with_name(f"{folder.name}.done")
            with FileLock(f"{folder}.lock"):
                if not done.exists():
                    shutil.rmtree(folder, ignore_errors=True)
                    folder.mkdir()
                    try:
                        make(folder)
                    except BaseException:
                        shutil.rmtree(folder, ignore_errors=True)
                        raise
                    done.touch()
            made[name] = folder
        return made[name]

    return get


class MicroRun(NamedTuple):
    """A finished ``serbench run``: its output folder and what it printed."""

    out: Path
    stdout: str
    stderr: str


@pytest.fixture(scope="module")
def micro_run(made_once) -> MicroRun:
    """A small real run (micro, pickle and msgspec-frombuffer, text-sonnet and images-4), made
    once for the session: the report's tests read its page, the clean-output test what it printed."""

    def make(out: Path) -> None:
        done = serbench_command(
            "run", "--scenarios", "micro", "--quick", "--backends", "pickle,msgspec-frombuffer",
            "--workloads", "text-sonnet,images-4", "--out", str(out), cwd=out,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        (out / "stdout.txt").write_text(done.stdout)
        (out / "stderr.txt").write_text(done.stderr)

    out = made_once("micro-run", make)
    return MicroRun(out, (out / "stdout.txt").read_text(), (out / "stderr.txt").read_text())


def children(recursive: bool = True) -> list[psutil.Process]:
    """This process's children, less Python's resource tracker: a test that creates a
    ``SharedMemory`` in this process (SGLang's shm pointers do) starts it, and it stays, by
    design, until this process ends."""
    tracker = resource_tracker._resource_tracker._pid
    return [child for child in psutil.Process().children(recursive=recursive) if child.pid != tracker]


def _no_children_left(timeout_s: float = 10.0) -> list[psutil.Process]:
    """This process's children still alive after ``timeout_s`` (those ending are waited for)."""
    deadline = time.monotonic() + timeout_s
    while (left := children()) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


@pytest.fixture
def clean() -> Iterator[None]:
    """Before and after: no serbench segment of a dead creator, no child of this process."""
    shm.reclaim_orphans()
    before = set(shm.leftovers())
    yield
    assert _no_children_left() == []
    assert not left_named(before)


# The vLLM plugin's tests (tests/plugins/) run against the real vLLM, which `make test`
# installs; they skip only where it is not installed (`make check`'s install has none).
NEEDS_VLLM = pytest.mark.skipif(
    importlib.util.find_spec("vllm") is None, reason="vLLM not installed: make test installs the pinned one"
)


@pytest.fixture(scope="module")
def vllm():
    """vLLM's modules (``adapter.load``), imported when a test first needs them, not at collection:
    the import costs ~15 s of CPU, which every test process paid before it collected a test; now
    only a process that runs a vLLM test pays, once. Module-scoped so that the cases a test forks
    inherit it instead of importing it again."""
    from serbench.plugins.vllm import adapter

    return adapter.load()


NEEDS_SGLANG = pytest.mark.skipif(
    importlib.util.find_spec("sglang") is None,
    reason="SGLang not installed: make test installs the pinned one",
)


@pytest.fixture(scope="module")
def sglang():
    """SGLang's modules (``adapter.load``), imported when a test first needs them, as ``vllm``'s:
    its import is costlier still, and sets its IPC switch first (docs/sglang.md)."""
    from serbench.plugins.sglang import adapter

    return adapter.load()


def failing_in_background(fn: Callable, args: tuple) -> Callable[[], str]:
    """``fn(*args)`` started in a forked child (``run_isolated``) from a thread, for a test that
    kills part of the case; the function returned waits for the case and returns the one line it
    failed with (asserting that it failed, in one line)."""
    from serbench.model.errors import CaseFailed
    from serbench.runtime.isolation import run_isolated

    outcome: dict[str, BaseException] = {}

    def run() -> None:
        try:
            run_isolated(fn, args, 120)
        except BaseException as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()

    def failure() -> str:
        thread.join(60)
        assert not thread.is_alive()
        error = outcome.get("error")
        assert isinstance(error, CaseFailed), error
        assert "\n" not in str(error), error
        return str(error)

    return failure
