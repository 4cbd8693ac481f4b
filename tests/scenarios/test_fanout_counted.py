"""The second hop counted (``--measure instructions``): the core and its workers in one process
over the transports' own code, each step checked, what is not counted, and real counts under
callgrind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from suite_paths import ROOT

from serbench.analysis import attribution
from serbench.model.results import Case
from serbench.probes import instructions
from serbench.scenarios.fanout import counted as fanout_counted
from serbench.scenarios.fanout import steps as fanout_steps
from serbench.serializers import get_serializer

SLOWED = "serbench.testing:slowed:base=msgspec-frombuffer,factor={},slot={}"


def _message(workload: str, index: int) -> tuple[tuple, object]:
    prefills, schedule = fanout_steps.case_steps(workload, 4, 1, "none")
    step = schedule.step(index, prefills)
    return (step, fanout_steps.step_checksum(step, prefills.crc(0) if step.new_requests else 0)), step


@pytest.mark.parametrize("kind", fanout_counted.KINDS)
@pytest.mark.parametrize("workers", [1, 3])
def test_every_worker_takes_each_step_and_checks_it(clean, kind: str, workers: int) -> None:
    """What each counted call does, without valgrind: the core publishes over the transport's
    own sender, each worker's receiver takes and decodes the step and the check passes; more
    steps than the ring has slots go through; nothing is left in /dev/shm (``clean``)."""
    message, step = _message("images-1", 0)
    serializer = get_serializer("msgspec-frombuffer")

    def decode(frames):
        return serializer.decode(frames, type(step))

    with fanout_counted.in_process_fanout(
        kind, workers, message, serializer.encode, decode, fanout_steps.check_step
    ) as path:
        for _ in range(6):
            path.publish()
            decoded = path.take(0)
            assert decoded.step == step.step and len(decoded.new_requests) == 1
            path.settle(0, decoded)
            path.others()
        assert not any(r.sock.queue for r in path.receivers if hasattr(r, "sock"))  # every step taken


def test_a_step_that_is_not_the_one_sent_fails_the_check() -> None:
    message, step = _message("text-sonnet", 1)
    serializer = get_serializer("pickle")
    with fanout_counted.in_process_fanout(
        "zmq-each",
        1,
        message,
        serializer.encode,
        lambda f: serializer.decode(f, type(step)),
        fanout_steps.check_step,
    ) as path:
        path.checksum ^= 1
        path.publish()
        with pytest.raises(ValueError, match="checksum mismatch"):
            path.settle(0, path.take(0))


def test_what_is_not_counted_says_why() -> None:
    assert all(fanout_counted.not_counted(kind, "none", "") is None for kind in fanout_counted.KINDS)
    assert "other ranks" in fanout_counted.not_counted("torch-dist", "none", "")
    assert "cached" in fanout_counted.not_counted("shm-ring", "lru", "")
    assert "another host" in fanout_counted.not_counted("zmq-each", "none", "tcp://10.0.0.2:29500")


@pytest.fixture(scope="module")
def counted(made_once) -> tuple[dict, Path]:
    """One fan-out run under callgrind, two workers over the ring: the test backend as is and
    10 % slowed (text, a batch of 4: its windows are many short calls)."""
    if instructions.cannot_launch():
        pytest.skip(f"{instructions.cannot_launch()}: `make test` installs it")

    def make(out: Path) -> None:
        command = [
            sys.executable,
            "-m",
            "serbench",
            "run",
            "--scenarios",
            "fanout",
            "--measure",
            "instructions",
        ]
        command += [
            "--backends",
            f"{SLOWED.format(1.0, 0)},{SLOWED.format(1.10, 1)}",
            "--workloads",
            "text-sonnet",
        ]
        command += ["--transport", "shm-ring", "--workers", "2", "--fanout-batch", "4", "--out", str(out)]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]

    out = made_once("fanout-counted", make)
    records = json.loads((out / "results.json").read_text())["records"]
    return {r["backend"]: r for r in records}, out


def test_a_slower_decode_costs_the_worker_more_and_the_core_its_encode(counted: tuple[dict, Path]) -> None:
    records, _ = counted
    plain, slowed = records[SLOWED.format(1.0, 0)], records[SLOWED.format(1.10, 1)]
    names = {
        "core_instructions",
        "worker_instructions",
        "core_decode_instructions",
        "worker_decode_instructions",
    }
    for record in (plain, slowed):
        assert record["error"] is None and record["info"]["kind"] == "fanout-counted"
        assert set(record["metrics"]) == names and record["info"]["workers"] == 2
    for name in names:
        ratio = slowed["metrics"][name]["median"] / plain["metrics"][name]["median"]
        assert 1.005 < ratio < 1.3, name


def test_the_workers_windows_are_kept_for_attribution(counted: tuple[dict, Path]) -> None:
    _, out = counted
    case = Case("fanout", SLOWED.format(1.10, 1), "text-sonnet", transport="shm-ring", workers=2)
    folder = instructions.profile_folder(out, case)
    for name in ("core_instructions", "worker_instructions"):
        costs = attribution.per_call(folder, name)
        assert costs is not None and sum(costs.values()) > 10_000, name
