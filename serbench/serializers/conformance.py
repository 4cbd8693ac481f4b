"""The conformance suite (docs/architecture.md, "Conformance"): every specimen round-trips
bit-exact, or the backend declares it unsupported.

``check(serializer)`` round-trips every ``Specimen`` and gives a ``Verdict``
each: pass / fail / unsupported. A backend declares what it cannot carry in
``unsupported`` (specimen id or glob → reason); such a specimen must really
fail, or the declaration itself is reported as wrong. The runner checks each
backend this way before timing it, and ``tests/serializers/test_conformance.py`` runs
the same specimens under pytest (``--backend SPEC`` points it at any backend).

Passing the suite is not enough to be timed: ``verify`` round-trips the very
messages a case will time (a deterministic sample when there are many),
outside the timed region, and raises ``VerificationError`` at the first
difference; ``case_unsupported`` says whether the backend declares the case's
workload unsupported (specimen id ``workload-<workload spec>``), in which
case it is recorded as such and never timed.
"""

from __future__ import annotations

import ctypes
import dataclasses
import fnmatch
import functools
import importlib
import math
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec
import numpy as np

from serbench.model.errors import VerificationError
from serbench.model.results import Verification
from serbench.runtime import lazy
from serbench.serializers import Serializer, unsupported_cases
from serbench.workloads import get_workload
from serbench.workloads.messages import (
    EngineCoreOutputs,
    EngineCoreRequest,
    FlatEngineCoreOutputs,
    MultiModalFieldElem,
    MultiModalKwargs,
    MultiModalKwargsItem,
)
from serbench.workloads.tree import array_bytes, is_array

torch = lazy.torch(__name__)  # imported on first use (serbench.runtime.lazy)


@functools.cache
def cpu_dtypes() -> list[torch.dtype]:
    """Every dtype torch defines that a CPU tensor can have.

    The suite's universe comes from torch itself, not from any backend's list,
    so a backend that lacks a dtype fails its specimen or declares it.
    """
    module = importlib.import_module("torch")  # vars() of serbench.runtime.lazy's stand-in is not torch's
    every = sorted({v for v in vars(module).values() if isinstance(v, torch.dtype)}, key=str)
    out = []
    for dtype in every:
        try:
            with warnings.catch_warnings():  # complex32 "experimental", quantized "deprecated"
                warnings.simplefilter("ignore")
                torch.empty(1, dtype=dtype)
        except (RuntimeError, TypeError):  # a dtype this build of torch cannot allocate on CPU
            continue
        out.append(dtype)
    return out


QUANTIZED_DTYPES = ("qint8", "quint8", "qint32", "quint4x2", "quint2x4")  # by name: torch loads on use
VERIFY_SAMPLE = 8  # messages of a case round-tripped before timing, at most
NUMPY_DTYPES = ["?", "u1", "i1", "i2", "i4", "i8", "u2", "u4", "u8", "f2", "f4", "f8", "c8", "c16"]
# NaN bit patterns that a canonicalising codec would lose: quiet, negative, signalling, with payload.
NAN_PATTERNS = {
    "float16": (0x7E00, 0xFE00, 0x7C01, 0x7D5A),
    "bfloat16": (0x7FC0, 0xFFC0, 0x7F81, 0x7FA5),
    "float32": (0x7FC00000, 0xFFC00000, 0x7F800001, 0x7FC12345),
    "float64": (0x7FF8000000000000, 0xFFF8000000000000, 0x7FF0000000000001, 0x7FF8DEADBEEF0001),
}


@dataclass(frozen=True)
class Specimen:
    """One object the suite round-trips: how to build it, the type to decode it as, its id
    (what a backend's ``unsupported`` declaration names).

    With ``in_flight`` the build returns several messages, all encoded before
    any is decoded and all decoded before any is compared: frames must
    outlive the next encode (ZeroMQ may still be sending them) and decoded
    objects the next decode.
    """

    id: str
    build: Callable[[], Any]
    type_: Any = Any
    in_flight: bool = False


