"""Malformed input for the safe decoders (docs/architecture.md, "Conformance"): an oracle,
generators and a fixed corpus. Needs the ``test`` extra (hypothesis).

Everything a peer on the socket controls is the list of frames. This module
crafts such lists for the two wire formats of the safe backends (``ext``:
msgpack with an array ext per tensor; ``flat``: a length-prefixed tensor
table + a structure of refs), generates them with hypothesis, keeps a fixed
corpus of the nastiest, and judges each decode with one oracle:

* ``DecodeError`` with a non-empty message that was not caused by running
  out of memory (a declared size must be refused before it is allocated), or
* a successful decode: an instance of the requested Struct whose every array
  lies inside one frame, or is an inline copy no larger than the header.

Anything else — another exception type, a crash — fails the caller.
Shared by ``tests/serializers/test_decoder_robustness.py`` and ``scripts/fuzz_report.py``.
"""

from __future__ import annotations

import math
import os
import random
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import msgspec
import numpy as np
import torch
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from serbench.serializers import DecodeError, Serializer, conformance, get_serializer
from serbench.serializers.flat_mmk import REF_EXT, FlatMMKSerializer
from serbench.serializers.msgpack_backend import NDARRAY_EXT, TENSOR_EXT
from serbench.serializers.tensors import torch_dtypes
from serbench.workloads import get_workload
from serbench.workloads.messages import (
    EngineCoreOutputs,
    EngineCoreRequest,
    MultiModalFieldElem,
    MultiModalKwargs,
    MultiModalKwargsItem,
    SamplingParams,
)
from serbench.workloads.tree import map_leaves

# The safe backends, and threshold variants that move every array inline or into frames.
SAFE_SPECS = [
    "numpy-intermediate",
    "msgspec-frombuffer",
    "flat-mmk",
    "msgspec-frombuffer:threshold=0",
    "flat-mmk:threshold=inf",
]
DECODE_TYPES: list[Any] = [Any, EngineCoreRequest, EngineCoreOutputs, MultiModalKwargs, SamplingParams]
Frames = list[Any]

# -- the oracle ---------------------------------------------------------------


@dataclass
class Tally:
    """Inputs tried per backend spec, by outcome ("DecodeError" or "decoded")."""

    counts: dict[str, Counter] = field(default_factory=dict)

    def add(self, spec: str, outcome: str) -> None:
        self.counts.setdefault(spec, Counter())[outcome] += 1

    def tried(self, spec: str) -> int:
        return sum(self.counts.get(spec, Counter()).values())


def _out_of_memory(exc: BaseException | None) -> bool:
    """Whether an exception chain shows an allocation that failed."""
    while exc is not None:
        if isinstance(exc, MemoryError) or "allocate" in str(exc).lower():
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def _address(buf: Any) -> tuple[int, int] | None:
    """A contiguous buffer's [start, end) addresses; None for anything else."""
    try:
        flat = np.frombuffer(memoryview(buf).cast("B"), np.uint8)
    except (TypeError, ValueError):
        return None
    start = flat.__array_interface__["data"][0]
    return start, start + flat.nbytes


def _span(ptr: int, shape: tuple[int, ...], strides: tuple[int, ...], itemsize: int) -> tuple[int, int]:
    """[start, end) of the bytes an array with these byte strides can touch."""
    low = sum((n - 1) * s for n, s in zip(shape, strides, strict=True) if s < 0)
    high = sum((n - 1) * s for n, s in zip(shape, strides, strict=True) if s > 0)
    return ptr + low, ptr + high + itemsize


def array_span(array: torch.Tensor | np.ndarray) -> tuple[int, int] | None:
    """The memory a decoded array reads; None when it holds no element."""
    if math.prod(array.shape) == 0:
        return None
    if isinstance(array, np.ndarray):
        return _span(array.ctypes.data, array.shape, array.strides, array.itemsize)
    size = array.element_size()
    return _span(array.data_ptr(), tuple(array.shape), tuple(s * size for s in array.stride()), size)


def _leaves(obj: Any) -> Iterator[Any]:
    """Every leaf of a decoded object, iteratively (decoded nesting may exceed Python's stack)."""
    stack = [obj]
    while stack:
        item = stack.pop()
        if isinstance(item, msgspec.Struct):
            stack.extend(getattr(item, name) for name in item.__struct_fields__)
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
        elif isinstance(item, dict):
            stack.extend(item.values())
        else:
            yield item


