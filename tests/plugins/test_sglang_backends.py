"""SGLang's backends beyond its two own paths (docs/sglang.md): ``sglang-oob``, SGLang's messages
with tensors as out-of-band frames, against the real SGLang that `make test` installs.

Marked slow: SGLang's import costs seconds, paid once per test process (the ``sglang`` fixture).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import pickle
from typing import Any

import msgspec
import pytest
import torch
from conftest import NEEDS_SGLANG
from hypothesis import given
from hypothesis import strategies as st
from malformed import Fuzzer, assert_backed, hypothesis_profile, judge, mutations

from serbench import cli as commands
from serbench.model.profiles import PROFILES
from serbench.model.specs import SpecError
from serbench.plugins.sglang.backend import OOB_EXT
from serbench.scenarios.base import Case
from serbench.scenarios.micro import Micro
from serbench.serializers import DecodeError, conformance, describe, get_serializer, is_safe
from serbench.serializers.msgpack_backend import TENSOR_EXT
from serbench.workloads import get_workload
from serbench.workloads.tree import arrays, payload_bytes

pytestmark = [NEEDS_SGLANG, pytest.mark.slow, pytest.mark.usefixtures("sglang")]

TEXT = "text-sonnet:layout=sglang-native"
IMAGES = "images-2:layout=sglang-native"
NATIVE = [
    TEXT,
    IMAGES,
    "images-2:layout=sglang-native,profile=qwen2-vl",
    "images-1:dtype=bfloat16,layout=sglang-native",
]
OOB = "sglang-oob"


def received(frames) -> list[bytearray]:
    """Frames as a socket hands them over: copies, writable so a test can tell a view from a copy."""
    return [bytearray(memoryview(f).cast("B")) for f in frames]


@pytest.mark.parametrize("spec", NATIVE)
def test_native_messages_round_trip_bit_exact_with_large_tensors_out_of_band(spec):
    backend = get_serializer(OOB)
    message = get_workload(spec).request(1)
    frames = received(backend.encode(message))
    conformance.assert_same(message, backend.decode(frames, type(message)))
    large = [a for a in arrays(message) if a.nbytes >= backend.threshold]
    assert len(frames) == 1 + len(large)
    assert [len(f) for f in frames[1:]] == [a.nbytes for a in large]


def test_decoded_tensors_view_the_received_frames():
    backend = get_serializer(OOB)
    message = get_workload(IMAGES).request(0)
    frames = received(backend.encode(message))
    decoded = backend.decode(frames, type(message))
    features = [item.feature for item in decoded.mm_inputs.mm_items]
    for feature, frame in zip(features, frames[1:], strict=True):
        assert_backed(feature, [frame])
        assert feature.data_ptr() == torch.frombuffer(frame, dtype=torch.uint8).data_ptr()
    frames[2][:4] = b"\xff\xff\xff\xff"
    assert torch.isnan(features[1].view(-1)[0])  # the tensor is the frame, not a copy


def test_conformance_suite_passes_with_sglangs_declarations():
    backend = get_serializer(OOB)
    verdicts = list(conformance.check(backend))
    assert not {v.id: v.detail for v in verdicts if v.status == "fail"}
    assert {v.status for v in verdicts} == {"unsupported"}  # its Union holds SGLang's types only
    assert is_safe(backend)
    for spec in NATIVE:
        assert conformance.case_unsupported(backend, spec) is None, spec


def _pickled(sglang, payload: object):
    return sglang.PickleWrapper(pickle.dumps(payload))


def _ext(code: int, header: object) -> msgspec.msgpack.Ext:
    return msgspec.msgpack.Ext(code, msgspec.msgpack.encode(header))


def sglang_buffer_ext(code: int, metadata: object, data: bytes) -> msgspec.msgpack.Ext:
    """One of SGLang's buffer exts, written as its ``_pack_buffer_ext`` writes them, however wrong."""
    packed = msgspec.msgpack.encode(metadata)
    return msgspec.msgpack.Ext(code, len(packed).to_bytes(4, "big") + packed + data)


def _encoded_with(sglang, message, **changes) -> bytes:
    """``message`` with its ``mm_inputs`` changed, encoded by SGLang's own hooks (tensors in-band)."""
    mm_inputs = msgspec.structs.replace(message.mm_inputs, **changes)
    encoder = msgspec.msgpack.Encoder(enc_hook=sglang.enc_hook)
    return encoder.encode(msgspec.structs.replace(message, mm_inputs=mm_inputs))