@dataclass(frozen=True)
class Verdict:
    id: str
    status: str  # "pass", "fail" or "unsupported"
    detail: str = ""


def _specials(dtype: torch.dtype) -> torch.Tensor | None:
    """NaN, +inf and -inf in ``dtype``, or None where torch converts nothing into it."""
    if not (dtype.is_floating_point or dtype.is_complex):
        return None
    try:
        return torch.tensor([math.nan, math.inf, -math.inf]).to(dtype)
    except (RuntimeError, TypeError):  # float4_e2m1fn_x2: no conversion kernel
        return None


def _bits(dtype: torch.dtype, shape: tuple[int, ...], seed: int) -> torch.Tensor:
    """Random bit patterns of a dtype, with NaN and ±inf planted in float types; a quantized
    dtype gets random values quantized with a scale and zero point of its own."""
    gen = torch.Generator().manual_seed(seed)
    count = math.prod(shape)
    if dtype is torch.bool:
        return (torch.randint(0, 2, (count,), generator=gen) == 1).reshape(shape)
    if _dtype_name(dtype) in QUANTIZED_DTYPES:
        with warnings.catch_warnings():  # "deprecated": still a dtype a backend may be handed
            warnings.simplefilter("ignore")
            return torch.quantize_per_tensor(torch.rand(shape, generator=gen) * 4 - 2, 0.05, 1, dtype)
    raw = torch.randint(0, 256, (count * dtype.itemsize,), dtype=torch.uint8, generator=gen)
    specials = _specials(dtype)
    if specials is not None and count >= 3:
        raw[: specials.nbytes] = specials.view(torch.uint8)
    return raw.view(dtype).reshape(shape)


def _nan_payloads(dtype: torch.dtype) -> torch.Tensor:
    """NaNs of ``dtype`` with distinct bit patterns, between ordinary values, above the threshold."""
    bits = torch.from_numpy(np.array(NAN_PATTERNS[_dtype_name(dtype)], dtype=f"u{dtype.itemsize}"))
    values = torch.arange(4, dtype=dtype)
    return torch.stack([bits.view(dtype), values], dim=1).reshape(-1).repeat(40)


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


def _in_flight() -> tuple[list[Any], ...]:
    """Two messages of the same shapes and different bytes, tensors above any threshold."""
    return tuple(
        [_bits(torch.float32, (3, 200), seed), {"ids": torch.arange(seed, seed + 300)}] for seed in (20, 21)
    )