def assert_backed(array: torch.Tensor | np.ndarray, frames: Frames) -> None:
    """An array lies inside one frame, or is an inline copy no larger than the header."""
    span = array_span(array)
    if span is None:
        return
    regions = [r for r in map(_address, frames) if r is not None]
    if any(lo <= span[0] and span[1] <= hi for lo, hi in regions):
        return
    assert not any(span[0] < hi and lo < span[1] for lo, hi in regions), "array straddles a frame's end"
    header = regions[0][1] - regions[0][0] if regions else 0
    assert span[1] - span[0] <= header, f"{span[1] - span[0]}-byte array backed by no frame"


def assert_valid(obj: Any, type_: Any, frames: Frames) -> None:
    """A successful decode: the requested Struct, every array backed by the frames."""
    if isinstance(type_, type) and issubclass(type_, msgspec.Struct):
        assert isinstance(obj, type_), f"decoded a {type(obj).__name__} as {type_.__name__}"
    for leaf in _leaves(obj):
        if isinstance(leaf, (torch.Tensor, np.ndarray)):
            assert_backed(leaf, frames)


def judge(serializer: Serializer, frames: Frames, type_: Any) -> str:
    """Decode untrusted frames: "DecodeError" or "decoded"; AssertionError or the raw exception if neither."""
    try:
        obj = serializer.decode(frames, type_)
    except DecodeError as exc:
        assert str(exc).strip(), "DecodeError without a message"
        assert not _out_of_memory(exc), f"a declared size drove an allocation: {exc}"
        return "DecodeError"
    assert_valid(obj, type_, frames)
    return "decoded"


# -- crafting frames ----------------------------------------------------------


@dataclass(frozen=True)
class RawArray:
    """An array header written exactly as given, however wrong: what a hostile peer sends."""

    dtype: Any
    shape: Any
    ref: Any
    code: int = TENSOR_EXT


def wire_format(serializer: Serializer) -> str:
    return "flat" if isinstance(serializer, FlatMMKSerializer) else "ext"


def craft(fmt: str, obj: Any, payload: Frames = ()) -> Frames:
    """Frames for ``obj`` in a backend's wire format, its RawArrays written verbatim."""
    table: list[list[Any]] = []

    def ext(leaf: Any) -> Any:
        if not isinstance(leaf, RawArray):
            return leaf
        if fmt == "flat":
            table.append([leaf.code, leaf.dtype, leaf.shape, leaf.ref])
            return msgspec.msgpack.Ext(REF_EXT, (len(table) - 1).to_bytes(4, "little"))
        return msgspec.msgpack.Ext(leaf.code, msgspec.msgpack.encode((leaf.dtype, leaf.shape, leaf.ref)))

    body = msgspec.msgpack.encode(map_leaves(obj, ext))
    if fmt == "flat":
        body = flat_header(msgspec.msgpack.encode(table), body)
    return [body, *payload]


def flat_header(table: bytes, structure: bytes, size: int | None = None) -> bytes:
    """A flat-mmk header from raw parts; ``size`` overrides the table's length prefix."""
    return (len(table) if size is None else size).to_bytes(4, "little") + table + structure


def as_field(data: Any) -> MultiModalKwargs:
    """``data`` where a multimodal field sits in a real request."""
    elem = MultiModalFieldElem("image", "pixel_values", data, "flat", slices=[[0, 1]])
    return MultiModalKwargs({"image": [MultiModalKwargsItem({"pixel_values": elem})]})


def nested(depth: int, leaf: bytes = b"\xc0", opener: bytes = b"\x91") -> bytes:
    """msgpack of ``depth`` one-element containers around ``leaf``."""
    return opener * depth + leaf


# -- valid seeds --------------------------------------------------------------

SEED_CASES = ["mmk-all-kinds", "nested-list", "dict-of-tensors", "strided-1d-large", "numpy-fortran"]


@cache
def seed_messages() -> list[tuple[Any, Any]]:
    """Small valid messages (object, type) whose encodings the mutators start from."""
    by_id = {case.id: case for case in conformance.specimens()}
    text = get_workload("text-sonnet")
    return [
        (text.request(0), EngineCoreRequest),
        (text.outputs(["a", "b"], 3, True), EngineCoreOutputs),
        *((by_id[cid].build(), by_id[cid].type_) for cid in SEED_CASES),
    ]


