"""Tensors and ndarrays as (dtype name, shape, raw bytes), checked both ways.

Shared by every backend that moves array bytes itself. Decoding trusts
nothing: the dtype must be a known one, the shape non-negative and small in
rank, and the buffer exactly as long as dtype and shape say — so a declared
size never drives an allocation and a tensor never views bytes outside its
own buffer.
"""

from __future__ import annotations

import functools
import math
import warnings
from typing import Any

import numpy as np

from serbench.runtime import lazy
from serbench.serializers.base import Buffer, DecodeError, quiet_readonly_views
from serbench.workloads.tree import array_bytes

torch = lazy.torch(
    __name__
)  # imported on first use (serbench.runtime.lazy): a text-only counting run never pays it


def _carried_by_bytes(dtype: torch.dtype) -> bool:
    """Whether a tensor of ``dtype`` is its bytes: not quantized (scale and zero point live
    beside the bytes) and not one of torch's placeholder dtypes (``int1``..``uint7``, for
    tensor subclasses), which have no copy kernel at all."""
    with warnings.catch_warnings():  # complex32 is "experimental", quantized "deprecated": noise here
        warnings.simplefilter("ignore")
        probe = torch.empty(2, dtype=dtype)
    if probe.is_quantized:
        return False
    try:
        probe.clone()
    except RuntimeError:
        return False
    return True


@functools.cache
def torch_dtypes() -> dict[str, torch.dtype]:
    """Every dtype torch itself defines whose tensors are plain bytes, by name: the float8 and
    float4 variants, uint16/32/64, complex32 and the bits types included. Read from torch, so a
    newer torch's dtypes are carried without a change here."""
    quiet_readonly_views()  # the decoders' tensors view read-only frames
    dtype = torch.dtype  # first: this module's stand-in becomes torch (vars() of the stand-in is its own)
    return {
        str(dt).removeprefix("torch."): dt
        for dt in sorted({v for v in vars(torch).values() if isinstance(v, dtype)}, key=str)
        if _carried_by_bytes(dt)
    }


# What the byte-carrying backends declare they cannot carry (conformance specimen globs).
UNCARRIED_DTYPES = {
    "dtype-q*": "quantized tensors carry a scale and zero point (per tensor or per channel) "
    "beside their bytes; not carried",
    "dtype-int[1-7]": "torch's placeholder dtype for tensor subclasses: no copy kernel",
    "dtype-uint[1-7]": "torch's placeholder dtype for tensor subclasses: no copy kernel",
}
MAX_RANK = 32
_NUMPY_KINDS = "biufc"


def torch_dtype_name(dtype: torch.dtype) -> str:
    name = str(dtype).removeprefix("torch.")
    if name not in torch_dtypes():
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
        return torch_dtypes()[dtype_name]
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


def _numpy_carrier(dtype: torch.dtype) -> np.dtype:
    """numpy's own dtype for ``dtype``, or the unsigned int of its size where numpy has none
    (bfloat16, float8, complex32, bits): the bytes are the same, only the label differs."""
    try:
        return torch.empty(0, dtype=dtype).numpy().dtype
    except TypeError:
        return np.dtype(f"u{dtype.itemsize}")


@functools.cache
def _numpy_carriers() -> dict[torch.dtype, np.dtype]:
    """The numpy dtype that carries each torch dtype's bytes."""
    return {dt: _numpy_carrier(dt) for dt in torch_dtypes().values()}


@functools.cache
def _torch_of_numpy() -> dict[np.dtype, torch.dtype]:
    return {np.dtype(f"u{n}"): getattr(torch, f"uint{8 * n}") for n in (1, 2, 4, 8)}


def tables() -> None:
    """Build every dtype table now (each is built on first use otherwise): a process that forks
    cases builds them once, before, and no case's first timed call does."""
    _numpy_carriers()
    _torch_of_numpy()


def tensor_via_numpy(dtype_name: Any, shape: Any, buf: Buffer) -> torch.Tensor:
    """``np.frombuffer`` → ``torch.from_numpy``: the numpy-intermediate decode."""
    dtype = _torch_dtype(dtype_name)
    carrier = _numpy_carriers()[dtype]
    _, view = _checked(dtype_name, shape, buf, dtype.itemsize)
    tensor = torch.from_numpy(np.frombuffer(view, dtype=carrier).reshape(shape))
    return tensor if tensor.dtype is dtype else tensor.view(dtype)


def tensor_as_numpy_buffer(tensor: torch.Tensor) -> memoryview:
    """``tensor.numpy()`` → buffer: the numpy-intermediate encode."""
    tensor = tensor.detach().cpu().resolve_conj().resolve_neg().contiguous()
    carrier = _numpy_carriers().get(tensor.dtype)
    if carrier in _torch_of_numpy():
        tensor = tensor.view(_torch_of_numpy()[carrier])
    return ndarray_buffer(tensor.numpy())
