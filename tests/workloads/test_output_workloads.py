"""The output workloads (outputs-B) and the size sweep (tensor-N): messages, the ipc output path."""

from __future__ import annotations

import pytest
import torch

from serbench.model import results
from serbench.model.errors import IntegrityError
from serbench.model.metrics import measured
from serbench.model.profiles import PROFILES
from serbench.model.results import Record, StreamInfo
from serbench.model.specs import SpecError
from serbench.scenarios.base import Case
from serbench.scenarios.ipc import stream
from serbench.scenarios.ipc.load import Tracked, account
from serbench.scenarios.micro import Micro
from serbench.serializers import get_serializer
from serbench.workloads import Running, expand, get_workload, output_token
from serbench.workloads.messages import EngineCoreOutputs, FlatEngineCoreOutputs
from serbench.workloads.sizes import SIZES
from serbench.workloads.tree import payload_bytes

NESTED, FLAT = "outputs-40:logprobs=3", "outputs-40:logprobs=3,layout=flat"


def test_nested_and_flat_carry_the_same_step() -> None:
    nested, flat = get_workload(NESTED).message(5), get_workload(FLAT).message(5)
    assert isinstance(nested, EngineCoreOutputs) and isinstance(flat, FlatEngineCoreOutputs)
    assert list(nested.entries()) == list(flat.entries())
    rid, tokens, _ = next(nested.entries())
    assert tokens == [output_token(rid, 5)]
    ended = [i for i, (_, _, reason) in enumerate(flat.entries()) if reason == "length"]
    assert ended == [26]  # one in 32 ends at each step: (i + 5) % 32 == 31
    rows = flat.logprobs.token_ids
    assert rows.shape == (40, 4) and rows.dtype == torch.int32
    assert rows[:, 0].tolist() == flat.new_token_ids.tolist()  # column 0: the sampled token
    assert nested.outputs[7].new_logprobs.token_ids == [rows[7].tolist()]
    assert nested.outputs[7].new_logprobs.logprobs == [flat.logprobs.logprobs[7].tolist()]


def test_messages_are_deterministic_and_sized_by_batch() -> None:
    a, b = get_workload(FLAT).message(2), get_workload(FLAT).message(2)
    assert torch.equal(a.logprobs.logprobs, b.logprobs.logprobs) and a.request_ids == b.request_ids
    assert len(get_workload("outputs-1024").message(0).outputs) == 1024
    assert get_workload("outputs-7").message(0).outputs[0].new_logprobs is None  # logprobs=0: none


@pytest.mark.parametrize("spec", [NESTED, FLAT])
@pytest.mark.parametrize("backend", ["pickle", "msgspec-frombuffer", "numpy-intermediate", "flat-mmk"])
def test_check_passes_a_round_trip_and_catches_a_changed_logprob(spec: str, backend: str) -> None:
    workload, serializer = get_workload(spec), get_serializer(backend)
    message = workload.message(1)
    frames = [bytes(memoryview(f).cast("B")) for f in serializer.encode(message)]
    decoded = serializer.decode(frames, workload.message_type)
    workload.check(decoded)
    if isinstance(decoded, FlatEngineCoreOutputs):
        decoded.logprobs.logprobs = decoded.logprobs.logprobs.clone()
        decoded.logprobs.logprobs[3, 2] += 0.5
    else:
        decoded.outputs[3].new_logprobs.logprobs[0][2] += 0.5
    with pytest.raises(ValueError, match="logprob"):
        workload.check(decoded)


def test_check_refuses_missing_or_unasked_logprobs() -> None:
    with pytest.raises(ValueError, match="no logprobs"):
        get_workload(NESTED).check(get_workload("outputs-40").message(0))
    with pytest.raises(ValueError, match="asked for none"):
        get_workload("outputs-40:layout=flat").check(get_workload(FLAT).message(0))


