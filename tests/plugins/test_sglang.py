"""The SGLang plugin against the real SGLang (docs/sglang.md): `make test` installs the pinned release.

SGLang's import is costly: every test here uses the ``sglang`` fixture (tests/conftest.py), which
imports it once per test process, when the first of them runs.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import textwrap
from array import array

import msgspec
import pytest
import torch
from conftest import NEEDS_SGLANG
from malformed import judge

from serbench import cli as commands
from serbench.model.results import Accelerator
from serbench.model.specs import SpecError
from serbench.plugins.sglang import adapter
from serbench.probes import environment
from serbench.serializers import DecodeError, conformance, get_serializer, is_safe
from serbench.workloads import Running, get_workload
from serbench.workloads.tree import payload_bytes

pytestmark = [NEEDS_SGLANG, pytest.mark.usefixtures("sglang")]

TEXT = "text-sonnet:layout=sglang-native"
IMAGES = "images-2:layout=sglang-native,profile=qwen2-vl"
NATIVE = [TEXT, "images-2:layout=sglang-native", IMAGES, "images-1:dtype=bfloat16,layout=sglang-native"]
BACKENDS = ["sglang", "sglang-pickle"]


def roundtrip(spec: str, message):
    backend = get_serializer(spec)
    frames = [bytes(memoryview(f).cast("B")) for f in backend.encode(message)]
    return frames, backend.decode(frames, type(message))


def test_switch_set_before_import_chooses_the_msgspec_path(sglang):
    assert sglang.pickle_ipc is False  # read by io_struct at its import, from what load() set
    assert sglang.version in adapter.TESTED
    assert environment.collect([], probed=Accelerator()).libraries["sglang"] == sglang.version


def test_native_text_is_sglangs_own_request_with_the_models_prompt(sglang):
    native = get_workload(TEXT)
    model = get_workload("text-sonnet")
    model.name = native.name  # the same name, so the same request ids
    request, mine = native.request(2), model.request(2)
    assert type(request) is sglang.TokenizedGenerateReqInput
    assert type(request.sampling_params) is sglang.SamplingParams
    assert request.rid == mine.request_id == f"{TEXT}-0-2"
    assert request.input_ids == array("q", mine.prompt_token_ids) and len(request.input_ids) == 550
    assert request.input_text.split() == model.prompt_words(2)
    assert request.sampling_params.max_new_tokens == 150 and request.sampling_params.ignore_eos
    assert request.mm_inputs is None and native.request_type is sglang.TokenizedGenerateReqInput


def test_native_images_carry_one_item_per_image_as_sglangs_processor_does(sglang):
    native = get_workload(IMAGES)
    model = get_workload("images-2:layout=vllm,profile=qwen2-vl")
    model.name = native.name
    request, mine = native.request(1), model.request(1)
    items = request.mm_inputs.mm_items
    assert type(request.mm_inputs) is sglang.MultimodalProcessorOutput and len(items) == 2
    assert list(request.input_ids) == request.mm_inputs.input_ids == mine.prompt_token_ids
    for item, feature in zip(items, mine.mm_features, strict=True):
        assert type(item) is sglang.MultimodalDataItem and item.modality == sglang.Modality.IMAGE
        pos = feature.mm_position
        assert item.offsets == [(pos.offset, pos.offset + pos.length - 1)]
        assert item.identity == bytes.fromhex(feature.identifier) and item.pad_value == item.pad_values[0]
        elems = {elem.key: elem.data for elem in feature.data}
        assert torch.equal(item.feature, elems.pop("pixel_values"))
        assert item.model_specific_data.keys() == elems.keys() and "image_grid_thw" in elems
    assert payload_bytes(request) == native.payload_bytes() == payload_bytes(mine)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("spec", NATIVE)
def test_native_messages_round_trip_bit_exact(backend, spec):
    message = get_workload(spec).request(1)
    frames, decoded = roundtrip(backend, message)
    conformance.assert_same(message, decoded)
    assert len(frames) == 1  # both paths send one frame, tensors in-band
    assert sum(len(f) for f in frames) > payload_bytes(message)


def test_comparison_sees_a_changed_native_message():
    message = get_workload(IMAGES).request(0)
    _, decoded = roundtrip("sglang", message)
    decoded.mm_inputs.mm_items[1].model_specific_data["image_grid_thw"][1] += 1
    with pytest.raises(AssertionError, match=r"mm_items\[1\]\.model_specific_data\['image_grid_thw'\]"):
        conformance.assert_same(message, decoded)
    _, decoded = roundtrip("sglang", message)
    decoded.input_ids[7] += 1
    with pytest.raises(AssertionError, match=r"input_ids"):
        conformance.assert_same(message, decoded)


def test_malformed_frames_are_a_clean_decode_error(sglang):
    backend = get_serializer("sglang")
    kind = sglang.TokenizedGenerateReqInput
    (frame,) = backend.encode(get_workload("images-1:layout=sglang-native").request(0))
    frame = bytes(frame)
    corpus = {
        "garbage": [b"\xc1garbage"],
        "truncated": [frame[: len(frame) // 2]],
        "truncated-tensor": [frame[:-1]],
        "second-half-overwritten": [frame[: len(frame) // 2] + b"\xff" * (len(frame) - len(frame) // 2)],
        "deep-nesting": [b"\x91" * 100_000 + b"\xc0"],
        "ext-len-4G": [b"\xc9\xff\xff\xff\xff\x02"],
        "another-type": backend.encode(1),
        "empty": [b""],
    }
    verdicts = {name: judge(backend, frames, kind) for name, frames in corpus.items()}
    assert verdicts == dict.fromkeys(corpus, "DecodeError")


class _RunsGetpid:
    def __reduce__(self):
        return (os.getpid, ())


def test_sglangs_msgspec_decoder_runs_code_named_by_its_input(sglang):
    """Why ``sglang`` is marked unsafe: its Union holds ``PickleWrapper``, which ``msgpack_decode``
    unpickles when it is the message; the frame names a callable, and the decode calls it."""
    from sglang.srt.managers.io_struct import PickleWrapper

    frame = msgspec.msgpack.encode(PickleWrapper(pickle.dumps(_RunsGetpid())))
    assert get_serializer("sglang").decode([frame]) == os.getpid()


def test_declarations_are_honest():
    assert not is_safe(get_serializer("sglang")) and not is_safe(get_serializer("sglang-pickle"))
    msgspec_backend = get_serializer("sglang")
    for spec in NATIVE:
        assert conformance.case_unsupported(msgspec_backend, spec) is None, spec
    others = ("text-sonnet", "images-4", "images-4:layout=vllm", "images-4:layout=vllm-native", "outputs-8")
    for spec in others:
        assert conformance.case_unsupported(msgspec_backend, spec), spec
    with pytest.raises(DecodeError):  # and really cannot carry them: a Struct outside its Union
        roundtrip("sglang", get_workload("text-sonnet").request(0))
    with pytest.raises(TypeError, match="Cannot serialize"):  # nor anything but a Struct at the top
        msgspec_backend.encode(torch.ones(3))


def test_conformance_suite_passes_with_its_declarations():
    verdicts = list(conformance.check(get_serializer("sglang")))
    assert not {v.id: v.detail for v in verdicts if v.status == "fail"}
    assert {v.status for v in verdicts} == {"unsupported"}  # its Union holds SGLang's types only


def test_layout_is_for_text_images_and_outputs_only():
    with pytest.raises(SpecError, match="text-sonnet, images-N and outputs-B only"):
        get_workload("tensor-8:layout=sglang-native")


@pytest.mark.parametrize("top", [0, 5])
def test_native_outputs_are_sglangs_own_step_with_the_models_tokens(sglang, top):
    native = get_workload(f"outputs-256:logprobs={top},layout=sglang-native")
    model = get_workload(f"outputs-256:logprobs={top}")
    step, mine = native.message(31), model.message(31)
    assert native.message_type is type(step) is sglang.BatchTokenIDOutput
    assert native.request_type is type(native.request(0)) is sglang.TokenizedGenerateReqInput
    assert native.request(0).return_logprob is bool(top) and native.request(0).top_logprobs_num == top
    assert step.rids == [out.request_id for out in mine.outputs]
    assert [list(ids) for ids in step.output_ids] == [out.new_token_ids for out in mine.outputs]
    assert all(type(ids) is array for ids in step.output_ids)
    assert [r and r["type"] for r in step.finished_reasons] == [out.finish_reason for out in mine.outputs]
    assert step.completion_tokens == [32] * 256
    running = [Running(native.request_id(0), 4, True), Running(native.request_id(1), 7, False)]
    streamed = native.step(running)  # what the ipc engine sends: each request at its own position
    assert streamed.completion_tokens == [5, 8]
    assert streamed.finished_reasons == [{"type": "length", "length": 5}, None]
    native.check(streamed)
    if top:
        assert [len(rows[0]) for rows in step.output_top_logprobs_idx] == [top] * 256
        assert step.output_token_logprobs_idx == [list(ids) for ids in step.output_ids]
    else:
        assert step.output_token_logprobs_val is None and step.output_top_logprobs_idx is None


@pytest.mark.parametrize(
    "spec", ["outputs-256:layout=sglang-native", "outputs-1024:logprobs=5,layout=sglang-native"]
)
def test_native_outputs_round_trip_bit_exact_and_pass_the_check(sglang, spec):
    """Through SGLang's own msgpack_encode / msgpack_decode (bare: the ``sglang`` backend declares
    every ``outputs-*`` case unsupported) and through ``sglang-pickle``; the step still checks."""
    workload = get_workload(spec)
    step = workload.message(3)
    workload.check(step)
    decoded = [sglang.msgpack_decode(sglang.msgpack_encode(step)), roundtrip("sglang-pickle", step)[1]]
    for message in decoded:
        conformance.assert_same(step, message)
        workload.check(message)


def test_native_outputs_check_catches_a_corrupted_step(sglang):
    workload = get_workload("outputs-256:logprobs=3,layout=sglang-native")
    step = sglang.msgpack_decode(sglang.msgpack_encode(workload.message(0)))
    step.output_top_logprobs_val[7][0][2] += 0.5
    with pytest.raises(ValueError, match="logprob logprobs differ"):
        workload.check(step)
    step = sglang.msgpack_decode(sglang.msgpack_encode(workload.message(0)))
    step.output_token_logprobs_idx[9][0] += 1
    with pytest.raises(ValueError, match="logprob ids differ"):
        workload.check(step)
    step.output_top_logprobs_idx = None
    with pytest.raises(ValueError, match="no logprobs"):
        workload.check(step)


def test_micro_run_verifies_every_message(tmp_path, capsys):
    workloads = f"{TEXT},images-4:layout=sglang-native"
    args = ["run", "--backends", ",".join(BACKENDS), "--workloads", workloads, "--scenarios", "micro"]
    assert commands.main([*args, "--out", str(tmp_path)]) == 0
    results = json.loads((tmp_path / "results.json").read_text())
    records = results["records"]
    assert results["complete"] and len(records) == 4
    assert {(r["backend"], r["workload"]) for r in records} == {
        (b, w) for b in BACKENDS for w in workloads.split(",")
    }
    for record in records:
        assert record["error"] is None and record["unsupported"] is None, record
        assert record["info"]["verification"]["messages"] == record["info"]["verification"]["of"] >= 1
    assert results["backends"]["sglang-pickle"]["safe"] is False


def test_ipc_and_memory_carry_sglangs_messages_and_a_backend_that_cannot_is_unsupported(tmp_path):
    """Through real processes: the engine reads SGLang's request fields (``Workload.about``),
    streams its steps as SGLang's ``BatchTokenIDOutput``, and every message is verified; a
    backend that cannot encode SGLang's types is recorded unsupported with the reason."""
    backends = ["sglang-oob", "sglang-pickle", "msgspec-frombuffer"]
    workload = "images-1:layout=sglang-native"
    args = ["run", "--backends", ",".join(backends), "--workloads", workload, "--scenarios", "ipc,memory"]
    assert commands.main([*args, "--out", str(tmp_path)]) == 0
    records = json.loads((tmp_path / "results.json").read_text())["records"]
    measured = {(r["scenario"], r["backend"]) for r in records if r["error"] is None}
    assert {(s, b) for s in ("ipc", "memory") for b in ("sglang-oob", "sglang-pickle")} <= measured
    for record in records:
        if record["backend"].startswith("msgspec-frombuffer"):
            assert "SGLang's own types" in record["unsupported"], record
        else:
            assert record["error"] is None, record
            assert record["info"]["verification"]["messages"] == record["info"]["verification"]["of"] >= 1
    ttft = [
        r["metrics"]["ttft_s"]["values"] for r in records if r["scenario"] == "ipc" and r["error"] is None
    ]
    assert len(ttft) == 2 and min(map(len, ttft)) >= 5  # first tokens, each accounted token by token


def test_without_sglang_one_line_and_exit_2(tmp_path):
    code = textwrap.dedent(
        f"""
        import sys
        sys.modules["sglang"] = None  # as if not installed
        from serbench.cli import main
        sys.exit(main(["run", "--backends", "sglang", "--workloads", "{TEXT}", "--scenarios", "micro",
                       "--out", "{tmp_path / "out"}"]))
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr[-2000:]
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "pip install" in lines[0] and "sglang" in lines[0], done.stderr