def test_malformed_and_hostile_frames_are_a_clean_decode_error(sglang):
    backend = get_serializer(OOB)
    message = get_workload("images-1:layout=sglang-native").request(0)
    kind = type(message)
    head, pixels = (bytes(memoryview(f).cast("B")) for f in backend.encode(message))
    tensor = OOB_EXT + TENSOR_EXT

    def feature(ext, *payload):  # the first image's feature is ``ext``
        first = msgspec.structs.replace(message.mm_inputs.mm_items[0], feature=ext)
        return [_encoded_with(sglang, message, mm_items=[first]), *payload]

    corpus = {
        "garbage": [b"\xc1garbage"],
        "empty": [b""],
        "no-frames": [],
        "truncated-header": [head[: len(head) // 2], pixels],
        "truncated-frame": [head, pixels[:-1]],
        "missing-frame": [head],
        "extra-frame": [head, pixels, bytes(16)],
        "swapped": [pixels, head],
        "deep-nesting": [b"\x91" * 100_000 + b"\xc0"],
        "ext-len-4G": [b"\xc9\xff\xff\xff\xff\x02"],
        "pickle-at-the-top": [msgspec.msgpack.encode(_pickled(sglang, "code"))],
        "pickle-in-a-field": backend.encode(
            msgspec.structs.replace(message, time_stats=_pickled(sglang, "x"))
        ),
        "sglang-inband-tensor-of-a-huge-shape": feature(sglang_buffer_ext(2, ([2**40], "uint8", "cpu"), b"")),
        "sglang-shm-pointer": feature(_ext(4, {"shm_name": "psm_x", "shape": [1], "dtype": "uint8"})),
        "frame-index-past-list": feature(_ext(tensor, ("float32", [4], 5)), bytes(16)),
        "frame-index-zero": feature(_ext(tensor, ("uint8", [1], 0))),
        "frame-too-short": feature(_ext(tensor, ("float32", [3, 336, 336], 1)), bytes(16)),
        "absurd-size": feature(_ext(tensor, ("uint8", [2**62], 1)), bytes(8)),
        "unknown-dtype": feature(_ext(tensor, ("object", [1], bytes(8)))),
        "negative-dim": feature(_ext(tensor, ("float32", [-1, 4], 1)), bytes(16)),
        "unknown-ext": feature(_ext(99, ("float32", [1], bytes(4)))),
        # SGLang's own ndarray (3) and array.array (1) exts, which this backend decodes with SGLang's hook
        "ndarray-of-objects": feature(sglang_buffer_ext(3, ([1], "O"), bytes(8))),
        "ndarray-of-a-huge-shape": feature(sglang_buffer_ext(3, ([2**40], "<f4"), b"")),
        "array-bytes-short": feature(sglang_buffer_ext(1, "q", bytes(7))),
        "buffer-ext-metadata-past-its-end": feature(msgspec.msgpack.Ext(3, b"\xff\xff\xff\xff")),
        # a field typed torch.Tensor holding what SGLang's own dec_hook would allocate a tensor of
        "tensor-field-as-a-list": [_encoded_with(sglang, message, mrope_positions=[[2**40], "uint8", b""])],
    }
    verdicts = {name: judge(backend, frames, kind) for name, frames in corpus.items()}
    assert verdicts == dict.fromkeys(corpus, "DecodeError")


def test_a_pickle_nested_in_a_batch_is_refused_whatever_type_is_asked(sglang):
    from sglang.srt.managers.io_struct import BatchTokenizedGenerateReqInput

    backend = get_serializer(OOB)
    request = get_workload(TEXT).request(0)
    clean = BatchTokenizedGenerateReqInput(batch=[request, request])
    assert judge(backend, backend.encode(clean), Any) == "decoded"
    pickled = msgspec.structs.replace(request, time_stats=_pickled(sglang, "x"))
    with pytest.raises(DecodeError, match="PickleWrapper"):
        backend.decode(backend.encode(BatchTokenizedGenerateReqInput(batch=[request, pickled])), Any)


def test_generated_inputs_end_in_decode_error_or_a_valid_object():
    fuzzer = Fuzzer([OOB], 200)
    fuzzer.crafted()
    fuzzer.random()
    counts = fuzzer.tally.counts[OOB]
    assert fuzzer.tally.tried(OOB) >= 0.9 * 400 and counts["DecodeError"] > 0 and counts["decoded"] > 0


@functools.cache
def native_encodings() -> list[tuple[tuple[bytes, ...], type]]:
    """Small native messages encoded by sglang-oob, frames as a socket delivers them."""
    backend = get_serializer(OOB)
    messages = [
        get_workload(spec).request(0) for spec in (TEXT, "images-2:layout=sglang-native,profile=llava")
    ]
    return [(tuple(bytes(memoryview(f).cast("B")) for f in backend.encode(m)), type(m)) for m in messages]


@hypothesis_profile(300)
@given(seed=st.sampled_from([0, 1]), ops=st.lists(mutations, min_size=1, max_size=3))
def test_mutated_native_frames_end_in_decode_error_or_a_valid_object(seed, ops):
    frames, kind = native_encodings()[seed]
    mutated = list(frames)
    for op in ops:
        op.apply(mutated)
    judge(get_serializer(OOB), mutated, kind)


# -- features=: SGLang's feature transports ---------------------------------------------------


def own_segments() -> set[str]:
    """The shm segments SGLang made for this process (its names carry the maker's pid): other
    processes on the machine may make their own meanwhile."""
    return {name for name in os.listdir("/dev/shm") if name.startswith(f"sgl_shm_mm_{os.getpid()}_")}


def test_features_inline_is_the_default_in_band_path():
    message = get_workload(IMAGES).request(0)
    assert get_serializer("sglang").features == "inline"
    assert "in-band" in describe(get_serializer("sglang")) and "shm" in describe(
        get_serializer("sglang:features=shm")
    )
    (frame,) = get_serializer("sglang:features=inline").encode(message)
    assert len(frame) > payload_bytes(message)  # every feature inside the one frame


def test_features_shm_sends_a_segment_per_tensor_and_decode_unlinks_them():
    backend = get_serializer("sglang:features=shm")
    message = get_workload(IMAGES).request(1)
    before = own_segments()
    frames = received(backend.encode(message))
    made = own_segments() - before
    assert len(made) == len(message.mm_inputs.mm_items) == 2  # one per feature tensor
    assert len(frames) == 1 and len(frames[0]) < payload_bytes(message) // 100  # names, not pixels
    decoded = backend.decode(frames, type(message))
    conformance.assert_same(message, decoded)
    assert own_segments() == before  # taken and unlinked on receipt
    assert all(isinstance(item.feature, torch.Tensor) for item in message.mm_inputs.mm_items)  # not moved
    with pytest.raises(DecodeError, match="first decode unlinks"):
        backend.decode(frames, type(message))


def test_features_shm_a_decode_that_fails_midway_unlinks_the_rest(sglang):
    backend = get_serializer("sglang:features=shm")
    message = get_workload(IMAGES).request(0)
    before = own_segments()
    frames = received(backend.encode(message))
    first, _ = (item.feature for item in sglang.msgpack_decode(frames[0]).mm_inputs.mm_items)
    first.close_and_unlink()  # gone before the frame arrives: the receiver cannot map the first
    with pytest.raises(DecodeError, match="features=shm"):
        backend.decode(frames, type(message))
    assert own_segments() == before


def test_features_shm_leaves_a_text_message_as_it_is():
    backend = get_serializer("sglang:features=shm")
    message = get_workload(TEXT).request(0)
    before = own_segments()
    conformance.assert_same(message, backend.decode(received(backend.encode(message)), type(message)))
    assert own_segments() == before


def test_micro_times_features_shm_on_a_frame_per_decode_and_leaves_dev_shm_as_it_was():
    """micro beside the in-band and out-of-band paths, in one round as a run times them: the shm
    transport's decode timed five times, each on a frame of its own, its round trip too; each
    frame's segments unlinked, the encodes' ones as well."""
    profile = dataclasses.replace(PROFILES["quick"], samples=5, max_metric_s=600.0)  # no early end
    before = own_segments()
    specs = ["sglang:features=inline", "sglang:features=shm", OOB]
    outcomes = Micro().run_together([Case("micro", spec, IMAGES) for spec in specs], profile)
    assert not [o for o in outcomes if isinstance(o, str)], outcomes
    shm = outcomes[1]
    assert len(shm.metrics["decode_s"].values) == len(shm.metrics["roundtrip_s"].values) == 5
    assert shm.info.loops["decode_s"] == shm.info.loops["encode_s"] == 1
    assert shm.metrics["frames"].median == 1 and shm.metrics["wire_bytes"].median < payload_bytes(
        get_workload(IMAGES).request(0)
    )  # names, not pixels
    assert own_segments() == before


def test_features_cuda_ipc_without_cuda_is_every_case_unsupported_with_why(tmp_path):
    backend = get_serializer("sglang:features=cuda_ipc")
    reason = conformance.case_unsupported(backend, IMAGES)
    assert "cuda_ipc" in reason and ("CPU-only" in reason or "no CUDA device" in reason)
    assert not [v for v in conformance.check(backend) if v.status == "fail"]
    with pytest.raises(RuntimeError, match="cuda_ipc"):
        backend.encode(get_workload(IMAGES).request(0))
    backends = "sglang:features=cuda_ipc,sglang:features=inline"
    args = [
        "run",
        "--backends",
        backends,
        "--workloads",
        IMAGES,
        "--scenarios",
        "micro",
        "--out",
        str(tmp_path),
    ]
    assert commands.main(args) == 0  # the run goes on past the unsupported case
    records = {r["backend"]: r for r in json.loads((tmp_path / "results.json").read_text())["records"]}
    assert records["sglang:features=cuda_ipc"]["unsupported"] == reason
    assert records["sglang:features=inline"]["error"] is None


def test_an_unknown_transport_is_one_line_naming_the_three():
    with pytest.raises(SpecError, match="one of inline, shm, cuda_ipc, not 'nvlink'"):
        get_serializer("sglang:features=nvlink")
