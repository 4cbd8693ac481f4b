"""The vLLM plugin against the real vLLM (docs/vllm.md): `make test` installs the pinned release.

vLLM's import is costly: every test here uses the ``vllm`` fixture (tests/conftest.py),
which imports it once per test process, when the first of them runs; the one test of a machine
without vLLM blocks the import in a fresh interpreter.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from conftest import NEEDS_VLLM

from serbench.model.errors import IntegrityError
from serbench.model.results import Accelerator
from serbench.model.specs import SpecError
from serbench.plugins.vllm import adapter
from serbench.probes import environment
from serbench.scenarios.ipc import stream
from serbench.scenarios.ipc.load import Tracked, account
from serbench.serializers import DecodeError, conformance, get_serializer
from serbench.workloads import Running, get_workload
from serbench.workloads.tree import iter_leaves, payload_bytes

pytestmark = [NEEDS_VLLM, pytest.mark.usefixtures("vllm")]

NATIVE = "images-2:layout=vllm-native,profile=llava"


def roundtrip(spec: str, message):
    backend = get_serializer(spec)
    frames = [bytes(memoryview(f).cast("B")) for f in backend.encode(message)]
    return frames, backend.decode(frames, type(message))


@pytest.fixture(scope="module")
def native():
    return get_workload(NATIVE)


def test_native_request_is_vllms_own_type_with_the_models_content(vllm, native):
    request = native.request(1)
    model_workload = get_workload("images-2:layout=vllm,profile=llava")
    model_workload.name = native.name  # the same name, so the same request ids and image hashes
    model = model_workload.request(1)
    assert type(request) is vllm.EngineCoreRequest
    assert type(request.sampling_params) is vllm.SamplingParams
    assert request.request_id == f"{NATIVE}-0-1" and request.prompt_token_ids == model.prompt_token_ids
    assert request.sampling_params.max_tokens == model.sampling_params.max_tokens
    assert len(request.mm_features) == 2
    for feature, mine in zip(request.mm_features, model.mm_features, strict=True):
        assert type(feature) is vllm.MultiModalFeatureSpec
        assert type(feature.data) is vllm.MultiModalKwargsItem
        assert feature.identifier == mine.identifier
        assert (feature.mm_position.offset, feature.mm_position.length) == (
            mine.mm_position.offset,
            mine.mm_position.length,
        )
        assert torch.equal(feature.data["pixel_values"].data, mine.data[0].data)
    assert payload_bytes(request) == native.payload_bytes() == payload_bytes(model)
    assert native.name == NATIVE


@pytest.mark.parametrize(
    "spec",
    [NATIVE, "images-2:layout=vllm-native,profile=qwen2-vl", "images-1:dtype=bfloat16,layout=vllm-native"],
)
def test_vllm_codec_round_trips_native_requests_bit_exact(spec):
    message = get_workload(spec).request(0)
    frames, decoded = roundtrip("vllm", message)
    conformance.assert_same(message, decoded)
    large = [leaf for leaf in iter_leaves(message) if isinstance(leaf, torch.Tensor) and leaf.nbytes >= 256]
    assert len(frames) == 1 + len(large)  # each tensor of at least vLLM's threshold its own frame


def test_flat_field_slices_and_field_objects_survive(vllm):
    message = get_workload("images-2:layout=vllm-native,profile=qwen2-vl").request(0)
    _, decoded = roundtrip("vllm", message)
    field = decoded.mm_features[1].data["pixel_values"].field
    assert type(field).__name__ == "MultiModalFlatField"
    rows = message.mm_features[0].data["pixel_values"].data.shape[0]
    assert list(field.slices) == [slice(0, rows, None), slice(rows, 2 * rows, None)]


def test_comparison_sees_a_changed_native_message(native):
    message = native.request(0)
    _, decoded = roundtrip("vllm", message)
    pixels = decoded.mm_features[1].data["pixel_values"]
    pixels.data = pixels.data.clone()
    pixels.data.view(-1)[7] += 1
    with pytest.raises(AssertionError, match=r"mm_features\[1\]\.data\['pixel_values'\]\.data: bytes differ"):
        conformance.assert_same(message, decoded)
    _, decoded = roundtrip("vllm", message)
    decoded.mm_features[0].mm_position = type(decoded.mm_features[0].mm_position)(offset=1, length=2)
    with pytest.raises(AssertionError, match=r"mm_position\.offset"):
        conformance.assert_same(message, decoded)


def test_threshold_option_is_vllms_size_threshold(native):
    message = native.request(0)
    inline, _ = roundtrip("vllm:threshold=inf", message)
    assert len(inline) == 1
    default = get_serializer("vllm")
    assert default.threshold == default._encoder.size_threshold  # vLLM's own default when not given
    assert len(get_serializer("vllm:threshold=0").encode(message)) == 3


def test_one_decoder_per_message_type_reused(native):
    backend = get_serializer("vllm")
    message = native.request(0)
    frames = backend.encode(message)
    backend.decode(frames, type(message))
    first = backend._decoders[type(message)]
    backend.decode(frames, type(message))
    assert backend._decoders == {type(message): first}


def test_malformed_frames_are_a_decode_error(native):
    backend = get_serializer("vllm")
    message = native.request(0)
    frames = backend.encode(message)
    with pytest.raises(DecodeError):
        backend.decode([b"\xc1garbage", *frames[1:]], type(message))


def test_declarations_are_honest(native):
    message = native.request(0)
    msgspec_backend = get_serializer("msgspec-frombuffer")
    assert conformance.case_unsupported(msgspec_backend, NATIVE)
    with pytest.raises(TypeError):  # declared: it really cannot carry vLLM's types
        msgspec_backend.encode(message)
    vllm_backend = get_serializer("vllm")
    assert conformance.case_unsupported(vllm_backend, NATIVE) is None
    for spec in ("images-4", "images-32", "images-4:layout=vllm", "images-8:layout=compact,profile=llava"):
        assert conformance.case_unsupported(vllm_backend, spec), spec
    _, decoded = roundtrip("vllm", get_workload("images-1:layout=vllm").request(0))  # and really fails
    assert isinstance(decoded.mm_features[0].data[0].data, list)
    for spec in ("pickle", "pickle-oob", "cloudpickle"):  # the pickles carry anything
        conformance.assert_same(message, roundtrip(spec, message)[1])
        assert conformance.case_unsupported(get_serializer(spec), NATIVE) is None


def test_conformance_suite_passes_with_its_declarations():
    verdicts = list(conformance.check(get_serializer("vllm")))
    failed = {v.id: v.detail for v in verdicts if v.status == "fail"}
    assert not failed
    assert {v.id for v in verdicts if v.status == "pass"} >= {"workload-text-sonnet", "workload-text-outputs"}


def test_environment_names_the_vllm_version(vllm):
    assert "vllm" in environment.LIBRARIES
    assert environment.collect([], probed=Accelerator()).libraries["vllm"] == vllm.version
    assert vllm.version.split("+")[0] in adapter.TESTED


def test_without_vllm_one_line_and_exit_2(tmp_path):
    code = textwrap.dedent(
        f"""
        import sys
        sys.modules["vllm"] = None  # as if not installed
        from serbench.cli import main
        sys.exit(main(["run", "--backends", "pickle", "--workloads", "{NATIVE}", "--scenarios", "micro",
                       "--out", "{tmp_path / "out"}"]))
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr[-2000:]
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "pip install" in lines[0] and "vllm" in lines[0], done.stderr


