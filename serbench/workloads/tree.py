"""Walk message trees: Structs, lists, tuples and dicts down to their leaves.

One walker serves the flattening backend, checksums and the conformance
comparison, so they all agree on what a message's leaves are.
"""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import msgspec
import numpy as np

from serbench.runtime import lazy

torch = lazy.torch(__name__)  # imported on first use (serbench.runtime.lazy)


def is_array(obj: object) -> bool:
    """True for the leaves that carry payload bytes: tensors and ndarrays. Asked of every leaf
    of a text message too, it does not import torch to say no: without torch imported, no
    object is a tensor."""
    if isinstance(obj, np.ndarray):
        return True
    loaded = lazy.imported()
    return loaded is not None and isinstance(obj, loaded.Tensor)


def map_leaves(obj: Any, fn: Callable[[Any], Any]) -> Any:
    """Rebuild ``obj`` with every non-container leaf replaced by ``fn(leaf)``."""
    if isinstance(obj, msgspec.Struct):
        changes = {name: map_leaves(getattr(obj, name), fn) for name in obj.__struct_fields__}
        return msgspec.structs.replace(obj, **changes)
    if isinstance(obj, list):
        return [map_leaves(item, fn) for item in obj]
    if isinstance(obj, tuple):
        return tuple(map_leaves(item, fn) for item in obj)
    if isinstance(obj, dict):
        return {key: map_leaves(value, fn) for key, value in obj.items()}
    return fn(obj)


_SCALARS = (int, float, str, bytes, type(None))


def iter_leaves(obj: Any, *, scalars: bool = True) -> Iterator[Any]:
    """Yield every non-container leaf of ``obj`` in a fixed depth-first order; with ``scalars``
    false, without the scalar items of lists and tuples (a prompt's thousands of token ids),
    which ``arrays`` has no use for."""
    if isinstance(obj, msgspec.Struct):
        for name in obj.__struct_fields__:
            yield from iter_leaves(getattr(obj, name), scalars=scalars)
    elif isinstance(obj, (list, tuple)):
        for item in obj:
            if not isinstance(item, _SCALARS):
                yield from iter_leaves(item, scalars=scalars)
            elif scalars:
                yield item
    elif isinstance(obj, Mapping):  # a dict, or a mapping class such as vLLM's MultiModalKwargsItem
        for value in obj.values():
            yield from iter_leaves(value, scalars=scalars)
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):  # vLLM's multimodal types
        for f in dataclasses.fields(obj):
            yield from iter_leaves(getattr(obj, f.name), scalars=scalars)
    else:
        yield obj


def arrays(obj: Any) -> Iterator[torch.Tensor | np.ndarray]:
    """Every tensor and ndarray of ``obj``, in ``iter_leaves``'s order. Workers check every
    step they decode with it (``payload_checksum``), so it walks past a prompt's token ids
    without yielding each, much faster than filtering every leaf of a text prefill step."""
    return (leaf for leaf in iter_leaves(obj, scalars=False) if is_array(leaf))


def array_bytes(arr: torch.Tensor | np.ndarray) -> memoryview:
    """The raw bytes of a tensor or ndarray in C order (copies if strided, or if a conjugate
    or negative view, whose memory holds the values before conjugation or negation)."""
    if isinstance(arr, torch.Tensor):
        flat = arr.detach().cpu().resolve_conj().resolve_neg().contiguous().reshape(-1)
        return memoryview(flat.view(torch.uint8).numpy())
    return memoryview(np.ascontiguousarray(arr).reshape(-1).view(np.uint8))


def payload_bytes(obj: Any) -> int:
    """Bytes of tensor/ndarray payload in a message."""
    return sum(leaf.nbytes for leaf in arrays(obj))


def payload_checksum(obj: Any) -> int:
    """CRC32 over every tensor/ndarray's bytes, its dtype and shape, in order.

    Computed outside any timed path; the ipc scenario carries it beside a
    request so that a corrupted or stale buffer fails the case.
    """
    crc = 0
    for leaf in arrays(obj):
        crc = zlib.crc32(f"{leaf.dtype}{tuple(leaf.shape)}".encode(), crc)
        crc = zlib.crc32(array_bytes(leaf), crc)
    return crc


MINIATURE_LAST_DIM = 256  # elements kept along an array's last dim (and 2 along the others)


def miniature(message: Any) -> Any:
    """``message`` with every array cut to a few KiB, same dtype and rank, still above
    the default zero-copy threshold: it runs the same code as the real request."""

    def shrink(leaf: Any) -> Any:
        if not is_array(leaf) or leaf.ndim == 0:
            return leaf
        part = leaf[(*(slice(0, 2) for _ in leaf.shape[:-1]), slice(0, MINIATURE_LAST_DIM))]
        return part.contiguous() if isinstance(part, torch.Tensor) else np.ascontiguousarray(part)

    return map_leaves(message, shrink)
