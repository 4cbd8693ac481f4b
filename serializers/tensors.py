"""Tensors and ndarrays as (dtype name, shape, raw bytes), checked both ways.

Shared by every backend that moves array bytes itself. Decoding trusts
nothing: the dtype must be a known one, the shape non-negative and small in
rank, and the buffer exactly as long as dtype and shape say — so a declared
size never drives an allocation and a tensor never views bytes outside its
own buffer.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from serializers.base import Buffer, DecodeError
from workloads.tree import array_bytes

TORCH_DTYPES: dict[str, torch.dtype] = {
    str(dt).removeprefix("torch."): dt
    for dt in (
        torch.bool,
        torch.uint8,
        torch.int8,
        torch.int16,
        torch.int32,
        torch.int64,
        torch.float16,
        torch.bfloat16,
        torch.float32,
        torch.float64,
        torch.complex64,
        torch.complex128,
    )
}
MAX_RANK = 32
_NUMPY_KINDS = "biufc"


def torch_dtype_name(dtype: torch.dtype) -> str:
    name = str(dtype).removeprefix("torch.")
    if name not in TORCH_DTYPES:
        raise TypeError(f"unsupported tensor dtype {name}")
    return name


def numpy_dtype_name(dtype: np.dtype) -> str:
    if dtype.kind not in _NUMPY_KINDS:
        raise TypeError(f"unsupported ndarray dtype {dtype} (only bool, int, float, complex)")
    return dtype.str


def tensor_buffer(tensor: torch.Tensor) -> memoryview:
    """A tensor's bytes: a view of its memory when contiguous, else one copy.

    ``contiguous()`` (not ``flatten()``) is what makes a strided 1-D tensor
    such as ``arange(8)[::2]`` viewable as bytes (the regression of docs/architecture.md, "History").
    """
    return array_bytes(tensor)


def ndarray_buffer(array: np.ndarray) -> memoryview:
    numpy_dtype_name(array.dtype)
    return array_bytes(array)


def _checked(dtype_name: str, shape: Any, buf: Buffer, itemsize: int) -> tuple[int, memoryview]:
    """Element count and a flat byte view, after checking the buffer backs the shape."""
    if not isinstance(shape, (list, tuple)) or len(shape) > MAX_RANK:
        raise DecodeError(f"shape must be a list of at most {MAX_RANK} dims, got {shape!r:.80}")
    for dim in shape:
        if dim.__class__ is not int or dim < 0:
            raise DecodeError(f"shape dims must be non-negative ints, got {shape!r:.80}")
    view = memoryview(buf)
    if view.ndim != 1 or view.format != "B":
        view = view.cast("B")
    numel = math.prod(shape)
    if view.nbytes != numel * itemsize:
        raise DecodeError(
            f"{dtype_name}{list(shape)} needs {numel * itemsize} bytes, the buffer holds {view.nbytes}"
        )
    return numel, view


def _torch_dtype(dtype_name: Any) -> torch.dtype:
    try:
        return TORCH_DTYPES[dtype_name]
    except (KeyError, TypeError):
        raise DecodeError(f"unknown tensor dtype {dtype_name!r:.40}") from None


def tensor_from_buffer(dtype_name: Any, shape: Any, buf: Buffer) -> torch.Tensor:
    """A tensor that views ``buf`` (``torch.frombuffer``, no numpy temporary)."""
    dtype = _torch_dtype(dtype_name)
    numel, view = _checked(dtype_name, shape, buf, dtype.itemsize)
    if numel == 0:  # torch.frombuffer refuses an empty buffer
        return torch.empty(shape, dtype=dtype)
    return torch.frombuffer(view, dtype=dtype).view(shape)


def ndarray_from_buffer(dtype_name: Any, shape: Any, buf: Buffer) -> np.ndarray:
    """An ndarray that views ``buf``."""
    try:
        dtype = np.dtype(dtype_name) if isinstance(dtype_name, str) else None
    except TypeError:
        dtype = None
    if dtype is None or dtype.kind not in _NUMPY_KINDS:
        raise DecodeError(f"unknown ndarray dtype {dtype_name!r:.40}")
    _, view = _checked(dtype_name, shape, buf, dtype.itemsize)
    return np.frombuffer(view, dtype=dtype).reshape(shape)


# The numpy dtype that carries each torch dtype's bytes (numpy has no bfloat16).
NUMPY_CARRIERS: dict[torch.dtype, np.dtype] = {
    dt: np.dtype(np.int16) if dt is torch.bfloat16 else torch.empty(0, dtype=dt).numpy().dtype
    for dt in TORCH_DTYPES.values()
}


def tensor_via_numpy(dtype_name: Any, shape: Any, buf: Buffer) -> torch.Tensor:
    """``np.frombuffer`` → ``torch.from_numpy``: the numpy-intermediate decode."""
    dtype = _torch_dtype(dtype_name)
    carrier = NUMPY_CARRIERS[dtype]
    _, view = _checked(dtype_name, shape, buf, dtype.itemsize)
    tensor = torch.from_numpy(np.frombuffer(view, dtype=carrier).reshape(shape))
    return tensor.view(dtype) if carrier.kind == "i" and dtype.is_floating_point else tensor


def tensor_as_numpy_buffer(tensor: torch.Tensor) -> memoryview:
    """``tensor.numpy()`` → buffer: the numpy-intermediate encode."""
    tensor = tensor.detach().cpu().contiguous()
    if tensor.dtype is torch.bfloat16:
        tensor = tensor.view(torch.int16)
    return ndarray_buffer(tensor.numpy())