@cache
def seed_encodings(spec: str) -> list[tuple[tuple[bytes, ...], Any]]:
    """Each seed message encoded by ``spec``, frames copied to bytes as a socket delivers them."""
    serializer = get_serializer(spec)
    return [
        (tuple(bytes(memoryview(f).cast("B")) for f in serializer.encode(obj)), type_)
        for obj, type_ in seed_messages()
    ]


# -- the fixed corpus ---------------------------------------------------------

HUGE_DIMS = [2**31, 2**32, 2**40, 2**62, 2**63 - 1, 2**64 - 1]


def _crafted_corpus(fmt: str) -> dict[str, tuple[Frames, Any]]:
    """Headers that lie about their arrays, in the backend's own format."""

    def one(raw: RawArray, payload: Frames = (), type_: Any = Any) -> tuple[Frames, Any]:
        return craft(fmt, raw, list(payload)), type_

    f32 = "float32"
    return {
        "frame-index-past-list": one(RawArray(f32, [4], 5), [bytes(16)]),
        "frame-index-zero-is-header": one(RawArray("uint8", [1], 0)),
        "frame-index-negative": one(RawArray(f32, [4], -1), [bytes(16)]),
        "frame-referenced-twice": (craft(fmt, [RawArray(f32, [4], 1)] * 2, [bytes(16)]), Any),
        "frame-too-short-for-shape": one(RawArray(f32, [3, 336, 336], 1), [bytes(16)]),
        "frame-too-long-for-shape": one(RawArray(f32, [2], 1), [bytes(12)]),
        "dtype-itemsize-mismatch": one(RawArray("float64", [3], 1), [bytes(12)]),
        "inline-bytes-short": one(RawArray("int64", [8], bytes(7))),
        "negative-dim": one(RawArray(f32, [-1, 4], 1), [bytes(16)]),
        "negative-dims-cancel": one(RawArray(f32, [-2, -2], 1), [bytes(16)]),
        "zero-dim-beside-huge": one(RawArray(f32, [0, 2**63 - 1, 2**63 - 1], b"")),
        "rank-33": one(RawArray("uint8", [1] * 33, b"\x00")),
        "shape-not-a-list": one(RawArray(f32, "abc", b"")),
        "shape-of-floats": one(RawArray(f32, [1.5], bytes(4))),
        "shape-of-bools": one(RawArray(f32, [True], bytes(4))),
        "shape-nested": one(RawArray(f32, [[1]], bytes(4))),
        "ref-float": one(RawArray(f32, [1], 1.0), [bytes(4)]),
        "ref-none": one(RawArray(f32, [0], None)),
        "unknown-ext-code": one(RawArray(f32, [1], bytes(4), code=9)),
        "ref-ext-code-in-array-slot": one(RawArray(f32, [1], bytes(4), code=REF_EXT)),
        **{f"absurd-size-{dims}": one(RawArray("uint8", [dims], 1), [bytes(8)]) for dims in HUGE_DIMS},
        "absurd-size-1GiB-inline": one(RawArray(f32, [2**28], b"")),
        "absurd-product-overflow": one(RawArray("complex128", [2**64 - 1] * 4, 1), [bytes(16)]),
        **{
            f"unknown-dtype-{name!s:.12}": one(RawArray(name, [1], bytes(8)))
            for name in ["float8", "torch.float32", "", "object", 7, None, ["float32"], "float32\x00"]
        },
        **{
            f"ndarray-dtype-{name}": one(RawArray(name, [1], bytes(8), code=NDARRAY_EXT))
            for name in ["O", "V8", "S8", "U2", "M8[ns]", "(2,)f4", "f4,f4", "(99999999999,)u1"]
        },
        "tensor-where-struct-expected": one(RawArray(f32, [1], bytes(4)), type_=EngineCoreRequest),
        "array-in-a-real-request-field": (
            craft(fmt, as_field(RawArray(f32, [1, 3, 336, 336], 1)), [bytes(64)]),
            MultiModalKwargs,
        ),
    }


