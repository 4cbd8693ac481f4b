"""The conformance suite (docs/architecture.md, "Conformance") through every backend, plus frame contracts.

Run it against your own backend with
``pytest tests/serializers/test_conformance.py --backend pkg.mod:factory``.
"""

from __future__ import annotations

import math

import msgspec
import pytest
import torch

from serbench.serializers import conformance, get_serializer
from serbench.workloads import get_workload
from serbench.workloads.messages import EngineCoreRequest

CASE_IDS = [case.id for case in conformance.specimens()]


@pytest.mark.parametrize("case_id", CASE_IDS)
def test_case_round_trips_or_is_truly_unsupported(backend_spec: str, case_id: str) -> None:
    serializer = get_serializer(backend_spec)
    case = next(c for c in conformance.specimens(getattr(serializer, "threshold", 256)) if c.id == case_id)
    result = conformance.check_specimen(serializer, case)
    assert result.status in ("pass", "unsupported"), result.detail


def test_cases_cover_every_cpu_dtype_and_the_design_list() -> None:
    ids = set(CASE_IDS)
    every = {v for v in vars(torch).values() if isinstance(v, torch.dtype)}
    assert set(conformance.cpu_dtypes()) == every  # this torch allocates every dtype it defines on CPU
    assert {f"dtype-{str(dt)[6:]}" for dt in every} <= ids
    assert {f"dtype-{n}" for n in ("float8_e4m3fn", "float8_e5m2", "uint16", "uint64", "complex32")} <= ids
    assert {
        "strided-1d",
        "transposed",
        "column-slice",
        "empty-1d",
        "empty-0x3",
        "numpy-fortran",
        "below-threshold",
        "at-threshold",
        "above-threshold",
        "mmk-all-kinds",
        "workload-text-sonnet",
        "workload-images-llava",
        "conj-view",
        "neg-view",
        "in-flight",
        "row-slice",
        "numpy-big-endian",
        "nan-payloads-float32",
    } <= ids


def _built(case_id: str) -> object:
    return next(c for c in conformance.specimens() if c.id == case_id).build()


def test_the_specimens_are_what_their_names_say() -> None:
    assert _built("requires-grad").requires_grad
    assert _built("conj-view").is_conj()
    assert _built("neg-view").is_neg()
    row = _built("row-slice")
    assert row.is_contiguous() and row.storage_offset() > 0
    assert _built("numpy-big-endian").dtype.byteorder == ">"
    assert _built("dtype-qint8").is_quantized
    nans = _built("nan-payloads-float32")
    assert len({int(b) for b in nans[torch.isnan(nans)].view(torch.int32)}) == 4


def test_backends_declare_exactly_the_dtypes_they_cannot_carry() -> None:
    """Byte-carrying backends carry every dtype but the quantized and placeholder ones."""
    chosen = [
        s for s in conformance.specimens() if s.id.startswith("dtype-") or s.id.endswith(("-view", "-grad"))
    ]
    placeholders = {f"{sign}int{n}" for sign in ("", "u") for n in range(1, 8)}
    quantized = {"qint8", "quint8", "qint32", "quint4x2", "quint2x4"}
    for spec in ("msgspec-frombuffer", "numpy-intermediate", "flat-mmk", "pickle-oob"):
        serializer = get_serializer(spec)
        results = {s.id: conformance.check_specimen(serializer, s).status for s in chosen}
        lacking = {i.removeprefix("dtype-") for i, status in results.items() if status != "pass"}
        assert lacking == (placeholders if spec == "pickle-oob" else placeholders | quantized), spec


def test_the_reverted_flatten_view_backend_fails_conformance() -> None:
    """flatten().view(uint8) breaks on arange(8)[::2] (docs/architecture.md, "History"): the suite says so."""
    results = {r.id: r for r in conformance.check(get_serializer("misbehaving_backends:flatten_view"))}
    assert results["strided-1d"].status == "fail"
    assert "view" in results["strided-1d"].detail
    assert results["dtype-float32"].status == "pass"


def test_third_party_backend_by_dotted_path_passes_with_true_declarations() -> None:
    results = list(conformance.check(get_serializer("thirdparty_backend:make:level=2")))
    assert [r for r in results if r.status == "fail"] == []
    assert {r.id for r in results if r.status == "unsupported"} >= {"numpy-f4", "mmk-all-kinds"}


