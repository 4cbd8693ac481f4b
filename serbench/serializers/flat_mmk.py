"""``flat-mmk``: the message flattened to one tensor table plus a structure of indices.

The flattened-MultiModalKwargs stage: instead of an ext holding each tensor
where it sits, every tensor and ndarray of the message is listed once in a
table of ``(kind, dtype, shape, bytes-or-frame)`` and the structure keeps
only its index. Frame 0 is the table (length-prefixed) followed by the
structure; decoding builds every tensor from the table first, so putting
them back into the structure is a list lookup.
"""

from __future__ import annotations

from typing import Any

import msgspec

from serbench.serializers.base import Buffer, DecodeError
from serbench.serializers.msgpack_backend import MsgpackSerializer
from serbench.serializers.tensors import tensor_buffer, tensor_from_buffer

REF_EXT = 3
TableEntry = tuple[int, str, list[int], int | bytes]
_table_encoder = msgspec.msgpack.Encoder()
_table_decoder = msgspec.msgpack.Decoder(list[TableEntry])
_PREFIX = 4


class FlatMMKSerializer(MsgpackSerializer):
    """msgpack; one flat tensor table + index structure; tensors via torch.frombuffer."""

    name = "flat-mmk"
    description = "msgpack; message flattened to one tensor table + a structure of indices"
    tensor_to_buffer = staticmethod(tensor_buffer)
    tensor_from_buffer = staticmethod(tensor_from_buffer)

    def encode_header(self, obj: Any) -> bytearray:
        self._call.table = []
        try:
            structure = super().encode_header(obj)
            # The table is encoded straight after its prefix and the small structure
            # appended: with everything inline the table is the whole payload, and
            # concatenating bytes would copy it twice more.
            header = bytearray(_PREFIX)
            _table_encoder.encode_into(self._call.table, header, _PREFIX)
        finally:
            self._call.table = []
        header[:_PREFIX] = (len(header) - _PREFIX).to_bytes(_PREFIX, "little")
        header += structure
        return header

    def array_ext(self, code: int, dtype: str, shape: list[int], buf: memoryview) -> msgspec.msgpack.Ext:
        self._call.table.append((code, dtype, shape, self.array_ref(buf)))
        return msgspec.msgpack.Ext(REF_EXT, (len(self._call.table) - 1).to_bytes(_PREFIX, "little"))

    def decode_header(self, header: Buffer, type_: Any) -> Any:
        view = memoryview(header).cast("B")
        size = int.from_bytes(view[:_PREFIX], "little")
        if len(view) < _PREFIX or size > len(view) - _PREFIX:
            raise DecodeError(f"tensor table of {size} bytes overruns a {len(view)}-byte header")
        table = _table_decoder.decode(view[_PREFIX : _PREFIX + size])
        self._call.arrays = [self.array_from_ref(*entry) for entry in table]
        try:
            return super().decode_header(view[_PREFIX + size :], type_)
        finally:
            self._call.arrays = []

    def _ext_hook(self, code: int, data: memoryview) -> Any:
        index = int.from_bytes(data, "little")
        if code != REF_EXT or len(data) != _PREFIX or index >= len(self._call.arrays):
            raise DecodeError(
                f"bad tensor ref (ext {code}, {len(data)} bytes) into a table of {len(self._call.arrays)}"
            )
        return self._call.arrays[index]
