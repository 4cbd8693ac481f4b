"""``flat-mmk``: the message flattened to one tensor table plus a structure of indices.

The flattened-MultiModalKwargs stage: instead of an ext holding each tensor
where it sits, every tensor and ndarray of the message is pulled into one
table (dtype, shape, bytes-or-frame) sent beside the structure, whose leaves
become small index refs; decoding rebuilds the table first, then puts the
tensors back into the structure.
"""

from __future__ import annotations

from typing import Any

import msgspec
import numpy as np
import torch

from serializers.base import Buffer, DecodeError
from serializers.msgpack_backend import NDARRAY_EXT, TENSOR_EXT, MsgpackSerializer
from serializers.tensors import (
    ndarray_buffer,
    numpy_dtype_name,
    tensor_buffer,
    tensor_from_buffer,
    torch_dtype_name,
)
from workloads.tree import map_leaves

REF_EXT = 3
TableEntry = tuple[int, str, list[int], int | bytes]


class _Ref:
    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index


class FlatMMKSerializer(MsgpackSerializer):
    """msgpack; one flat tensor table + index structure; tensors via torch.frombuffer."""

    name = "flat-mmk"
    description = "msgpack; message flattened to one tensor table + a structure of indices"
    tensor_to_buffer = staticmethod(tensor_buffer)
    tensor_from_buffer = staticmethod(tensor_from_buffer)

    def encode_header(self, obj: Any) -> bytes:
        table: list[TableEntry] = []

        def to_ref(leaf: Any) -> Any:
            if isinstance(leaf, torch.Tensor):
                code, dtype, buf = TENSOR_EXT, torch_dtype_name(leaf.dtype), tensor_buffer(leaf)
            elif isinstance(leaf, np.ndarray):
                code, dtype, buf = NDARRAY_EXT, numpy_dtype_name(leaf.dtype), ndarray_buffer(leaf)
            else:
                return leaf
            table.append((code, dtype, list(leaf.shape), self.array_ref(buf)))
            return msgspec.msgpack.Ext(REF_EXT, (len(table) - 1).to_bytes(4, "little"))

        structure = map_leaves(obj, to_ref)
        return super().encode_header((structure, table))

    def decode_header(self, header: Buffer, type_: Any) -> Any:
        structure, table = super().decode_header(header, tuple[type_, list[TableEntry]])
        arrays = [self.array_from_ref(code, dtype, shape, ref) for code, dtype, shape, ref in table]

        def resolve(leaf: Any) -> Any:
            if not isinstance(leaf, _Ref):
                return leaf
            if leaf.index >= len(arrays):
                raise DecodeError(f"tensor ref {leaf.index} outside the table of {len(arrays)}")
            return arrays[leaf.index]

        return map_leaves(structure, resolve)

    def _ext_hook(self, code: int, data: memoryview) -> Any:
        if code != REF_EXT or len(data) != 4:
            raise DecodeError(f"unexpected ext type {code} of {len(data)} bytes")
        return _Ref(int.from_bytes(data, "little"))