# outputs-B:layout=vllm-native: outputs-B's steps as vLLM's own EngineCoreOutputs
OUTPUTS = "outputs-40:logprobs=5,layout=vllm-native"


def corrupt_logprob(message, index: int = 1) -> None:
    """Add 0.5 to one logprob of output ``index`` (the decoded arrays are read-only views: replaced)."""
    out = message.outputs[index]
    changed = out.new_logprobs.logprobs.copy()
    changed[0, 2] += 0.5
    out.new_logprobs = out.new_logprobs._replace(logprobs=changed)


@pytest.mark.parametrize("top", [0, 5])
def test_native_outputs_round_trip_through_vllm_with_every_token_and_logprob(vllm, top):
    native = get_workload(f"outputs-40:logprobs={top},layout=vllm-native")
    model = get_workload(f"outputs-40:logprobs={top}").message(5)  # serbench's nested step: lists
    message = native.message(5)
    frames, decoded = roundtrip("vllm", message)
    conformance.assert_same(message, decoded)
    assert type(decoded) is vllm.EngineCoreOutputs and len(frames) == 1  # rows of 6 are under 256 B
    assert len(decoded.outputs) == len(model.outputs) == 40
    for out, want in zip(decoded.outputs, model.outputs, strict=True):
        assert type(out) is vllm.EngineCoreOutput
        assert (out.request_id, out.new_token_ids) == (want.request_id, want.new_token_ids)
        assert out.finish_reason == (vllm.FinishReason.LENGTH if want.finish_reason == "length" else None)
        if not top:
            assert out.new_logprobs is None
            continue
        ids, logprobs, ranks = out.new_logprobs[:3]
        assert (ids.dtype, logprobs.dtype, ranks.dtype) == (np.int32, np.float32, np.int64)
        assert ids.tolist() == want.new_logprobs.token_ids and ranks.tolist() == want.new_logprobs.ranks
        assert logprobs.tolist() == want.new_logprobs.logprobs
    assert [out.finish_reason is not None for out in decoded.outputs].count(True) == 1  # (i + 5) % 32 == 31
    native.check(decoded)


