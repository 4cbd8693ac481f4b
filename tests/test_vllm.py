"""The vLLM plugin against the real vLLM (docs/vllm.md): `make test` installs the pinned release.

vLLM's import costs ~10 s of CPU, so the module imports it once; the one test of a machine
without vLLM blocks the import in a fresh interpreter.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch

pytest.importorskip("vllm.v1.serial_utils", reason="vLLM not installed: make test installs the pinned one")

from serbench import conformance, environment
from serbench.results import Accelerator
from serbench.serializers import DecodeError, get_serializer
from serbench.vllm import adapter
from serbench.workloads import get_workload
from serbench.workloads.tree import iter_leaves, payload_bytes

NATIVE = "images-2:layout=vllm-native,profile=llava"


def roundtrip(spec: str, message):
    backend = get_serializer(spec)
    frames = [bytes(memoryview(f).cast("B")) for f in backend.encode(message)]
    return frames, backend.decode(frames, type(message))


@pytest.fixture(scope="module")
def vllm():
    return adapter.load()


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
        from serbench.commands import main
        sys.exit(main(["run", "--backends", "pickle", "--workloads", "{NATIVE}", "--scenarios", "micro",
                       "--out", "{tmp_path / "out"}"]))
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr[-2000:]
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "pip install" in lines[0] and "vllm" in lines[0], done.stderr