def specimens(threshold: float = 256) -> list[Specimen]:
    """Every specimen; sizes around ``threshold`` follow the backend's own."""
    at = 256 if math.isinf(threshold) else max(int(threshold), 1)
    out = [Specimen(f"dtype-{_dtype_name(dt)}", lambda dt=dt: _bits(dt, (3, 70), 1)) for dt in cpu_dtypes()]
    out += [
        Specimen(f"scalar-0d-{_dtype_name(dt)}", lambda dt=dt: _bits(dt, (), 2))
        for dt in (torch.float32, torch.int64, torch.bool, torch.bfloat16)
    ]
    out += [
        Specimen(f"nan-payloads-{name}", lambda name=name: _nan_payloads(getattr(torch, name)))
        for name in NAN_PATTERNS
    ]
    out += [
        Specimen("empty-1d", lambda: torch.empty(0)),
        Specimen("empty-0x3", lambda: torch.empty(0, 3, dtype=torch.float16)),
        Specimen("empty-in-message", lambda: [torch.empty(2, 0, dtype=torch.int64), torch.ones(300)]),
        Specimen("transposed", lambda: _bits(torch.float32, (40, 30), 3).t()),
        Specimen("column-slice", lambda: _bits(torch.int32, (30, 40), 4)[:, 5:17]),
        Specimen("row-slice", lambda: _bits(torch.float32, (10, 70), 11)[3:]),  # contiguous, offset
        Specimen("offset-1d", lambda: _bits(torch.int64, (400,), 12)[100:300]),
        Specimen("strided-1d", lambda: torch.arange(8)[::2]),
        Specimen("strided-1d-large", lambda: _bits(torch.float32, (4000,), 5)[::3]),
        Specimen("expanded", lambda: torch.ones(1, 3).expand(50, 3)),
        Specimen("conj-view", lambda: _bits(torch.complex64, (3, 70), 13).conj()),
        Specimen("neg-view", lambda: torch._neg_view(_bits(torch.float32, (3, 70), 14))),
        Specimen("below-threshold", lambda: _bits(torch.uint8, (at - 1,), 6)),
        Specimen("at-threshold", lambda: _bits(torch.uint8, (at,), 7)),
        Specimen("above-threshold", lambda: _bits(torch.uint8, (at + 1,), 8)),
        Specimen("large", lambda: _bits(torch.float32, (3, 224, 224), 9)),
        Specimen("requires-grad", lambda: torch.rand(3, 100).requires_grad_()),
        Specimen("in-flight", _in_flight, in_flight=True),
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
        Specimen("numpy-big-endian", lambda: np.arange(300, dtype=">f4")),
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
            "workload-images-qwen2-vl-vllm-layout",
            lambda: get_workload("images-2:profile=qwen2-vl,dtype=bfloat16,layout=vllm").request(0),
            EngineCoreRequest,
        ),
        Specimen(
            "workload-images-qwen2-vl-bf16",
            lambda: get_workload("images-4:profile=qwen2-vl,dtype=bfloat16").request(0),
            EngineCoreRequest,
        ),
    ]
    return out


def _raw(tensor: torch.Tensor) -> memoryview:
    """A tensor's bytes; a quantized one's integer representation."""
    return array_bytes(tensor.int_repr() if tensor.is_quantized else tensor)


def _same_tensor_traits(expected: torch.Tensor, actual: torch.Tensor, path: str) -> None:
    """What a tensor is beyond dtype, shape and bytes: autograd leaf or not, quantization."""
    if expected.requires_grad != actual.requires_grad:
        raise AssertionError(
            f"{path}: requires_grad {actual.requires_grad}, expected {expected.requires_grad}"
        )
    if expected.is_quantized:
        want = (expected.qscheme(), expected.q_scale(), expected.q_zero_point())
        got = (actual.qscheme(), actual.q_scale(), actual.q_zero_point())
        if got != want:
            raise AssertionError(f"{path}: quantization {got}, expected {want}")


_EXACT_SCALARS = frozenset({int, bool, str, bytes, type(None)})  # equal only when their bits are


def _same_scalars(expected: Sequence[Any], actual: Sequence[Any]) -> bool:
    """Whether two sequences hold equal scalars of the same types, compared at C speed (a prompt's
    thousands of token ids); False also when their items need comparing one by one (floats:
    -0.0 == 0.0; containers)."""
    kinds = list(map(type, expected))
    return (
        all(map(_EXACT_SCALARS.__contains__, kinds))
        and kinds == list(map(type, actual))
        and expected == actual
    )