def test_a_corrupted_native_step_is_caught(vllm):
    workload = get_workload(OUTPUTS)
    tracked = {workload.request_id(i): Tracked(0.0, 40) for i in range(40)}

    def step(position: int):
        return roundtrip("vllm", workload.step([Running(rid, position, False) for rid in tracked]))[1]

    decoded = step(0)
    workload.check(decoded)
    assert account(workload.in_model(decoded), tracked, 1.0) == 0
    corrupt_logprob(decoded)
    with pytest.raises(ValueError, match="logprob logprobs differ"):
        workload.check(decoded)
    decoded = step(1)
    decoded.outputs[3].new_logprobs = decoded.outputs[3].new_logprobs._replace(
        sampled_token_ranks=np.array([0])
    )
    with pytest.raises(ValueError, match="logprob ranks differ"):
        workload.check(decoded)
    decoded.outputs[7].new_token_ids = [decoded.outputs[7].new_token_ids[0] + 1]
    with pytest.raises(IntegrityError, match="request 'req-0-7' token 1"):
        account(workload.in_model(decoded), tracked, 2.0)


def test_native_outputs_spec_with_logprobs_builds_what_it_says(vllm):
    spec = "outputs-16:layout=vllm-native,logprobs=5,seed=3,steps=7"
    workload = get_workload(spec)
    assert workload.name == spec
    assert (workload.kind, workload.batch, workload.output_len) == ("outputs", 16, 7)
    assert workload.message_type is vllm.EngineCoreOutputs and workload.request_type is vllm.EngineCoreRequest
    assert "top-5 logprobs" in workload.description and "vLLM's own" in workload.description
    request = workload.request(2)
    assert type(request) is vllm.EngineCoreRequest and request.request_id == "req-3-2"
    assert (request.sampling_params.logprobs, request.sampling_params.max_tokens) == (5, 7)
    step = workload.message(0)
    assert [out.request_id for out in step.outputs] == [f"req-3-{i}" for i in range(16)]
    rows = step.outputs[4].new_logprobs
    assert type(rows).__name__ == "LogprobsLists" and rows.logprob_token_ids.shape == (1, 6)
    assert rows.logprob_token_ids[0, 0] == step.outputs[4].new_token_ids[0]  # column 0: the sampled token
    assert rows.logprobs.shape == (1, 6) and rows.sampled_token_ranks.shape == (1,)
    with pytest.raises(SpecError, match="images-N and outputs-B"):
        get_workload("text-sonnet:layout=vllm-native")


def test_native_outputs_carried_by_the_pickles_and_declared_by_none(vllm):
    message = get_workload(OUTPUTS).message(3)
    for spec in ("vllm", "pickle", "pickle-oob", "cloudpickle"):
        assert conformance.case_unsupported(get_serializer(spec), OUTPUTS) is None
        conformance.assert_same(message, roundtrip(spec, message)[1])


@pytest.mark.usefixtures("ipc_sandbox")
def test_ipc_frontend_checks_every_native_step(vllm, monkeypatch):
    spec = "outputs-6:logprobs=2,layout=vllm-native,steps=12"
    out = stream.measure("vllm", spec, 0.002, None, "ipc")
    assert out.info.batch == 6 and out.info.steps >= 12 and out.info.full_steps >= 1
    assert len(out.metrics["step_decode_s"].values) == out.info.full_steps

    class CorruptsThirdStep:
        """The vllm backend, except that the third step it decodes has one logprob changed.

        Output 0 is the one changed: an early step may carry fewer requests than the batch while
        the engine is still admitting them (CI once saw step 3 with only one)."""

        name = "vllm"

        def __init__(self) -> None:
            self.inner, self.steps = get_serializer("vllm"), 0

        def encode(self, obj):
            return self.inner.encode(obj)

        def decode(self, frames, type_):
            message = self.inner.decode(frames, type_)
            self.steps += type_ is vllm.EngineCoreOutputs
            if self.steps == 3 and type_ is vllm.EngineCoreOutputs:
                corrupt_logprob(message, index=0)
            return message

    monkeypatch.setattr(stream, "get_serializer", lambda backend: CorruptsThirdStep())
    with pytest.raises(IntegrityError, match="step 3: logprob logprobs differ"):
        stream.measure("vllm", spec, 0.002, None, "ipc")