def test_account_reads_the_flat_layout() -> None:
    workload = get_workload("outputs-3:layout=flat,steps=2")
    tracked = {workload.request_id(i): Tracked(0.0, 2) for i in range(3)}
    first = workload.step([Running(rid, 0, False) for rid in tracked])
    assert account(first, tracked, 1.0) == 0
    with pytest.raises(IntegrityError, match="token 1"):
        account(first, tracked, 2.0)  # the same step again: position 0's tokens at position 1


def test_tensor_sweep_sizes_and_names() -> None:
    assert expand("tensor-sweep") == [f"tensor-{n}" for n in SIZES]
    assert expand("outputs-sweep:logprobs=5")[-1] == "outputs-1024:logprobs=5"
    assert expand("images-4") == ["images-4"]
    request = get_workload("tensor-65535").request(0)
    assert payload_bytes(request) == 65535 == get_workload("tensor-65535").payload_bytes()
    assert get_workload("tensor-1000").size == 1000
    with pytest.raises(SpecError, match="tensor-sweep"):
        get_workload("tensor-x")
    with pytest.raises(ValueError, match="layout"):
        get_workload("outputs-4:layout=columnar")


def test_micro_counts_inline_and_out_of_band_arrays_at_the_threshold() -> None:
    profile = PROFILES["quick"]
    below = Micro().run(Case("micro", "msgspec-frombuffer", "tensor-255"), profile).metrics
    at = Micro().run(Case("micro", "msgspec-frombuffer", "tensor-256"), profile).metrics
    assert (below["inline_arrays"].median, below["oob_frames"].median) == (1, 0)
    assert (at["inline_arrays"].median, at["oob_frames"].median) == (0, 1)
    flat = "outputs-64:logprobs=2,layout=flat"
    step = Micro().run(Case("micro", "pickle", flat), profile)
    assert step.metrics["inline_arrays"].median == 5  # pickle: every array in band
    assert step.info.payload_bytes == payload_bytes(get_workload(flat).message(0))


@pytest.mark.usefixtures("ipc_sandbox")
@pytest.mark.parametrize("layout", ["nested", "flat"])
def test_ipc_output_path_checks_every_step_and_times_full_batches(layout: str) -> None:
    out = stream.measure(
        "msgspec-frombuffer", f"outputs-6:logprobs=2,layout={layout},steps=12", 0.002, None, "ipc"
    )
    info, metrics = out.info, out.metrics
    assert info.batch == 6 and info.full_steps >= 1
    assert len(metrics["step_decode_s"].values) == info.full_steps == len(metrics["egress_s"].values)
    assert all(v > 0 for v in metrics["egress_s"].values)
    assert info.fits_step == (metrics["step_decode_s"].median <= 0.002)


def test_fitting_batches_reads_the_largest_batch_under_the_step() -> None:
    def record(backend: str, workload: str, decode: float) -> Record:
        metrics = {"step_decode_s": measured("step_decode_s", [decode])}
        info = StreamInfo(
            batch=1, steps=1, full_steps=1, step_s=0.005, local_engine=True, fits_step=decode <= 0.005
        )
        return results.record(Case("ipc", backend, workload, transport="ipc"), metrics=metrics, info=info)

    records = [
        record("a", "outputs-64:logprobs=5", 0.001),
        record("a", "outputs-256:logprobs=5", 0.004),
        record("a", "outputs-1024:logprobs=5", 0.012),
        record("a", "outputs-1024:layout=flat,logprobs=5", 0.001),
        record("b", "outputs-64", 0.006),
        results.record(Case("ipc", "b", "outputs-1", transport="ipc"), error="boom"),
        record("b", "text-sonnet", 0.0),
    ]
    assert stream.fitting_batches(records) == {
        ("a", "outputs-B:logprobs=5"): {"fits": 256, "over": 1024},
        ("a", "outputs-B:layout=flat,logprobs=5"): {"fits": 1024, "over": None},
        ("b", "outputs-B"): {"fits": None, "over": 64},
    }