def _same_memory(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two byte arrays are views of the very same memory."""
    return a.size == b.size and a.__array_interface__["data"][0] == b.__array_interface__["data"][0]


@functools.cache
def _memcmp() -> Callable[[int, int, int], int]:
    memcmp = ctypes.CDLL(None).memcmp
    memcmp.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
    memcmp.restype = ctypes.c_int
    return memcmp


def _same_bytes(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two contiguous byte arrays hold the same bytes: libc's ``memcmp``, one pass over
    each and nothing allocated (``np.array_equal`` writes a third array of their size, then reads
    it: slower natively, and more so under callgrind, where the counted ipc path checks a whole
    images-32 payload a call)."""
    return a.size == b.size and (a.size == 0 or _memcmp()(a.ctypes.data, b.ctypes.data, a.size) == 0)


def _same_tensor_memory(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two tensors of one dtype and shape read the very same memory the same way (a
    zero-copy decode of frames never copied): their bytes are then the same, unread."""
    return (
        a.device == b.device
        and a.data_ptr() == b.data_ptr()
        and a.stride() == b.stride()
        and a.is_conj() == b.is_conj()
        and a.is_neg() == b.is_neg()
        and not a.is_quantized
    )


def assert_same(expected: Any, actual: Any, path: str = "$") -> None:
    """Bit-exact equality: same types, dtypes, shapes and bytes, all the way down."""
    kind = type(expected)
    if kind is not type(actual):
        raise AssertionError(f"{path}: type {type(actual).__name__}, expected {kind.__name__}")
    if kind in _EXACT_SCALARS:  # most of a message's leaves, so asked first
        if expected != actual:
            raise AssertionError(f"{path}: {actual!r:.60}, expected {expected!r:.60}")
        return
    if is_array(expected):
        if expected.dtype != actual.dtype or tuple(expected.shape) != tuple(actual.shape):
            got, want = f"{actual.dtype}{tuple(actual.shape)}", f"{expected.dtype}{tuple(expected.shape)}"
            raise AssertionError(f"{path}: {got}, expected {want}")
        if isinstance(expected, torch.Tensor):
            _same_tensor_traits(expected, actual, path)
            if _same_tensor_memory(expected, actual):
                return
            want, got = _raw(expected), _raw(actual)
        else:
            want, got = array_bytes(expected), array_bytes(actual)
        # the same memory is the same bytes (a zero-copy decode of frames that were never copied)
        want, got = np.frombuffer(want, np.uint8), np.frombuffer(got, np.uint8)
        if not _same_memory(want, got) and not _same_bytes(want, got):
            raise AssertionError(f"{path}: bytes differ")
    elif isinstance(expected, msgspec.Struct):
        for name in expected.__struct_fields__:
            assert_same(getattr(expected, name), getattr(actual, name), f"{path}.{name}")
    elif isinstance(expected, (list, tuple)):
        if len(expected) != len(actual):
            raise AssertionError(f"{path}: length {len(actual)}, expected {len(expected)}")
        if _same_scalars(expected, actual):
            return
        for i, (a, b) in enumerate(zip(expected, actual, strict=False)):
            assert_same(a, b, f"{path}[{i}]")
    elif dataclasses.is_dataclass(expected) and not isinstance(expected, type):
        for f in dataclasses.fields(expected):  # vLLM's multimodal types (docs/vllm.md)
            assert_same(getattr(expected, f.name), getattr(actual, f.name), f"{path}.{f.name}")
    elif isinstance(expected, Mapping):  # a dict, or a mapping class (vLLM's MultiModalKwargsItem)
        if list(expected) != list(actual):
            raise AssertionError(f"{path}: keys {list(actual)}, expected {list(expected)}")
        for key in expected:
            assert_same(expected[key], actual[key], f"{path}[{key!r}]")
    elif expected != actual and not (
        isinstance(expected, float) and math.isnan(expected) and math.isnan(actual)
    ):
        raise AssertionError(f"{path}: {actual!r:.60}, expected {expected!r:.60}")


def roundtrip(serializer: Serializer, specimen: Specimen) -> None:
    """Encode, copy the frames as a transport would, decode, compare; raise on any difference.

    An ``in_flight`` specimen's messages are all encoded before the first is
    copied, and all decoded before the first is compared."""
    built = specimen.build()
    originals = list(built) if specimen.in_flight else [built]
    sent = [serializer.encode(original) for original in originals]
    received = [[bytes(memoryview(f).cast("B")) for f in frames] for frames in sent]
    with warnings.catch_warnings():
        # torch's own unpickling of a quantized tensor (torch._utils._rebuild_qtensor) reads the
        # deprecated TypedStorage.device: torch's to fix, not the backend's, and only the
        # dtype-q* specimens reach it. A backend's own use of TypedStorage still warns.
        warnings.filterwarnings("ignore", message="TypedStorage is deprecated", module=r"torch\._utils")
        decoded = [serializer.decode(frames, specimen.type_) for frames in received]
    for index, (original, result) in enumerate(zip(originals, decoded, strict=True)):
        assert_same(original, result, f"$[message {index}]" if specimen.in_flight else "$")


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


# The conformance specimens that are serbench's own payloads (tensors of every kind, its message
# models), no library's message type: a plugin whose codec carries only its library's types
# declares these unsupported, with its reason (the vLLM and SGLang plugins).
OWN_PAYLOAD_SPECIMENS = (
    "dtype-*",
    "scalar-0d-*",
    "nan-payloads-*",
    "empty-*",
    "transposed",
    "column-slice",
    "row-slice",
    "offset-1d",
    "strided-1d*",
    "expanded",
    "*-threshold",
    "large",
    "requires-grad",
    "in-flight",
    "numpy-*",
    "nested-list",
    "dict-of-tensors",
    "mmk-all-kinds",
)


def case_unsupported(serializer: Serializer, workload: str) -> str | None:
    """The reason the backend gives for not carrying ``workload`` (declared for the specimen id
    ``workload-<spec>``, e.g. ``workload-images-32:layout=vllm``, or by a glob such as ``*``), or
    the workload gives (``Workload.unsupported_by``: a layout of another library's types)."""
    declared = declared_reason(serializer, f"workload-{workload}")
    return declared or get_workload(workload).unsupported_by(serializer)


def sample(count: int, most: int = VERIFY_SAMPLE) -> list[int]:
    """Up to ``most`` indices of ``count``, evenly spread, the first and the last included."""
    if count <= most:
        return list(range(count))
    return sorted({round(i * (count - 1) / (most - 1)) for i in range(most)})


def verify(
    serializer: Serializer, messages: Sequence[Any], label: str = "message", key: tuple[str, ...] = ()
) -> Verification:
    """Round-trip ``messages`` (a sample of them when there are many) bit-exact before they are timed.

    Each is encoded, its frames copied as a transport would, decoded as its own
    type and compared with ``assert_same``; an exception or a difference raises
    ``VerificationError`` naming the message and the first difference. Returns
    the check's cost for the case's ``info`` (it runs outside the timed region).

    ``key`` (the backend and workload specs) names messages that are the same
    in every case that builds them: message ``i`` is ``(*key, label, i)``.
    Those already round-tripped earlier in this run (``remember``) are not
    again (``earlier`` counts them), and ``keys`` lists those that were now.
    """
    start = time.perf_counter()
    chosen = sample(len(messages))
    names = {index: (*key, label, index) for index in chosen} if key else {}
    earlier = [index for index in chosen if names.get(index) in _VERIFIED]
    for index in chosen:
        if index in earlier:
            continue
        original = messages[index]
        try:
            frames = [bytes(memoryview(f).cast("B")) for f in serializer.encode(original)]
            assert_same(original, serializer.decode(frames, type(original)))
        except Exception as exc:
            raise VerificationError(
                f"{serializer.name} does not round-trip {label} {index} of {len(messages)}, not timed: "
                f"{type(exc).__name__}: {exc}"[:500]
            ) from None
    seconds = round(time.perf_counter() - start, 4)
    keys = [list(names[index]) for index in chosen if index not in earlier] if names else None
    return Verification(len(chosen), len(messages), seconds, len(earlier), keys)


_VERIFIED: set[tuple] = set()  # messages round-tripped earlier in this run (``remember``)


def remember(keys: Sequence[Sequence[Any]]) -> None:
    """Note messages round-tripped earlier in the run (``verify``'s ``keys``): ``verify`` in this
    process does not round-trip them again."""
    _VERIFIED.update(tuple(k) for k in keys)


def forget() -> None:
    """A new run: nothing verified yet."""
    _VERIFIED.clear()
