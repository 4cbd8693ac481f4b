"""Remote fan-out workers (``serbench fanout-worker``, ``--fanout-rendezvous``), on localhost.

Two ``serbench fanout-worker`` processes, one rank each, stand for the workers' host; a case of
two workers takes one from each. Cases run in a forked child (``run_isolated``) as the runner
runs them. Nothing here asserts a time: every timed step must have been acknowledged (verified)
by every remote worker, the counts are exact, and a fault ends the case in one line with no
worker process left, while the worker hosts go on to the next case.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import psutil
import pytest
import torch  # noqa: F401  imported before any case is forked, as the runner does
from conftest import _no_children_left, failing_in_background

from serbench.cli import main
from serbench.links import shm
from serbench.model.errors import CaseFailed
from serbench.model.profiles import PROFILES
from serbench.model.results import Case
from serbench.runtime.isolation import run_isolated
from serbench.scenarios import fanout
from serbench.scenarios.fanout import broadcast

ROUNDS, DECODE_STEPS = 2, 1
BASE = PROFILES["quick"].with_options(
    fanout_rounds=ROUNDS, fanout_decode_steps=DECODE_STEPS, fanout_timeout_s=10.0
)


def _free_ports() -> str:
    """tcp://127.0.0.1:PORT with PORT, PORT+1 and PORT+2 free."""
    for _ in range(50):
        port = broadcast.free_port()
        with contextlib.ExitStack() as held:
            try:
                for offset in (1, 2):
                    probe = held.enter_context(socket.socket())
                    probe.bind(("127.0.0.1", port + offset))
            except OSError:
                continue
        return f"tcp://127.0.0.1:{port}"
    raise AssertionError("no three free ports in a row")


class Hosts:
    """The stand-in workers' host: ``serbench fanout-worker`` processes at one rendezvous."""

    def __init__(self, count: int) -> None:
        self.address = _free_ports()
        self.procs = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "serbench",
                    "fanout-worker",
                    "--rendezvous",
                    self.address,
                    "--ranks",
                    "1",
                ],
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(count)
        ]
        self.profile = BASE.with_options(fanout_rendezvous=self.address)
        for proc in self.procs:  # torch imported, serving
            assert "serving up to 1 worker(s)" in proc.stderr.readline()

    def workers(self) -> list[psutil.Process]:
        """The worker processes the hosts run now."""
        return [child for proc in self.procs for child in psutil.Process(proc.pid).children()]

    def idle(self, timeout_s: float = 10.0) -> bool:
        """Whether every host is left with no worker process (within ``timeout_s``)."""
        deadline = time.monotonic() + timeout_s
        while self.workers() and time.monotonic() < deadline:
            time.sleep(0.05)
        return not self.workers()

    def stop(self) -> list[str]:
        """SIGTERM every host; what each wrote, once it exited 0."""
        for proc in self.procs:
            proc.send_signal(signal.SIGTERM)
        logs = [proc.communicate(timeout=20)[1] for proc in self.procs]
        assert [proc.returncode for proc in self.procs] == [0] * len(self.procs), logs
        return logs


@pytest.fixture(scope="module")
def hosts() -> Iterator[Hosts]:
    shm.reclaim_orphans()
    started = Hosts(2)
    try:
        yield started
    finally:
        started.stop()
    assert _no_children_left() == []


def _run(case: Case, profile):
    return fanout.Fanout().run(case, profile)


def _case(workload: str, workers: int, backend: str = "msgspec-frombuffer") -> Case:
    return Case("fanout", backend, workload, transport="torch-dist", workers=workers)


@pytest.mark.parametrize("workload", ["text-sonnet", "images-1"])
def test_remote_workers_verify_every_step_of_every_case(workload: str, hosts: Hosts) -> None:
    for workers in (1, 2):
        outcome = run_isolated(_run, (_case(workload, workers), hosts.profile), 120)
        metrics, info = outcome.metrics, outcome.info
        # a step is recorded only once every worker acknowledged it verified: all were
        assert metrics["encode_calls"].values == [1.0] * ROUNDS * (1 + DECODE_STEPS)
        for name in ("fanout_s", "fanout_spread_s", "fanout_decode_s", "core_cpu_s", "core_copied_bytes"):
            assert len(metrics[name].values) == (
                ROUNDS if name != "fanout_decode_s" else ROUNDS * DECODE_STEPS
            )
        assert metrics["fanout_spread_s"].median >= 0 and metrics["fanout_s"].median > 0
        assert info.worker_hosts == [socket.gethostname()] * workers
        assert len(info.worker_pss_bytes) == workers and not info.oversubscribed
        if workload.startswith("images"):
            assert {"worker_rss_copies", "worker_pss_copies", "worker_uss_copies"} <= set(metrics)
            # gloo's root sends the step to every rank: one copy per worker, viewed not encoded
            assert metrics["core_copied_bytes"].median >= workers * info.payload_bytes
        assert hosts.idle()


def _wrong_checksums(case: Case, profile):
    real = fanout.step_checksum
    fanout.step_checksum = lambda step, crc=None: real(step, crc) + (step.step >= 1)  # the core's only
    return _run(case, profile)


def test_a_remote_worker_checks_the_step_and_its_failure_ends_only_the_case(hosts: Hosts) -> None:
    with pytest.raises(CaseFailed) as failed:
        run_isolated(_wrong_checksums, (_case("text-sonnet", 1), hosts.profile), 120)
    message = str(failed.value)
    assert "step 1" in message and "checksum mismatch" in message and "\n" not in message
    assert hosts.idle() and all(proc.poll() is None for proc in hosts.procs)  # waiting for the next


def test_a_remote_worker_killed_mid_run_fails_the_case_in_one_line(hosts: Hosts) -> None:
    case = _case("text-sonnet", 2)
    long = hosts.profile.with_options(fanout_rounds=100_000)
    failure = failing_in_background(_run, (case, long))
    deadline = time.monotonic() + 60
    while len(hosts.workers()) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(1.0)  # past setup: stepping
    victim = hosts.workers()[0]
    victim.kill()
    message = failure()
    assert "died" in message and "SIGKILL" in message
    assert hosts.idle()  # the other worker ended with the case; the hosts wait for the next
    assert all(proc.poll() is None for proc in hosts.procs)


def test_a_remote_host_refuses_an_unsafe_backend_unless_allowed() -> None:
    told = {"backend": "pickle", "workload": "text-sonnet", "batch": 2, "decode_steps": 1, "hold": 2}
    with pytest.raises(ValueError, match="refusing unsafe backend 'pickle'"):
        fanout.remote_work(told, allow_unsafe=False, loopback=False)
    assert fanout.remote_work(told, allow_unsafe=False, loopback=True).hold == 2
    assert fanout.remote_work(told, allow_unsafe=True, loopback=False).hold == 2


@pytest.mark.parametrize(
    "args, expected",
    [
        (["--transport", "zmq-each,torch-dist"], "--fanout-rendezvous is for --transport torch-dist only"),
        ([], "this run's fanout cases also have --transport shm-ring"),  # the default transport
    ],
)
def test_the_rendezvous_with_another_transport_is_a_usage_error(args, expected, capsys) -> None:
    argv = ["run", "--scenarios", "fanout", "--fanout-rendezvous", "tcp://127.0.0.1:29500", *args]
    assert main([*argv, "--workloads", "text-sonnet", "--out", "unused"]) == 2
    err = capsys.readouterr().err.strip()
    assert expected in err and "\n" not in err
