"""The conformance suite (docs/architecture.md, "Conformance"): every specimen round-trips
bit-exact, or the backend declares it unsupported.

``check(serializer)`` round-trips every ``Specimen`` and gives a ``Verdict``
each: pass / fail / unsupported. A backend declares what it cannot carry in
``unsupported`` (specimen id or glob → reason); such a specimen must really
fail, or the declaration itself is reported as wrong. The runner checks each
backend this way before timing it, and ``tests/test_conformance.py`` runs
the same specimens under pytest (``--backend SPEC`` points it at any backend).
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import msgspec
import numpy as np
import torch

from serializers import Serializer, unsupported_cases
from serializers.tensors import TORCH_DTYPES
from workloads import get_workload
from workloads.messages import (
    EngineCoreOutputs,
    EngineCoreRequest,
    FlatEngineCoreOutputs,
    MultiModalFieldElem,
    MultiModalKwargs,
    MultiModalKwargsItem,
)
from workloads.tree import array_bytes, is_array

# Every dtype the built-in backends carry: one specimen each.
CPU_DTYPES = list(TORCH_DTYPES.values())
NUMPY_DTYPES = ["?", "u1", "i1", "i2", "i4", "i8", "u2", "u4", "u8", "f2", "f4", "f8", "c8", "c16"]


@dataclass(frozen=True)
class Specimen:
    """One object the suite round-trips: how to build it, the type to decode it as, its id
    (what a backend's ``unsupported`` declaration names)."""

    id: str
    build: Callable[[], Any]
    type_: Any = Any


@dataclass(frozen=True)
class Verdict:
    id: str
    status: str  # "pass", "fail" or "unsupported"
    detail: str = ""


def _bits(dtype: torch.dtype, shape: tuple[int, ...], seed: int) -> torch.Tensor:
    """Random bit patterns of a dtype, with NaN and ±inf planted in float types."""
    gen = torch.Generator().manual_seed(seed)
    count = math.prod(shape)
    if dtype is torch.bool:
        return (torch.randint(0, 2, (count,), generator=gen) == 1).reshape(shape)
    raw = torch.randint(0, 256, (count * dtype.itemsize,), dtype=torch.uint8, generator=gen)
    tensor = raw.view(dtype).reshape(shape).clone()
    if (dtype.is_floating_point or dtype.is_complex) and count >= 3:
        flat = tensor.view(-1)
        flat[0], flat[1], flat[2] = float("nan"), float("inf"), float("-inf")
    return tensor


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _mmk() -> MultiModalKwargs:
    gen = torch.Generator().manual_seed(7)
    item = MultiModalKwargsItem(
        {
            "pixel_values": MultiModalFieldElem(
                "image", "pixel_values", torch.rand(6, 40, generator=gen), "flat", slices=[[0, 6]]
            ),
            "grid": MultiModalFieldElem("image", "grid", torch.tensor([1, 2, 3])),
            "nested": MultiModalFieldElem(
                "image", "nested", [torch.rand(2, 70, generator=gen), [torch.ones(3, dtype=torch.int32)]]
            ),
            "embeds": MultiModalFieldElem(
                "image", "embeds", torch.rand(4, 8, generator=gen), "shared", batch_size=2
            ),
            "second_per_grid_ts": MultiModalFieldElem("image", "second_per_grid_ts", 0.5),
            "count": MultiModalFieldElem("image", "count", 3),
        }
    )
    audio = MultiModalKwargsItem({"features": MultiModalFieldElem("audio", "features", np.arange(128.0))})
    return MultiModalKwargs({"image": [item, item], "audio": [audio]})


def specimens(threshold: float = 256) -> list[Specimen]:
    """Every specimen; sizes around ``threshold`` follow the backend's own."""
    at = 256 if math.isinf(threshold) else max(int(threshold), 1)
    out = [Specimen(f"dtype-{_dtype_name(dt)}", lambda dt=dt: _bits(dt, (3, 70), 1)) for dt in CPU_DTYPES]
    out += [
        Specimen(f"scalar-0d-{_dtype_name(dt)}", lambda dt=dt: _bits(dt, (), 2))
        for dt in (torch.float32, torch.int64, torch.bool, torch.bfloat16)
    ]
    out += [
        Specimen("empty-1d", lambda: torch.empty(0)),
        Specimen("empty-0x3", lambda: torch.empty(0, 3, dtype=torch.float16)),
        Specimen("transposed", lambda: _bits(torch.float32, (40, 30), 3).t()),
        Specimen("column-slice", lambda: _bits(torch.int32, (30, 40), 4)[:, 5:17]),
        Specimen("strided-1d", lambda: torch.arange(8)[::2]),
        Specimen("strided-1d-large", lambda: _bits(torch.float32, (4000,), 5)[::3]),
        Specimen("expanded", lambda: torch.ones(1, 3).expand(50, 3)),
        Specimen("below-threshold", lambda: _bits(torch.uint8, (at - 1,), 6)),
        Specimen("at-threshold", lambda: _bits(torch.uint8, (at,), 7)),
        Specimen("above-threshold", lambda: _bits(torch.uint8, (at + 1,), 8)),
        Specimen("large", lambda: _bits(torch.float32, (3, 224, 224), 9)),
        Specimen("requires-grad", lambda: torch.ones(3, 100, requires_grad=True).detach()),
    ]
    out += [
        Specimen(
            f"numpy-{code}",
            lambda code=code: _bits(torch.uint8, (3, 70 * np.dtype(code).itemsize), 10).numpy().view(code),
        )
        for code in NUMPY_DTYPES
    ]
    out += [
        Specimen("numpy-0d", lambda: np.array(2.5)),
        Specimen("numpy-empty", lambda: np.empty((0, 4), dtype=np.int32)),
        Specimen("numpy-fortran", lambda: np.asfortranarray(np.arange(600.0).reshape(20, 30))),
        Specimen("numpy-strided", lambda: np.arange(1000)[::7]),
        Specimen("nested-list", lambda: [torch.ones(2), [torch.arange(300), [np.ones(3)]], [], 1.5, "x"]),
        Specimen("dict-of-tensors", lambda: {"a": torch.zeros(5), "b": {"c": torch.arange(400)}}),
        Specimen("mmk-all-kinds", _mmk, MultiModalKwargs),
        Specimen("workload-text-sonnet", lambda: get_workload("text-sonnet").request(0), EngineCoreRequest),
        Specimen(
            "workload-text-outputs",
            lambda: get_workload("text-sonnet").outputs(["a", "b"], 3, True),
            EngineCoreOutputs,
        ),
        *(
            Specimen(f"workload-{spec}", lambda spec=spec: get_workload(spec).message(3), type_)
            for spec, type_ in (
                ("outputs-8:logprobs=3", EngineCoreOutputs),
                ("outputs-8:layout=flat", FlatEngineCoreOutputs),
                ("outputs-8:layout=flat,logprobs=3", FlatEngineCoreOutputs),
                ("outputs-100:layout=flat,logprobs=1", FlatEngineCoreOutputs),  # arrays above 256 B
                ("tensor-0", EngineCoreRequest),
                ("tensor-65536", EngineCoreRequest),
            )
        ),
        Specimen(
            "workload-images-llava",
            lambda: get_workload("images-4:profile=llava").request(1),
            EngineCoreRequest,
        ),
        Specimen(
            "workload-images-qwen2-vl-bf16",
            lambda: get_workload("images-4:profile=qwen2-vl,dtype=bfloat16").request(0),
            EngineCoreRequest,
        ),
    ]
    return out


def assert_same(expected: Any, actual: Any, path: str = "$") -> None:
    """Bit-exact equality: same types, dtypes, shapes and bytes, all the way down."""
    if type(expected) is not type(actual):
        raise AssertionError(f"{path}: type {type(actual).__name__}, expected {type(expected).__name__}")
    if is_array(expected):
        if expected.dtype != actual.dtype or tuple(expected.shape) != tuple(actual.shape):
            got, want = f"{actual.dtype}{tuple(actual.shape)}", f"{expected.dtype}{tuple(expected.shape)}"
            raise AssertionError(f"{path}: {got}, expected {want}")
        if array_bytes(expected) != array_bytes(actual):
            raise AssertionError(f"{path}: bytes differ")
    elif isinstance(expected, msgspec.Struct):
        for name in expected.__struct_fields__:
            assert_same(getattr(expected, name), getattr(actual, name), f"{path}.{name}")
    elif isinstance(expected, (list, tuple)):
        if len(expected) != len(actual):
            raise AssertionError(f"{path}: length {len(actual)}, expected {len(expected)}")
        for i, (a, b) in enumerate(zip(expected, actual, strict=False)):
            assert_same(a, b, f"{path}[{i}]")
    elif isinstance(expected, dict):
        if list(expected) != list(actual):
            raise AssertionError(f"{path}: keys {list(actual)}, expected {list(expected)}")
        for key in expected:
            assert_same(expected[key], actual[key], f"{path}[{key!r}]")
    elif expected != actual and not (
        isinstance(expected, float) and math.isnan(expected) and math.isnan(actual)
    ):
        raise AssertionError(f"{path}: {actual!r:.60}, expected {expected!r:.60}")


def roundtrip(serializer: Serializer, specimen: Specimen) -> None:
    """Encode, copy the frames as a transport would, decode, compare; raise on any difference."""
    original = specimen.build()
    frames = [bytes(memoryview(f).cast("B")) for f in serializer.encode(original)]
    assert_same(original, serializer.decode(frames, specimen.type_))


def declared_reason(serializer: Serializer, specimen_id: str) -> str | None:
    """The reason a backend gives for not supporting a specimen, if it declares one."""
    for pattern, reason in unsupported_cases(serializer).items():
        if fnmatch.fnmatchcase(specimen_id, pattern):
            return reason
    return None


def check_specimen(serializer: Serializer, specimen: Specimen) -> Verdict:
    """Round-trip one specimen; a declared-unsupported one must fail to count as unsupported."""
    reason = declared_reason(serializer, specimen.id)
    try:
        roundtrip(serializer, specimen)
    except Exception as exc:
        if reason is not None:
            return Verdict(specimen.id, "unsupported", reason)
        return Verdict(specimen.id, "fail", f"{type(exc).__name__}: {exc}"[:500])
    if reason is not None:
        return Verdict(specimen.id, "fail", f"declared unsupported ({reason}) but round-trips")
    return Verdict(specimen.id, "pass")


def check(serializer: Serializer) -> Iterator[Verdict]:
    """Every specimen's verdict for one backend."""
    for specimen in specimens(getattr(serializer, "threshold", 256)):
        yield check_specimen(serializer, specimen)