def test_a_false_unsupported_declaration_is_reported() -> None:
    serializer = get_serializer("msgspec-frombuffer")
    serializer.unsupported = {"dtype-float32": "claims it cannot"}
    results = {r.id: r for r in conformance.check(serializer)}
    assert results["dtype-float32"].status == "fail"
    assert "declared unsupported" in results["dtype-float32"].detail


def test_assert_same_is_bit_exact() -> None:
    nan = torch.tensor([float("nan"), 1.0])
    conformance.assert_same(nan, nan.clone())
    with pytest.raises(AssertionError, match="bytes differ"):
        conformance.assert_same(torch.tensor([0.0]), torch.tensor([-0.0]))
    with pytest.raises(AssertionError, match="float64"):
        conformance.assert_same(torch.zeros(2), torch.zeros(2, dtype=torch.float64))
    with pytest.raises(AssertionError, match="type"):
        conformance.assert_same([torch.zeros(1)], (torch.zeros(1),))
    with pytest.raises(AssertionError, match=r"\$\[1\]: 3, expected 2"):
        conformance.assert_same([1, 2], [1, 3])
    with pytest.raises(AssertionError, match="type bool, expected int"):
        conformance.assert_same({"n": 1}, {"n": True})


def test_a_tensor_viewing_the_same_memory_another_way_is_compared_by_its_bytes() -> None:
    """Two tensors that share their memory are the same unread only when they read it the same
    way: a transposed view, a conjugate or a negative view of it reads other bytes."""
    square = torch.arange(4.0).reshape(2, 2)
    conformance.assert_same(square, square.view(2, 2))
    complex_ = torch.tensor([1 + 2j])
    for other, view in ((square, square.t()), (complex_, complex_.conj()), (complex_, complex_._neg_view())):
        assert other.data_ptr() == view.data_ptr()
        with pytest.raises(AssertionError, match="bytes differ"):
            conformance.assert_same(other, view)


ZERO_COPY = ["msgspec-frombuffer", "numpy-intermediate", "flat-mmk", "pickle-oob"]


@pytest.mark.parametrize("spec", ZERO_COPY)
def test_zero_copy_frames_contract(spec: str) -> None:
    """Large tensors leave as their own frames, viewing the tensor's memory; the header stays small."""
    request = get_workload("images-4:profile=llava").request(0)
    pixels = [item.fields["pixel_values"].data for item in request.mm_inputs.items_by_modality["image"]]
    frames = get_serializer(spec).encode(request)
    assert len(frames) == 1 + len(pixels)
    prompt_bytes = len(msgspec.msgpack.encode(request.prompt_token_ids))
    assert memoryview(frames[0]).nbytes < prompt_bytes + 4096  # token ids + small per-tensor headers
    for frame, tensor in zip(frames[1:], pixels, strict=True):
        view = memoryview(frame)
        assert view.nbytes == tensor.nbytes
        assert torch.frombuffer(view, dtype=torch.uint8).data_ptr() == tensor.data_ptr()


@pytest.mark.parametrize("spec", ["msgspec-frombuffer:threshold=inf", "flat-mmk:threshold=inf", "pickle"])
def test_inline_backends_send_one_frame_of_about_the_payload(spec: str) -> None:
    request = get_workload("images-4:profile=llava").request(0)
    frames = get_serializer(spec).encode(request)
    payload = sum(
        item.fields["pixel_values"].data.nbytes for item in request.mm_inputs.items_by_modality["image"]
    )
    assert len(frames) == 1
    assert payload <= memoryview(frames[0]).nbytes < payload + 16 * 1024


def test_decoded_zero_copy_tensor_views_the_frame() -> None:
    request = get_workload("images-4:profile=llava").request(0)
    serializer = get_serializer("msgspec-frombuffer")
    frames = [bytearray(memoryview(f).cast("B")) for f in serializer.encode(request)]
    decoded = serializer.decode(frames, EngineCoreRequest)
    first = decoded.mm_inputs.items_by_modality["image"][0].fields["pixel_values"].data
    frames[1][0:4] = b"\xff\xff\xff\xff"
    assert math.isnan(first.view(-1)[0].item())  # the tensor is the frame, not a copy
