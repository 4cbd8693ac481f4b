"""The ipc path counted (``--measure instructions``): both sides of a request in one process,
each checked, what is not counted, and real counts under callgrind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from suite_paths import ROOT

from serbench.analysis import attribution
from serbench.model.errors import IntegrityError
from serbench.model.metrics import metric
from serbench.model.results import Case
from serbench.probes import instructions
from serbench.scenarios.engine.staging import Staging
from serbench.scenarios.ipc import counted as ipc_counted

SLOWED = "serbench.testing:slowed:base=msgspec-frombuffer,factor={},slot={}"


@pytest.mark.parametrize("link", ["ipc", "shm"])
@pytest.mark.parametrize("workload", ["text-sonnet", "images-1"])
def test_a_request_goes_from_the_frontends_code_to_the_engines_and_is_checked(
    clean, link: str, workload: str
) -> None:
    """What each counted call does, without valgrind: the frontend's send hands the message over,
    the engine's receive decodes it as the engine does (over shm from the region), the check
    passes and gives the space back; nothing is left in /dev/shm (``clean``: this test's own
    segments, not those of tests running beside it)."""
    request = ipc_counted.workload_request(workload)
    with ipc_counted.in_process_session("msgspec-frombuffer", workload, link, request) as path:
        for _ in range(3):  # more than the region holds at once over shm: space is given back
            path.send()
            received = path.receive()
            ctrl, decoded, _ = received
            assert decoded.request_id == request.request_id
            assert ("shm" in ctrl.data) == (link == "shm" and workload != "text-sonnet")
            path.check(received)
        assert not path.handed
        if path.link.placer is not None:
            assert path.link.placer.ring.held_bytes == 0


def test_a_request_that_changed_on_the_way_fails_the_check() -> None:
    request = ipc_counted.workload_request("images-1")
    with ipc_counted.in_process_session("msgspec-frombuffer", "images-1", "ipc", request) as path:
        path.send()
        header, *frames = path.handed[0]
        tampered = bytearray(frames[-1])
        tampered[len(tampered) // 2] ^= 0xFF
        path.handed[0] = [header, *frames[:-1], tampered]
        with pytest.raises(IntegrityError, match="another request than the one sent"):
            path.check(path.receive())


def test_what_is_not_counted_says_why() -> None:
    assert ipc_counted.not_counted("none", "request", None, None) is None
    assert "cached" in ipc_counted.not_counted("lru", "request", None, None)
    assert "outputs" in ipc_counted.not_counted("none", "outputs", None, None)
    assert "--engine" in ipc_counted.not_counted("none", "request", "tcp://127.0.0.1:5555", None)
    assert "device" in ipc_counted.not_counted("none", "request", None, Staging("cpu", "none"))


@pytest.fixture(scope="module")
def counted(made_once) -> tuple[dict, Path]:
    """One ipc run under callgrind: the test backend twice as is and once 10 % slowed (text:
    a payload's windows are few calls of millions of instructions, and take longer)."""
    if instructions.cannot_launch():
        pytest.skip(f"{instructions.cannot_launch()}: `make test` installs it")

    def make(out: Path) -> None:
        backends = ",".join([SLOWED.format(1.0, 0), SLOWED.format(1.0, 1), SLOWED.format(1.10, 2)])
        command = [sys.executable, "-m", "serbench", "run", "--scenarios", "ipc", "--measure", "instructions"]
        command += ["--backends", backends, "--workloads", "text-sonnet", "--out", str(out)]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]

    out = made_once("ipc-counted", make)
    records = json.loads((out / "results.json").read_text())["records"]
    return {(r["backend"], r["workload"]): r for r in records}, out


def test_the_same_work_counts_the_same_and_a_slower_decode_more(counted: tuple[dict, Path]) -> None:
    """Two slots of the same backend are the same work: their counts agree within half the
    metric's own tolerance (the gate's 1 %), so the gate never flags them; the one whose encode
    and decode do 10 % more work costs each side more: its decode's share of the engine's
    receive, and the slowed backend's own bookkeeping (up to 15 % in all).

    Not 0.1 %: a slot's receive count carries its process's history, and one full test run on
    the 2-vCPU VM read the two slots 0.12 % apart (129,254 and 129,097 instructions)."""
    records, _ = counted
    first, second, slowed = (
        records[(SLOWED.format(f, s), "text-sonnet")] for f, s in ((1.0, 0), (1.0, 1), (1.10, 2))
    )
    for record in (first, second, slowed):
        assert record["error"] is None and record["info"]["kind"] == "ipc-counted"
        assert set(record["metrics"]) == {"send_instructions", "receive_instructions"}
    for name in ("send_instructions", "receive_instructions"):
        same = second["metrics"][name]["median"] / first["metrics"][name]["median"]
        assert same == pytest.approx(1.0, abs=metric(name).tolerance / 2), name
    receive = (
        slowed["metrics"]["receive_instructions"]["median"]
        / first["metrics"]["receive_instructions"]["median"]
    )
    assert 1.02 < receive < 1.15


def test_each_sides_windows_are_kept_for_attribution(counted: tuple[dict, Path]) -> None:
    _, out = counted
    case = Case("ipc", SLOWED.format(1.10, 2), "text-sonnet", transport="ipc")
    folder = instructions.profile_folder(out, case)
    for name in ("send_instructions", "receive_instructions"):
        costs = attribution.per_call(folder, name)
        assert costs is not None and sum(costs.values()) > 10_000, name
