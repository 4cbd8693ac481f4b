"""Mutants: built-in backends with one realistic bug each, to prove the conformance suite.

``pytest tests/serializers/test_conformance.py --backend mutants:mutant:bug=NAME`` must
fail for every bug in ``MUTANTS`` (tests/serializers/test_mutants.py asserts it, and that
the specimen named beside each bug is one that kills it). A mutant that
survives shows a specimen missing from ``serbench.serializers.conformance``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from serbench.serializers.flat_mmk import FlatMMKSerializer
from serbench.serializers.msgpack_backend import NDARRAY_EXT
from serbench.serializers.msgspec_frombuffer import MsgspecFrombufferSerializer
from serbench.serializers.numpy_intermediate import NumpyIntermediateSerializer
from serbench.serializers.pickle_oob import PickleOOBSerializer, _TensorPickler
from serbench.serializers.tensors import ndarray_buffer, tensor_buffer, tensor_from_buffer


def _from_storage_start(tensor: torch.Tensor) -> memoryview:
    """Contiguous tensors sent from the start of their storage: a view's offset ignored."""
    if tensor.is_contiguous():
        tensor = tensor.as_strided((tensor.numel(),), (1,), 0)
    return tensor_buffer(tensor)


class IgnoreOffset(MsgspecFrombufferSerializer):
    tensor_to_buffer = staticmethod(_from_storage_start)


def _in_memory_order(tensor: torch.Tensor) -> memoryview:
    """The storage read in memory order from the view's offset: strides ignored."""
    return tensor_buffer(tensor.as_strided((tensor.numel(),), (1,), tensor.storage_offset()))


class IgnoreStrides(MsgspecFrombufferSerializer):
    tensor_to_buffer = staticmethod(_in_memory_order)


class DropByteOrder(MsgspecFrombufferSerializer):
    """ndarrays labelled by dtype name ('float32'), which has no byte order."""

    def _enc_hook(self, obj: Any) -> Any:
        if isinstance(obj, np.ndarray):
            label = np.dtype(obj.dtype.name).str
            return self.array_ext(NDARRAY_EXT, label, list(obj.shape), ndarray_buffer(obj))
        return super()._enc_hook(obj)


class TruncateLastFrame(MsgspecFrombufferSerializer):
    """An off-by-one: the last payload frame loses its last byte."""

    def encode(self, obj: Any) -> list:
        frames = super().encode(obj)
        if len(frames) > 1:
            frames[-1] = memoryview(frames[-1]).cast("B")[:-1]
        return frames


def _float64_as_4_bytes(tensor: torch.Tensor) -> memoryview:
    """A hand-written element-size table with float64 at 4 bytes."""
    buf = tensor_buffer(tensor)
    return buf[: tensor.numel() * 4] if tensor.dtype is torch.float64 else buf


class WrongItemsize(MsgspecFrombufferSerializer):
    tensor_to_buffer = staticmethod(_float64_as_4_bytes)


class _GradlessPickler(_TensorPickler):
    def reducer_override(self, obj: Any) -> Any:
        reduced = super().reducer_override(obj)
        if reduced is NotImplemented:
            return reduced
        rebuild, args = reduced
        return rebuild, args[:3]  # requires_grad left out


class LoseRequiresGrad(PickleOOBSerializer):
    pickler = _GradlessPickler


class ReuseSendBuffer(MsgspecFrombufferSerializer):
    """Payload frames staged in one buffer per frame slot, overwritten by the next encode."""

    def __init__(self) -> None:
        super().__init__()
        self._staging: dict[int, bytearray] = {}

    def array_ref(self, buf: memoryview) -> int | memoryview:
        ref = super().array_ref(buf)
        if isinstance(ref, int):
            staging = self._staging.setdefault(ref, bytearray(buf.nbytes))
            if len(staging) != buf.nbytes:
                staging = self._staging[ref] = bytearray(buf.nbytes)
            staging[:] = buf.cast("B")
            self._call.aux[ref] = memoryview(staging)
        return ref


class WrongFrameIndex(FlatMMKSerializer):
    """Frame references counted from the end."""

    def _frame(self, index: int) -> Any:
        return super()._frame(len(self._call.frames) - index)


def _canonical_nans(tensor: torch.Tensor) -> memoryview:
    """NaNs rewritten as the canonical NaN: payload and sign bits lost."""
    if tensor.dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        tensor = torch.where(tensor.isnan(), torch.tensor(math.nan, dtype=tensor.dtype), tensor)
    return tensor_buffer(tensor)


