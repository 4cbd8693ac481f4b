"""A backend written outside serbench, as a user would: named by dotted path.

``thirdparty_backend:make`` wraps msgspec's msgpack with its own tensor hook,
to show a few lines are enough to plug in and pass conformance.
"""

from typing import Any

import msgspec
import torch

from serbench.serializers.tensors import UNCARRIED_DTYPES, tensor_buffer, tensor_from_buffer


class HexTensors:
    """msgpack with tensors inline as (dtype, shape, bytes)."""

    name = "thirdparty"
    safe = True
    unsupported = {
        **{pattern: "ndarrays are not carried" for pattern in ("numpy-*", "nested-list", "mmk-all-kinds")},
        **UNCARRIED_DTYPES,
        "requires-grad": "autograd state is not carried",
    }

    def __init__(self, level: str = "1") -> None:
        self.level = int(level)

    def encode(self, obj: Any) -> list[bytes]:
        return [msgspec.msgpack.encode(obj, enc_hook=self._enc)]

    def decode(self, frames, type_):
        return msgspec.msgpack.decode(frames[0], type=type_, ext_hook=self._ext)

    @staticmethod
    def _enc(obj: Any) -> Any:
        if isinstance(obj, torch.Tensor):
            payload = msgspec.msgpack.encode((str(obj.dtype)[6:], list(obj.shape), tensor_buffer(obj)))
            return msgspec.msgpack.Ext(9, payload)
        raise TypeError(type(obj))

    @staticmethod
    def _ext(code: int, data: memoryview) -> Any:
        dtype, shape, raw = msgspec.msgpack.decode(data)
        return tensor_from_buffer(dtype, shape, bytearray(raw))


def make(**options: str) -> HexTensors:
    return HexTensors(**options)
