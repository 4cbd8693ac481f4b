"""The engine's stage after decode (``--engine-device``, ``--pin``): CPU here, CUDA where there is one.

The CPU path runs everywhere: the stage, its metric in ipc and memory, the
usage errors before any case. The CUDA path (pinned copies, receiving into
pinned buffers) runs where ``torch.cuda.is_available()``; elsewhere those
tests are skipped with that reason.

This process never initialises CUDA (its forked engines could not use it
afterwards): whether there is a device is asked in a child, and tests that
touch CUDA themselves run their body in one (``run_isolated``).
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest
import torch
import zmq

from serbench import cli as commands
from serbench.model.errors import EngineError, UsageError
from serbench.model.profiles import PROFILES
from serbench.model.results import Accelerator, Device, Phase
from serbench.present.html.run_page import accelerator_rows
from serbench.probes import environment
from serbench.runner.matrix import Plan, execute
from serbench.runtime.isolation import run_isolated
from serbench.scenarios import device
from serbench.scenarios.engine.client import open_link
from serbench.scenarios.engine.protocol import Control, request_checksum
from serbench.scenarios.engine.server import open_session
from serbench.scenarios.engine.staging import Stager, Staging, parse_device, recv_pinned, unavailable
from serbench.scenarios.ipc import Settings, measure
from serbench.scenarios.memory import phases
from serbench.serializers import get_serializer
from serbench.workloads import get_workload
from serbench.workloads.tree import arrays, payload_bytes, payload_checksum

IMAGES = "images-2:profile=llava"
CUDA = environment.accelerator().cuda_available  # asked in a child
CHILD_TIMEOUT_S = 120.0
needs_cuda = pytest.mark.skipif(not CUDA, reason="needs a CUDA device (torch.cuda.is_available() is False)")


def settings(**changes) -> Settings:
    base = {"num_prompts": 2, "rates": (math.inf,), "max_concurrency": 1, "floor": 2, "step_s": 0.001}
    return Settings(**{**base, **changes})


def tensors(message) -> list[torch.Tensor]:
    return list(arrays(message))


# ---- options and what this machine can do ---------------------------------------------


@pytest.mark.parametrize("text", ["cpu", "cuda", "cuda:0", "cuda:12"])
def test_device_names_that_parse(text: str) -> None:
    assert parse_device(text) == text


@pytest.mark.parametrize("text", ["gpu", "cuda:", "cuda:x", "CPU", "cuda:0,1", ""])
def test_device_names_that_do_not(text: str) -> None:
    with pytest.raises(ValueError, match="cpu, cuda or cuda:N"):
        parse_device(text)


def test_pinning_needs_a_gpu_device_and_cuda_needs_cuda() -> None:
    with pytest.raises(ValueError, match="pin must be one of"):
        Staging("cpu", "always")
    assert unavailable(Staging("cpu")) is None
    assert "needs --engine-device cuda" in unavailable(Staging("cpu", "decode"))
    for pin in ("none", "receive"):
        assert (run_isolated(unavailable, (Staging("cuda", pin),), CHILD_TIMEOUT_S) is None) == CUDA


def test_staging_from_the_options() -> None:
    quick = PROFILES["quick"]
    assert device.staging(quick) is None
    assert device.staging(quick.with_options(engine_device="cpu")) == Staging("cpu", "none")
    assert device.staging(quick.with_options(engine_device="cuda:1", pin="receive")) == Staging(
        "cuda:1", "receive"
    )
    with pytest.raises(UsageError, match="--pin decode needs --engine-device"):
        device.staging(quick.with_options(pin="decode"))


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--pin", "decode"], "--pin decode needs --engine-device"),
        (["--engine-device", "cpu", "--pin", "receive"], "--pin receive pins host memory"),
        pytest.param(
            ["--engine-device", "cuda"],
            "CPU-only build",
            marks=pytest.mark.skipif(CUDA, reason="this torch has CUDA: nothing to refuse"),
        ),
    ],
)
@pytest.mark.parametrize("scenario", ["ipc", "memory"])
def test_what_cannot_run_here_is_one_line_before_any_case(
    tmp_path: Path, capsys: pytest.CaptureFixture, argv: list[str], says: str, scenario: str
) -> None:
    out = tmp_path / "out"
    code = commands.main(["run", "--scenarios", scenario, "--workloads", IMAGES, "--out", str(out), *argv])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and says in err and err.startswith("serbench: error: ")
    assert not out.exists(), "a case ran (or a results file was started) before the refusal"


def test_bad_device_is_an_argparse_usage_error() -> None:
    with pytest.raises(SystemExit) as exit_info:
        commands.build_parser().parse_args(["run", "--engine-device", "gpu"])
    assert exit_info.value.code == 2


def test_one_flag_serves_both_scenarios() -> None:
    from serbench.cli.options import profile

    args = commands.build_parser().parse_args(["run", "--scenarios", "memory", "--engine-device", "cpu"])
    assert device.staging(profile(args)) == Staging("cpu")


# ---- the stage on the CPU ----------------------------------------------------------------


def test_cpu_stage_keeps_every_byte_and_pins_nothing() -> None:
    request = get_workload(IMAGES).request(0)
    staged = Stager(Staging("cpu")).stage(request)
    assert staged.pinned_bytes == 0 and staged.seconds >= 0
    assert payload_checksum(staged.request) == payload_checksum(request)
    assert all(t.device.type == "cpu" for t in tensors(staged.request))


def test_stage_turns_numpy_arrays_into_tensors() -> None:
    arrays = {"a": np.arange(6, dtype=np.int16).reshape(2, 3), "b": [np.float32(1.5), "text"]}
    staged = Stager(Staging("cpu")).stage(arrays).request
    assert isinstance(staged["a"], torch.Tensor) and staged["a"].tolist() == [[0, 1, 2], [3, 4, 5]]
    assert staged["b"][1] == "text"


# ---- the engine and the scenarios with a device -----------------------------------------


def test_engine_refuses_a_session_it_cannot_stage() -> None:
    start = Control("start", "s", {"backend": "msgspec-frombuffer", "device": "cpu", "pin": "decode"})
    with pytest.raises(ValueError, match="needs --engine-device cuda"):
        open_session(start, "ipc:///tmp/x/requests", allow_unsafe=False)
    start = Control("start", "s", {"backend": "msgspec-frombuffer", "device": "cpu"})
    assert open_session(start, "ipc:///tmp/x/requests", allow_unsafe=False).stager is not None


@pytest.mark.usefixtures("ipc_sandbox")
def test_frontend_hears_the_refusal_as_an_engine_error() -> None:
    staging = {"device": "cpu", "pin": "receive"}
    with pytest.raises(EngineError, match="engine refused the session: --pin receive"):  # noqa: SIM117
        with open_link("msgspec-frombuffer", 0.001, staging=staging):
            pass


@pytest.mark.usefixtures("ipc_sandbox")
def test_ipc_with_a_cpu_device_times_the_stage_per_request() -> None:
    out = measure("msgspec-frombuffer", IMAGES, settings(staging=Staging("cpu")))
    metrics = out.metrics
    assert len(metrics["to_device_s"].values) == 2
    assert all(
        0 <= s <= t for s, t in zip(metrics["to_device_s"].values, metrics["ttft_s"].values, strict=True)
    )
    assert out.info.settings["staging"] == {"device": "cpu", "pin": "none"}


@pytest.mark.usefixtures("ipc_sandbox")
def test_ipc_without_a_device_has_no_stage() -> None:
    out = measure("msgspec-frombuffer", IMAGES, settings(num_prompts=1))
    assert "to_device_s" not in out.metrics
    assert out.info.settings["staging"] is None


def test_memory_with_a_cpu_device_records_the_stage_and_no_pinned_bytes(tmp_path: Path) -> None:
    profile = dataclasses.replace(PROFILES["quick"], case_timeout_s=60).with_options(
        memory_repetitions=1, engine_device="cpu"
    )
    plan = Plan(["msgspec-frombuffer:threshold=256"], [IMAGES], ["memory"])
    data = execute(plan, profile, tmp_path / "results.json", ["run"]).results
    (record,) = data.records
    assert record.error is None
    assert record.metrics["pinned_bytes"].values == [0]
    assert record.metrics["to_device_s"].median >= 0
    assert {"decoded", "staged", "used"} <= record.info.phases.keys()
    assert record.info.staging == "cpu"


def test_phases_skip_what_is_not_a_stamp() -> None:
    side = dataclasses.make_dataclass("S", ["result", "baseline_bytes"])
    run = dataclasses.make_dataclass("M", ["sides", "started"])
    m = run({"engine": side({"used": (2.0, 300), "pinned_bytes": 64}, 100)}, 1.0)
    assert phases(m) == {"used": Phase(t_s=1.0, peak_bytes=200)}


# ---- the environment and the report -----------------------------------------------------


def test_environment_records_the_accelerator_as_torch_sees_it() -> None:
    found = environment.accelerator()
    assert found.torch_cuda == torch.version.cuda
    if torch.version.cuda is None:
        assert found == Accelerator(torch_cuda=None, cuda_available=False, devices=[])
    else:
        assert bool(found.devices) == found.cuda_available
        assert all(d.name and d.memory_bytes > 0 for d in found.devices)
    assert not torch.cuda.is_initialized(), "the probe initialised CUDA in this process"


def test_host_link_reads_sysfs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "0000:65:00.0"
    folder.mkdir()
    for name, text in [("max_link_speed", "32.0 GT/s PCIe"), ("max_link_width", "16")]:
        (folder / name).write_text(text + "\n")
    (folder / "current_link_speed").write_text("2.5 GT/s PCIe\n")
    (folder / "current_link_width").write_text("16\n")
    monkeypatch.setattr(environment, "PCI_DEVICES", tmp_path)
    assert environment.host_link("0000:65:00.0") == {
        "max": "32.0 GT/s PCIe x16",
        "current": "2.5 GT/s PCIe x16",
    }
    assert environment.host_link("0000:66:00.0") is None


def test_report_rows_name_the_device_and_its_link() -> None:
    gpu = Accelerator(
        torch_cuda="12.8",
        cuda_available=True,
        devices=[
            Device(
                name="NVIDIA H200",
                memory_bytes=150 * 10**9,
                capability="9.0",
                pci_bus_id="0000:65:00.0",
                host_link={"max": "32.0 GT/s PCIe x16", "current": "2.5 GT/s PCIe x16"},
            )
        ],
    )
    rows = accelerator_rows(gpu)
    assert "NVIDIA H200" in rows["accelerator"] and "CUDA 12.8" in rows["accelerator"]
    assert rows["host link"] == "32.0 GT/s PCIe x16 (now 2.5 GT/s PCIe x16)"
    cpu = accelerator_rows(Accelerator(torch_cuda=None, cuda_available=False, devices=[]))
    assert cpu["accelerator"].startswith("none (torch is a CPU-only build")
    assert accelerator_rows(None).keys() == rows.keys() == cpu.keys()


# ---- CUDA -------------------------------------------------------------------------------


def _stage_on_cuda(pin: str) -> None:
    request = get_workload(IMAGES).request(0)
    staged = Stager(Staging("cuda", pin)).stage(request)
    assert all(t.device.type == "cuda" for t in tensors(staged.request))
    assert request_checksum(staged.request) == request_checksum(request)
    assert staged.pinned_bytes == (payload_bytes(request) if pin == "decode" else 0)


@needs_cuda
@pytest.mark.parametrize("pin", ["none", "decode"])
def test_cuda_stage_moves_every_tensor_and_pins_as_asked(pin: str) -> None:
    run_isolated(_stage_on_cuda, (pin,), CHILD_TIMEOUT_S)


def _receive_pinned() -> None:
    ctx = zmq.Context()
    push, pull = ctx.socket(zmq.PAIR), ctx.socket(zmq.PAIR)
    push.bind("inproc://pinned")
    pull.connect("inproc://pinned")
    try:
        frames = get_serializer("msgspec-frombuffer").encode(get_workload(IMAGES).request(0))
        sizes = [memoryview(f).nbytes for f in frames]
        push.send_multipart(frames)
        got = recv_pinned(pull, sizes)
        assert [bytes(g) for g in got] == [bytes(memoryview(f)) for f in frames]
        assert all(torch.frombuffer(g, dtype=torch.uint8).is_pinned() for g in got if g.nbytes)
        push.send_multipart(frames)
        with pytest.raises(ValueError, match="its header said"):
            recv_pinned(pull, [sizes[0] + 1, *sizes[1:]])
        push.send_multipart([b"after"])
        assert pull.recv() == b"after", "a refused message was not taken whole"
    finally:
        push.close(0)
        pull.close(0)
        ctx.term()


@needs_cuda
def test_receive_lands_frames_in_pinned_buffers_and_checks_their_sizes() -> None:
    run_isolated(_receive_pinned, (), CHILD_TIMEOUT_S)


@needs_cuda
@pytest.mark.usefixtures("ipc_sandbox")
@pytest.mark.parametrize("pin", ["none", "decode", "receive"])
def test_ipc_on_cuda_passes_integrity_with_every_staging(pin: str) -> None:
    out = measure("msgspec-frombuffer", IMAGES, settings(staging=Staging("cuda", pin)))
    assert len(out.metrics["to_device_s"].values) == 2


@needs_cuda
@pytest.mark.parametrize("pin", ["decode", "receive"])
def test_memory_on_cuda_counts_the_pinned_bytes(tmp_path: Path, pin: str) -> None:
    profile = dataclasses.replace(PROFILES["quick"], case_timeout_s=120).with_options(
        memory_repetitions=1, engine_device="cuda", pin=pin
    )
    backend = "msgspec-frombuffer:threshold=256"
    data = execute(Plan([backend], [IMAGES], ["memory"]), profile, tmp_path / "r.json", ["run"]).results
    (record,) = data.records
    assert record.error is None
    payload = payload_bytes(get_workload(IMAGES).request(0))
    pinned = record.metrics["pinned_bytes"].values[0]
    assert pinned >= payload if pin == "receive" else pinned == payload