def _raw_corpus(fmt: str) -> dict[str, tuple[Frames, Any]]:
    """Headers that are not even well-formed: garbage, deep nesting, absurd lengths."""

    def header(body: bytes) -> bytes:
        return flat_header(b"\x90", body) if fmt == "flat" else body

    rng = random.Random(9)
    garbage = bytes(rng.getrandbits(8) for _ in range(4096))
    corpus: dict[str, tuple[Frames, Any]] = {
        "no-frames": ([], Any),
        "empty-header": ([b""], Any),
        "random-bytes": ([garbage], Any),
        "random-bytes-as-request": ([garbage[:512], garbage[512:]], EngineCoreRequest),
        "deep-nesting-lists-100k": ([header(nested(100_000))], Any),
        "deep-nesting-maps-100k": ([header(nested(100_000, opener=b"\x81\xa1k"))], Any),
        "deep-nesting-in-field": ([header(nested(50_000))], MultiModalKwargs),
        "array-len-4G": ([header(b"\xdd\xff\xff\xff\xff")], Any),
        "map-len-4G": ([header(b"\xdf\xff\xff\xff\xff")], Any),
        "str-len-4G": ([header(b"\xdb\xff\xff\xff\xff")], Any),
        "bin-len-4G": ([header(b"\xc6\xff\xff\xff\xff")], Any),
        "ext-len-4G": ([header(b"\xc9\xff\xff\xff\xff\x01")], Any),
        "ext-garbage-data": ([header(b"\xd5\x01\xff\xff")], Any),
        "trailing-bytes": ([header(b"\xc0\xc0")], Any),
    }
    if fmt == "flat":
        corpus |= {
            "table-prefix-overruns": ([flat_header(b"\x90", b"\xc0", size=2**32 - 1)], Any),
            "table-prefix-truncated": ([b"\x01\x00"], Any),
            "table-not-a-list": ([flat_header(b"\xa3abc", b"\xc0")], Any),
            "table-entry-garbage": ([flat_header(b"\x91\x94\xc0\xc0\xc0\xc0", b"\xc0")], Any),
            "ref-past-table": ([flat_header(b"\x90", b"\xd6\x03\x07\x00\x00\x00")], Any),
            "ref-wrong-width": ([flat_header(b"\x90", b"\xd4\x03\x00")], Any),
            "tensor-ext-in-structure": ([flat_header(b"\x90", b"\xd5\x01\x00\x00")], Any),
        }
    return corpus


