"""The engine side: safety on the network, the standalone command, and faults mid-run.

Faults end their case with a clear error, leave no process and no ipc
folder behind, and do not stop the run.
"""

from __future__ import annotations

import math
import multiprocessing as mp
import os
import signal
import socket
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import psutil
import pytest
import zmq
from conftest import children

from serbench import cli as commands
from serbench.cli import options
from serbench.links import transport
from serbench.links.transport import DEFAULT_BIND
from serbench.model import errors
from serbench.model.errors import CaseFailed, EngineError
from serbench.model.profiles import PROFILES
from serbench.model.results import load as load_results
from serbench.present.serving import serving_report
from serbench.runner.matrix import Plan, execute
from serbench.runtime.isolation import kill_tree, run_isolated
from serbench.scenarios.engine.client import EngineLink
from serbench.scenarios.engine.protocol import Control
from serbench.scenarios.engine.server import Engine, open_session
from serbench.scenarios.ipc import Ipc, Settings, measure
from serbench.serializers import get_serializer
from serbench.serializers.tensors import UNCARRIED_DTYPES
from serbench.workloads.messages import EngineCoreOutputs

TEXT = "text-sonnet:output_len=6"
SETTINGS = Settings(num_prompts=4, rates=(math.inf,), max_concurrency=None, floor=2, step_s=0.002)


pytestmark = pytest.mark.usefixtures("ipc_sandbox")


# ---- safety -------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["pickle", "pickle-oob", "cloudpickle"])
def test_unsafe_backend_is_refused_on_a_non_loopback_address(backend: str) -> None:
    start = Control("start", "s", {"backend": backend, "step_s": 0.0})
    with pytest.raises(ValueError, match=r"refusing unsafe backend .*--allow-unsafe-deserialization"):
        open_session(start, "tcp://0.0.0.0:5555", allow_unsafe=False)
    assert open_session(start, "tcp://0.0.0.0:5555", allow_unsafe=True).id == "s"
    assert open_session(start, "tcp://127.0.0.1:5555", allow_unsafe=False).id == "s"
    assert open_session(start, "ipc:///tmp/x/requests", allow_unsafe=False).id == "s"


def test_backend_by_dotted_path_is_refused_even_on_loopback() -> None:
    start = Control("start", "s", {"backend": "os:system:command=true", "step_s": 0.0})
    with pytest.raises(ValueError, match="dotted path"):
        open_session(start, "tcp://127.0.0.1:5555", allow_unsafe=False)


def test_safe_backend_is_accepted_anywhere() -> None:
    start = Control("start", "s", {"backend": "msgspec-frombuffer", "step_s": 0.0})
    assert open_session(start, "tcp://0.0.0.0:5555", allow_unsafe=False).id == "s"


def test_engine_binds_loopback_by_default() -> None:
    args = commands.build_parser().parse_args(["engine"])
    assert args.bind == DEFAULT_BIND
    assert transport.is_loopback(args.bind)
    assert not args.allow_unsafe_deserialization


@pytest.fixture
def engine_on(tmp_path: Path) -> Iterator[tuple[zmq.Context, transport.Addresses]]:
    """An Engine in a thread, bound on ipc but told it listens on a public address."""
    ctx = zmq.Context()
    addrs = transport.ipc_addresses(tmp_path)
    requests, outputs = transport.bind_engine(ctx, addrs, linger_ms=0)
    engine = Engine(requests, outputs, "tcp://0.0.0.0:5555")
    thread = threading.Thread(target=engine.serve)
    thread.start()
    yield ctx, addrs
    engine.stop()
    thread.join()
    requests.close()
    outputs.close()
    ctx.term()


def test_engine_refuses_pickle_over_the_wire_and_keeps_serving(engine_on) -> None:
    ctx, addrs = engine_on
    push, pull = transport.connect_frontend(ctx, addrs)
    try:
        push.send(b"\xc1 not a header")  # garbage is ignored, not fatal
        link = EngineLink(push, pull, addrs.requests, None)
        link.send("start", backend="pickle", step_s=0.0)
        with pytest.raises(EngineError, match="refusing unsafe backend 'pickle'"):
            link.expect("ready", 5)
        link = EngineLink(push, pull, addrs.requests, None)
        link.send("start", backend="msgspec-frombuffer", step_s=0.0)
        link.expect("ready", 5)
        assert transport.round_trip_floor(push, pull, 2)
    finally:
        push.close()
        pull.close()


