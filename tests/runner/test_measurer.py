"""The measurer protocol (``serbench.runner.protocol``) through ``python -m
serbench.runner.measurer``, and the case dimensions' flags, parsed once on the command line and
handed to the measurers as values."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from suite_paths import ROOT

import serbench
from serbench import cli as commands
from serbench.cli import build_parser, options
from serbench.gate import measure as gate
from serbench.gate.revision import Revision, run_options
from serbench.links.transport import KINDS
from serbench.model import results
from serbench.model.errors import EXIT_USAGE, GateError, UsageError
from serbench.model.profiles import PROFILES
from serbench.model.results import Case
from serbench.runner import measurer, protocol
from serbench.runner.matrix import Plan
from serbench.runner.protocol import Failed, Measure, Measured, Progress, Ready, Setup
from serbench.scenarios import dimensions

MICRO = protocol.Plan(["msgspec-frombuffer"], ["text-sonnet"], ["micro"])


def start(
    cwd: Path = ROOT, pythonpath: Path | None = None, stderr: Any = subprocess.PIPE
) -> subprocess.Popen:
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    command = [sys.executable, "-m", "serbench.runner.measurer"]
    pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "stderr": stderr}
    return subprocess.Popen(command, cwd=cwd, env=env, **pipes)


def test_the_measurer_says_hello_first_with_its_protocol_and_capabilities() -> None:
    """Its first line, before it reads anything: the protocol version and what it can do
    (what the gate read from `serbench run --help` before); end of file before a setup is a
    clean end."""
    proc = start()
    first = json.loads(proc.stdout.readline())
    proc.stdin.close()
    assert proc.wait(timeout=60) == 0
    assert first["kind"] == "hello" and first["protocol"] == protocol.PROTOCOL == 1
    assert first["serbench"] == serbench.__version__
    assert {protocol.MEASURE_CASE, protocol.INSTRUCTIONS, protocol.PROGRESS} <= set(first["capabilities"])
    assert first["dimensions"] == sorted(dimensions()) and "transport" in first["dimensions"]
    assert "measure" in first["options"]
    assert Path(first["code"]) == ROOT / "serbench"
    assert proc.stdout.read() == b""


def test_setup_and_measure_round_trip(tmp_path: Path) -> None:
    """Setup → Ready(cases) → Measure → Progress, Measured, with the results where asked;
    a case it does not have measures nothing; end of file ends it."""
    proc = start()
    client = protocol.Client(proc)
    try:
        assert client.hello(120).protocol == protocol.PROTOCOL
        client.send(Setup(MICRO, protocol.Profile("quick"), ["run", "--from-a-test"], progress=True))
        (case,) = client.reply(Ready, 300).cases
        assert case == Case("micro", "msgspec-frombuffer", "text-sonnet")
        seen: list[Progress] = []
        client.send(Measure(str(tmp_path / "one"), case))
        assert client.reply(Measured, 300, progress=seen.append).out == str(tmp_path / "one")
        assert [(p.index, p.total, p.case) for p in seen] == [(0, 1, case)]
        client.send(Measure(str(tmp_path / "none"), Case("micro", "pickle", "text-sonnet")))
        client.reply(Measured, 300)
    finally:
        proc.stdin.close()
    assert proc.wait(timeout=60) == 0
    measured = results.load(tmp_path / "one" / "results.json")
    (record,) = measured.records
    assert measured.complete and record.case == case and record.ok
    assert record.metrics["decode_s"].n > 1
    assert measured.environment.command[1:] == ["run", "--from-a-test"]
    assert results.load(tmp_path / "none" / "results.json").records == []


def test_a_setup_that_cannot_run_is_failed_in_one_line() -> None:
    proc = start()
    client = protocol.Client(proc)
    client.hello(120)
    client.send(
        Setup(protocol.Plan(["no-such-backend"], ["text-sonnet"], ["micro"]), protocol.Profile("quick"))
    )
    with pytest.raises(protocol.MeasurerError, match="no-such-backend"):
        client.reply(Ready, 300)
    assert proc.wait(timeout=60) == EXIT_USAGE
    assert b"no-such-backend" in proc.stderr.read()


def test_a_dimension_value_the_measurer_does_not_take_is_refused() -> None:
    proc = start()
    client = protocol.Client(proc)
    client.hello(120)
    plan = protocol.Plan(["pickle"], ["text-sonnet"], ["ipc"], {"transport": ("udp",)})
    client.send(Setup(plan, protocol.Profile("quick")))
    with pytest.raises(protocol.MeasurerError, match=r"--transport: unknown udp; transports: ipc, tcp, shm"):
        client.reply(Ready, 300)
    assert proc.wait(timeout=60) == EXIT_USAGE


def test_a_serbench_without_a_measurer_never_says_hello(tmp_path: Path) -> None:
    """A tree from before serbench.runner.measurer: `python -m serbench.runner.measurer` there finds
    none (or the editable install's, which is another tree's and says so): no hello, a line on stderr."""
    (tmp_path / "serbench").mkdir()
    (tmp_path / "serbench" / "__init__.py").write_text('__version__ = "0.0.1"\n')
    proc = start(cwd=tmp_path, pythonpath=tmp_path)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode != 0 and out == b""
    assert b"measurer" in err


NOISY = """
from serbench.serializers import get_serializer, unsupported_cases


class Noisy:
    name = "noisy"
    safe = True

    def __init__(self):
        self.inner = get_serializer("msgspec-frombuffer")
        self.unsupported = unsupported_cases(self.inner)

    def encode(self, obj):
        if not hasattr(self, "said"):  # once per process: stdout is not read, it may fill
            print("encoding", flush=True)
            self.said = True
        return self.inner.encode(obj)

    def decode(self, frames, type_):
        return self.inner.decode(frames, type_)