def _mangled_corpus(spec: str) -> dict[str, tuple[Frames, Any]]:
    """A real multi-image request, its frames cut, dropped, added or decoded as the wrong type."""
    serializer = get_serializer(spec)
    request = get_workload("images-4:profile=llava").request(0)
    frames = [memoryview(f).cast("B") for f in serializer.encode(request)]
    head, *payload = frames
    last = payload[-1] if payload else head
    outputs = serializer.encode(get_workload("text-sonnet").outputs(["a"], 1))
    return {
        "truncated-header": ([head[: len(head) // 2], *payload], EngineCoreRequest),
        "truncated-last-frame": ([*frames[:-1], last[:-1]], EngineCoreRequest),
        "missing-frame": (frames[:-1], EngineCoreRequest),
        "extra-frame": ([*frames, b"\x00" * 16], EngineCoreRequest),
        "header-and-frame-swapped": (
            [*payload[:1], head, *payload[1:]] if payload else [head, head],
            EngineCoreRequest,
        ),
        "request-as-outputs": (frames, EngineCoreOutputs),
        "request-as-sampling-params": (frames, SamplingParams),
        "outputs-as-request": (outputs, EngineCoreRequest),
    }


def corpus(spec: str) -> dict[str, tuple[Frames, Any]]:
    """The fixed corpus for one backend spec: id → (frames, type to decode as)."""
    fmt = wire_format(get_serializer(spec))
    return {**_crafted_corpus(fmt), **_raw_corpus(fmt), **_mangled_corpus(spec)}


# -- generators ---------------------------------------------------------------

DTYPES_OF_KIND = {TENSOR_EXT: sorted(torch_dtypes()), NDARRAY_EXT: conformance.NUMPY_DTYPES}
DTYPE_NAMES = [*DTYPES_OF_KIND[TENSOR_EXT], *DTYPES_OF_KIND[NDARRAY_EXT]]
ITEMSIZE = {name: dt.itemsize for name, dt in torch_dtypes().items()} | {
    code: np.dtype(code).itemsize for code in conformance.NUMPY_DTYPES
}
junk = st.one_of(st.none(), st.booleans(), st.floats(), st.text(max_size=8), st.binary(max_size=8))
dtypes = st.one_of(
    st.sampled_from(DTYPE_NAMES),
    st.sampled_from(["float8", "torch.float32", "object", "O", "V8", "S3", "M8[ns]", "(2,)f4", "f4,f4", ""]),
    st.text(max_size=12),
    st.integers(-(2**63), 2**64 - 1),
    junk,
)
dims = st.one_of(st.integers(0, 8), st.sampled_from([-1, *HUGE_DIMS]), st.integers(-(2**63), 2**64 - 1))
shapes = st.one_of(
    st.lists(st.integers(0, 8), max_size=4),
    st.lists(dims, max_size=40),
    st.lists(junk, max_size=3),
    junk,
)


@st.composite
def raw_arrays(draw: st.DrawFn, payload: Frames) -> RawArray:
    """One array header, its bytes inline or in a frame appended to ``payload``.

    Mostly the header is plausible (a dtype of its kind, a small shape,
    bytes that match or miss by a few, the right frame or a neighbour), so that
    the size and frame checks are hit, not only the parser; else anything goes.
    """
    if draw(st.integers(0, 3)) > 0:
        code = draw(st.sampled_from([TENSOR_EXT, NDARRAY_EXT]))
        dtype = draw(st.sampled_from(DTYPES_OF_KIND[code]))
        shape = draw(st.lists(st.integers(0, 6), max_size=3))
        size = ITEMSIZE[dtype] * math.prod(shape) + draw(st.sampled_from([0, 0, 0, -1, 1, 8]))
        data, miss = bytes(max(size, 0)), draw(st.sampled_from([0, 0, 0, -1, 1]))
        ref: Any = len(payload) + 1 + miss
    else:
        code = draw(st.sampled_from([TENSOR_EXT, NDARRAY_EXT, REF_EXT, 0, 9, -1]))
        dtype, shape, data = draw(dtypes), draw(shapes), draw(st.binary(max_size=64))
        ref = draw(st.one_of(st.integers(-2, 6), junk))
    if draw(st.booleans()):
        return RawArray(dtype, shape, data, code)
    payload.append(data)
    return RawArray(dtype, shape, ref, code)


@st.composite
def crafted_messages(draw: st.DrawFn) -> tuple[Any, Frames, Any]:
    """(message with lying array headers, payload frames, type): nested in lists, dicts or a request field."""
    payload: Frames = []
    arrays = draw(st.lists(raw_arrays(payload), min_size=1, max_size=4))
    shape = draw(st.sampled_from(["list", "dict", "field", "deep"]))
    if shape == "field":
        obj, type_ = as_field(arrays[0] if len(arrays) == 1 else arrays), MultiModalKwargs
    elif shape == "dict":
        obj, type_ = {str(i): a for i, a in enumerate(arrays)}, Any
    else:
        obj, type_ = arrays, Any
        for _ in range(draw(st.integers(0, 300)) if shape == "deep" else 0):
            obj = [obj]
    if draw(st.integers(0, 3)) == 0:  # a frame nothing refers to
        payload.append(draw(st.binary(max_size=16)))
    return obj, payload, draw(st.sampled_from([type_] * 4 + DECODE_TYPES))


@dataclass(frozen=True)
class Mutation:
    """One thing a broken or hostile transport does to frames; positions wrap to fit any frame list."""

    op: str
    index: int
    cut: int
    noise: bytes

    def apply(self, frames: list[bytes]) -> None:
        if not frames:
            frames.append(self.noise)
            return
        index = self.index % len(frames)
        target = frames[index]
        cut = self.cut % (len(target) + 1)
        if self.op == "truncate":
            frames[index] = target[:cut]
        elif self.op == "overwrite":
            frames[index] = target[:cut] + self.noise + target[cut + len(self.noise) :]
        elif self.op == "insert-bytes":
            frames[index] = target[:cut] + self.noise + target[cut:]
        elif self.op == "drop-frame":
            del frames[index]
        elif self.op == "add-frame":
            frames.insert(index + 1, self.noise)
        elif self.op == "duplicate-frame":
            frames.append(target)
        elif self.op == "swap-frames":
            other = self.cut % len(frames)
            frames[index], frames[other] = frames[other], frames[index]
        else:
            raise ValueError(f"unknown mutation {self.op}")


MUTATIONS = [
    "truncate",
    "overwrite",
    "insert-bytes",
    "drop-frame",
    "add-frame",
    "duplicate-frame",
    "swap-frames",
]
mutations = st.builds(
    Mutation, st.sampled_from(MUTATIONS), st.integers(0, 8), st.integers(0, 2**20), st.binary(max_size=8)
)

msgpack_values = st.recursive(
    st.one_of(junk, st.integers(-(2**63), 2**64 - 1)),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.text(max_size=4), inner, max_size=4),
        st.builds(msgspec.msgpack.Ext, st.integers(-128, 127), st.binary(max_size=16)),
    ),
    max_leaves=12,
)
random_headers = st.one_of(
    st.binary(max_size=256),
    msgpack_values.map(msgspec.msgpack.encode),
    st.tuples(msgpack_values, msgpack_values).map(
        lambda parts: flat_header(*map(msgspec.msgpack.encode, parts))
    ),
)


# -- running the generators ---------------------------------------------------


class Fuzzer:
    """Each generated input goes to every backend spec: generation, the slow part, is paid once."""

    def __init__(self, specs: list[str], examples: int) -> None:
        self.backends = {spec: get_serializer(spec) for spec in specs}
        self.profile = hypothesis_profile(examples)
        self.tally = Tally()

    def _judge_all(self, frames_for: Callable[[str, Serializer], tuple[Frames, Any]]) -> None:
        for spec, serializer in self.backends.items():
            frames, type_ = frames_for(spec, serializer)
            note(f"backend {spec}: {len(frames)} frame(s) decoded as {type_}")
            self.tally.add(spec, judge(serializer, frames, type_))

    def crafted(self) -> None:
        """Generated messages whose array headers lie about dtype, shape, size or frame."""

        @self.profile
        @given(case=crafted_messages())
        def run(case: tuple[Any, Frames, Any]) -> None:
            obj, payload, type_ = case
            self._judge_all(lambda spec, s: (craft(wire_format(s), obj, payload), type_))

        run()

    def mutated(self) -> None:
        """Valid encodings with frames truncated, dropped, added, swapped or bytes overwritten."""

        @self.profile
        @given(
            seed=st.integers(0, len(seed_messages()) - 1),
            ops=st.lists(mutations, max_size=3),
            retype=st.sampled_from([None, *DECODE_TYPES]),
        )
        def run(seed: int, ops: list[Mutation], retype: Any) -> None:
            def frames_for(spec: str, _: Serializer) -> tuple[Frames, Any]:
                frames, type_ = seed_encodings(spec)[seed]
                mutated = list(frames)
                for op in ops:
                    op.apply(mutated)
                return mutated, type_ if retype is None else retype

            self._judge_all(frames_for)

        run()

    def random(self) -> None:
        """Random bytes, and random well-formed msgpack that is not a message, as any type."""

        @self.profile
        @given(
            head=random_headers,
            rest=st.lists(st.binary(max_size=64), max_size=3),
            type_=st.sampled_from(DECODE_TYPES),
        )
        def run(head: bytes, rest: list[bytes], type_: Any) -> None:
            self._judge_all(lambda spec, s: ([head, *rest], type_))

        run()

    def run_all(self) -> Tally:
        for strategy in STRATEGIES:
            getattr(self, strategy)()
        return self.tally


STRATEGIES = ["crafted", "mutated", "random"]


def hypothesis_profile(examples: int) -> settings:
    """Deterministic (same inputs, same counts on every run), no deadline: a slow CI box is not a hang."""
    return settings(
        max_examples=examples,
        derandomize=True,
        database=None,
        deadline=None,
        print_blob=True,
        suppress_health_check=list(HealthCheck),
    )


def examples_per_strategy() -> int:
    """Inputs per generator: CI's bounded default, or ``SERBENCH_SOAK=N`` for a long soak."""
    return int(os.environ.get("SERBENCH_SOAK") or 1000)