def test_bad_bind_is_a_one_line_usage_error(capsys: pytest.CaptureFixture) -> None:
    assert commands.main(["engine", "--bind", "http://127.0.0.1:80"]) == errors.EXIT_USAGE
    assert capsys.readouterr().err.count("\n") == 1


# ---- two OS processes over tcp ------------------------------------------------


def _free_port_pair() -> int:
    """A port P with P and P+1 free on loopback (requests and outputs)."""
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        with socket.socket() as other:
            try:
                other.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
        return port
    raise RuntimeError("no free port pair")


def _cli_in_fork(argv: list[str], tmpdir: Path) -> mp.Process:
    """``serbench ARGV`` in a forked child (no second torch import), temp files in ``tmpdir``."""

    def main() -> None:
        tempfile.tempdir = str(tmpdir)
        os._exit(commands.main(argv))

    proc = mp.get_context("fork").Process(target=main)
    proc.start()
    return proc


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


def test_run_drives_a_separately_started_engine_over_tcp(tmp_path: Path) -> None:
    """`serbench engine` in an OS process of its own, driven by `run --engine` options from this one."""
    port = _free_port_pair()
    url = f"tcp://127.0.0.1:{port}"
    engine = _cli_in_fork(["engine", "--bind", url], tmp_path)
    try:
        assert _wait_for(lambda: _listening(port), 30)
        args = commands.build_parser().parse_args(
            ["run", "--engine", url, "--num-prompts", "3", "--step-ms", "1"]
        )
        profile = options.profile(args)
        plan = Plan(["msgspec-frombuffer", "pickle"], [TEXT], ["ipc"])
        data = execute(plan, profile, tmp_path / "results.json", argv=[]).results
        records = data.records
        assert [r.error for r in records] == [None, None]
        assert {r.info.local_engine for r in records} == {False}
        # text at its rate is measured in rounds, each visit its share of the 3 requests: one
        sent = Ipc.min_rounds * math.ceil(3 / Ipc.min_rounds)
        assert {r.rounds for r in records} == {Ipc.min_rounds}
        assert {r.info.output_tokens for r in records} == {sent * 6}
        header, _, *rows = serving_report(data).splitlines()
        assert header.split() == [TEXT, "msgspec-frombuffer", "pickle"]
        assert rows[0].split()[-2:] == [str(sent), str(sent)]  # successful requests
        assert any(row.startswith("P99 TTFT (ms)") for row in rows)
    finally:
        os.kill(engine.pid, signal.SIGTERM)
        engine.join(20)
        kill_tree(engine.pid)
    assert engine.exitcode == 0


# ---- faults ---------------------------------------------------------------------


def _sender_that(action, at: int):
    """A sender that runs ``action()`` just before the ``at``-th request (1-based)."""
    count = []

    def send(sock: zmq.Socket, frames: list) -> None:
        count.append(1)
        if len(count) == at:
            action()
        transport.send(sock, frames)

    return send


def _the_engine() -> psutil.Process:
    (child,) = children(recursive=False)
    return child


def test_engine_killed_mid_run_fails_the_case_cleanly() -> None:
    kill = _sender_that(lambda: _the_engine().kill(), at=3)
    with pytest.raises(EngineError, match=r"engine process died \(killed by SIGKILL\)"):
        measure("msgspec-frombuffer", TEXT, SETTINGS, kill)


def _frontend_that_dies(pid_file: Path) -> None:
    """Runs in a forked child: a case whose frontend is SIGKILLed mid-run."""

    def die() -> None:
        pid_file.write_text(str(_the_engine().pid))
        os.kill(os.getpid(), signal.SIGKILL)

    measure("msgspec-frombuffer", TEXT, SETTINGS, _sender_that(die, at=3))


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_frontend_killed_mid_run_takes_its_engine_along(tmp_path: Path) -> None:
    pid_file = tmp_path / "engine.pid"
    with pytest.raises(CaseFailed, match="SIGKILL"):
        run_isolated(_frontend_that_dies, (pid_file,), timeout=60)
    engine = int(pid_file.read_text())
    assert _wait_for(lambda: _gone(engine), 10), "engine outlived its frontend"