class CanonicalNaN(MsgspecFrombufferSerializer):
    tensor_to_buffer = staticmethod(_canonical_nans)


def _mask_bytes(tensor: torch.Tensor) -> memoryview:
    """bool tensors sent as an image mask: 0 / 255 rather than 0 / 1."""
    if tensor.dtype is torch.bool:
        return tensor_buffer(tensor.to(torch.uint8) * 255)
    return tensor_buffer(tensor)


class BoolBytes(MsgspecFrombufferSerializer):
    tensor_to_buffer = staticmethod(_mask_bytes)


class ZeroDToOneD(MsgspecFrombufferSerializer):
    """An empty shape sent as [1]."""

    def array_ext(self, code: int, dtype: str, shape: list[int], buf: memoryview) -> Any:
        return super().array_ext(code, dtype, shape or [1], buf)


def _empty_shortcut(dtype_name: Any, shape: Any, buf: Any) -> torch.Tensor:
    """torch.frombuffer refuses an empty buffer; the shortcut forgets the shape and dtype."""
    if isinstance(shape, list) and math.prod(shape) == 0:
        return torch.empty(0)
    return tensor_from_buffer(dtype_name, shape, buf)


class EmptyTensors(MsgspecFrombufferSerializer):
    tensor_from_buffer = staticmethod(_empty_shortcut)


def _stored_bits(tensor: torch.Tensor) -> memoryview:
    """The bits as stored: a conjugate view's conjugate bit dropped."""
    return tensor_buffer(tensor.conj() if tensor.is_conj() else tensor)


class IgnoreConj(MsgspecFrombufferSerializer):
    tensor_to_buffer = staticmethod(_stored_bits)


class Bfloat16AsFloat16(NumpyIntermediateSerializer):
    """numpy has no bfloat16, so it is labelled float16 (same size, other numbers)."""

    def _enc_hook(self, obj: Any) -> Any:
        if isinstance(obj, torch.Tensor) and obj.dtype is torch.bfloat16:
            obj = obj.view(torch.float16)
        return super()._enc_hook(obj)


class ReuseDecodeBuffer(FlatMMKSerializer):
    """Frames copied into one scratch buffer per frame slot, which decoded tensors view."""

    def __init__(self) -> None:
        super().__init__()
        self._scratch: dict[int, bytearray] = {}

    def _frame(self, index: int) -> Any:
        frame = memoryview(super()._frame(index)).cast("B")
        scratch = self._scratch.get(index)
        if scratch is None or len(scratch) != frame.nbytes:
            scratch = self._scratch[index] = bytearray(frame.nbytes)
        scratch[:] = frame
        return scratch


# bug → (backend class, a specimen that kills it)
MUTANTS: dict[str, tuple[Callable[[], Any], str]] = {
    "ignore-offset": (IgnoreOffset, "row-slice"),
    "ignore-strides": (IgnoreStrides, "transposed"),
    "drop-byte-order": (DropByteOrder, "numpy-big-endian"),
    "truncate-last-frame": (TruncateLastFrame, "above-threshold"),
    "wrong-itemsize": (WrongItemsize, "dtype-float64"),
    "lose-requires-grad": (LoseRequiresGrad, "requires-grad"),
    "reuse-send-buffer": (ReuseSendBuffer, "in-flight"),
    "wrong-frame-index": (WrongFrameIndex, "workload-images-llava"),
    "canonical-nan": (CanonicalNaN, "nan-payloads-float32"),
    "bool-bytes": (BoolBytes, "dtype-bool"),
    "zero-d-to-1-d": (ZeroDToOneD, "scalar-0d-float32"),
    "empty-tensors": (EmptyTensors, "empty-0x3"),
    "ignore-conj": (IgnoreConj, "conj-view"),
    "bfloat16-as-float16": (Bfloat16AsFloat16, "dtype-bfloat16"),
    "reuse-decode-buffer": (ReuseDecodeBuffer, "in-flight"),
}


def mutant(bug: str) -> Any:
    """The backend with ``bug``; ``--backend mutants:mutant:bug=ignore-offset``."""
    if bug not in MUTANTS:
        raise ValueError(f"unknown bug {bug!r}; bugs: {', '.join(MUTANTS)}")
    backend = MUTANTS[bug][0]()
    backend.name = f"mutant-{bug}"
    return backend