def make():
    return Noisy()
"""


def test_what_a_backend_prints_does_not_break_a_message(tmp_path: Path) -> None:
    """The protocol has its own copy of stdout; fd 1 of the measurer and its forks is stderr."""
    (tmp_path / "noisy_backend.py").write_text(NOISY)
    with (tmp_path / "err").open("wb") as err:
        proc = start(cwd=tmp_path, stderr=err)
    client = protocol.Client(proc)
    try:
        client.hello(120)
        plan = protocol.Plan(["noisy_backend:make"], ["text-sonnet"], ["micro"])
        client.send(Setup(plan, protocol.Profile("quick")))
        client.reply(Ready, 300)
        client.send(Measure(str(tmp_path / "out")))
        client.reply(Measured, 300)
    finally:
        proc.stdin.close()
    assert proc.wait(timeout=60) == 0
    (record,) = results.load(tmp_path / "out" / "results.json").records
    assert record.ok
    assert "encoding" in (tmp_path / "err").read_text()


def test_scenario_options_travel_as_text_and_come_back_exactly() -> None:
    """A value JSON has no form for (the rate inf) comes back as the option's own parse makes it."""
    profile = PROFILES["quick"].with_options(ipc_rates=(10.0, 0.1, math.inf), measure="instructions")
    message = protocol.profile_message(profile)
    assert message.options == {"ipc_rates": "10.0,0.1,inf", "measure": "instructions"}
    assert measurer.profile_of(message) == profile
    with pytest.raises(UsageError, match="no scenario option 'nope'"):
        measurer.profile_of(protocol.Profile("quick", {"nope": "1"}))
    with pytest.raises(UsageError, match="--rate"):
        measurer.profile_of(protocol.Profile("quick", {"ipc_rates": "-1"}))


def test_a_channel_keeps_what_it_read_past_a_line_and_times_out() -> None:
    reading, writing = os.pipe()
    channel = protocol.Channel(reading, writing, protocol.FromMeasurer)
    try:
        channel.send(Measured("a"))
        channel.send(Failed("b"))  # both in one read
        assert channel.receive(1) == Measured("a")
        assert channel.receive(1) == Failed("b")
        with pytest.raises(TimeoutError):
            channel.receive(0.1)
        channel.write_line(b'{"kind": "nonsense"}')
        with pytest.raises(protocol.MeasurerError, match="not a message"):
            channel.receive(1)
    finally:
        os.close(writing)
    assert channel.receive(1) is None  # end of file
    os.close(reading)


# ---------------------------------------------------------------- the dimensions' flags


@pytest.mark.parametrize("command", ["run", "gate"])
def test_every_dimension_is_a_flag_of_run_and_gate(command: str, capsys) -> None:
    with pytest.raises(SystemExit):
        commands.main([command, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for dimension in dimensions().values():
        assert f"{dimension.flag} {dimension.field.upper()}" in text
        assert all(str(choice) in text for choice in dimension.choices or ())


@pytest.mark.parametrize("command", [["run", "--scenarios", "micro"], ["gate", "--base", "HEAD"]])
def test_a_bad_transport_is_exit_2_and_one_line_naming_the_transports(command, capsys, tmp_path) -> None:
    assert commands.main([*command, "--transport", "ipc,udp", "--out", str(tmp_path / "out")]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert f"--transport: unknown udp; transports: {', '.join(KINDS)}" in err
    assert not (tmp_path / "out").exists()  # before anything was made


def test_the_plan_carries_the_values_parsed_once() -> None:
    parser = build_parser()
    args = parser.parse_args(["run", "--transport", "shm, ipc,shm", "--backends", "pickle"])
    plan = options.plan(args)
    assert plan.dimensions == {"transport": ("shm", "ipc")}  # parsed, repeats dropped, order kept
    assert options.plan(parser.parse_args(["run"])).dimensions == {}  # not given: the default
    with pytest.raises(UsageError, match="unknown empty"):
        options.plan(parser.parse_args(["run", "--transport", ","]))


def test_the_gate_hands_its_measurers_the_values_not_the_text(monkeypatch, tmp_path) -> None:
    """The gate's plan carries the tuple; its measurer's Setup carries it typed; only a revision
    from before serbench.runner.measurer gets it back as an option's text."""
    asked = {}

    def measure(repo, base_ref, plan, profile, rounds, out, log, counting, runtimes, stopping):
        asked["plan"] = plan
        raise GateError("stop here")

    monkeypatch.setattr(gate, "measure", measure)
    argv = ["gate", "--base", "HEAD", "--transport", "ipc,shm", "--scenarios", "ipc"]
    assert commands.main([*argv, "--out", str(tmp_path / "out")]) == EXIT_USAGE
    plan = asked["plan"]
    assert isinstance(plan, Plan) and plan.dimensions == {"transport": ("ipc", "shm")}
    revision = Revision("base", ROOT, plan, PROFILES["quick"])
    sent = json.loads(protocol._ENCODER.encode(revision.setup()))
    assert sent["plan"]["dimensions"] == {"transport": ["ipc", "shm"]}
    assert sent["plan"]["workloads"] == ["text-sonnet", "images-4"]
    legacy = run_options(plan, PROFILES["quick"])
    assert legacy[legacy.index("--transport") + 1] == "ipc,shm"
    assert "--transport" not in run_options(Plan(["pickle"], ["text-sonnet"], ["ipc"]), PROFILES["quick"])