def _grandchildren(pid: int) -> bool:
    """Whether a child of ``pid`` has a child of its own (a case's engine)."""
    try:
        return any(child.children() for child in psutil.Process(pid).children())
    except psutil.NoSuchProcess:
        return False


def _wait_for(condition, timeout_s: float) -> bool:
    """Poll ``condition`` until true or ``timeout_s`` passed; its last value."""
    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.05)
    return bool(condition())


def test_an_ipc_folder_whose_creator_died_is_removed_by_the_next_one(ipc_sandbox: Path) -> None:
    child = mp.get_context("fork").Process(target=os._exit, args=(0,))
    child.start()
    child.join()
    orphan, living = ipc_sandbox / f"{transport.IPC_PREFIX}dead", ipc_sandbox / f"{transport.IPC_PREFIX}alive"
    for folder, creator in ((orphan, child.pid), (living, os.getppid())):
        folder.mkdir()
        (folder / transport.CREATOR).write_text(str(creator))
    with transport.ipc_dir() as folder:
        assert (folder / transport.CREATOR).read_text() == str(os.getpid())
        assert not orphan.exists() and living.exists()
    transport.remove_ipc_dir(living)


def test_ctrl_c_mid_case_leaves_no_process_and_no_socket_file(tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    options = ["--backends", "msgspec-frombuffer", "--workloads", "text-sonnet", "--num-prompts", "400"]
    run = _cli_in_fork(["run", "--scenarios", "ipc", *options, "--out", str(tmp_path / "out")], tmp)
    try:
        engine_seen = _wait_for(lambda: _grandchildren(run.pid), 60)
        started = [p.pid for p in psutil.Process(run.pid).children(recursive=True)]
        os.kill(run.pid, signal.SIGINT)
        run.join(30)
    finally:
        kill_tree(run.pid)
    assert engine_seen, "the ipc case never started an engine"
    assert run.exitcode == 130
    assert all(_gone(pid) for pid in started), "process left behind"
    assert not list(tmp.glob(f"{transport.IPC_PREFIX}*")), "ipc folder left behind"
    assert load_results(tmp_path / "out" / "results.json").complete is False


class Flaky:
    """msgspec-frombuffer, except that one outputs message in a hundred fails to decode."""

    name = "flaky"
    safe = True
    unsupported = UNCARRIED_DTYPES  # what the msgspec-frombuffer it wraps declares

    def __init__(self) -> None:
        self.inner = get_serializer("msgspec-frombuffer")
        self.outputs_decoded = 0

    def encode(self, obj: Any) -> list:
        return self.inner.encode(obj)

    def decode(self, frames: Sequence, type_: type) -> Any:
        if type_ is EngineCoreOutputs:
            self.outputs_decoded += 1
            if self.outputs_decoded % 100 == 0:
                raise ValueError(f"flaky: refusing outputs message #{self.outputs_decoded}")
        return self.inner.decode(frames, type_)


def flaky() -> Flaky:
    return Flaky()


def test_backend_failing_one_message_in_a_hundred_fails_only_its_case(tmp_path: Path) -> None:
    plan = Plan([f"{__name__}:flaky", "msgspec-frombuffer"], ["text-sonnet:output_len=120"], ["ipc"])
    profile = PROFILES["quick"].with_options(ipc_num_prompts=1, ipc_step_ms=0.0, ipc_rates=(math.inf,))
    results = execute(plan, profile, tmp_path / "results.json", argv=[])
    errors = {r.backend: r.error for r in results.results.records}
    assert "could not decode an outputs message: ValueError: flaky: refusing outputs message #100" in (
        errors[f"{__name__}:flaky"] or ""
    )
    assert errors["msgspec-frombuffer"] is None
