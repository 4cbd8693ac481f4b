"""The msgpack family: msgspec encodes the message, tensors leave as ext types.

Each tensor or ndarray becomes a msgpack ext whose data is ``(dtype, shape,
ref)``: ``ref`` is the raw bytes inline when the array is smaller than
``threshold`` bytes, otherwise the index of a separate frame that is a view
of the array's own memory (zero-copy). ``threshold=inf`` puts everything
inline. Subclasses choose how a tensor becomes bytes and back; the framing,
the checks and the error contract live here once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import msgspec
import numpy as np

from serbench.runtime import lazy
from serbench.serializers.base import DEFAULT_THRESHOLD, Buffer, DecodeError, parse_threshold
from serbench.serializers.tensors import (
    UNCARRIED_DTYPES,
    ndarray_buffer,
    ndarray_from_buffer,
    numpy_dtype_name,
    torch_dtype_name,
)

torch = lazy.torch(
    __name__
)  # imported on first use (serbench.runtime.lazy): a text-only counting run never pays it

TENSOR_EXT = 1
NDARRAY_EXT = 2
GRAD_TENSOR_EXT = 4  # a tensor that requires grad: rebuilt as a leaf that does (3 is flat-mmk's ref)

ArrayHeader = tuple[str, list[int], int | bytes]
_header_encoder = msgspec.msgpack.Encoder()
_header_decoder = msgspec.msgpack.Decoder(ArrayHeader)


class MsgpackSerializer:
    """msgpack via msgspec; arrays as ext types, large ones as zero-copy frames."""

    safe = True
    unsupported = {
        **UNCARRIED_DTYPES,
        # docs/vllm.md: msgspec meets vLLM's MultiModalKwargsItem (a UserDict) and its field
        # dataclasses, which only vLLM's own enc/dec hooks know; this backend carries the model
        # of them, images-N:layout=vllm. vLLM's outputs (Structs and numpy arrays) it carries.
        "workload-images-*layout=vllm-native*": "vLLM's own message types (MultiModalKwargsItem, its "
        "field objects) need vLLM's codec hooks; serbench's model of them is layout=vllm",
    }
    tensor_to_buffer: Callable[[torch.Tensor], memoryview]
    tensor_from_buffer: Callable[[Any, Any, Buffer], torch.Tensor]

    def __init__(self, threshold: str | float = DEFAULT_THRESHOLD) -> None:
        self.threshold = parse_threshold(threshold)
        self._encoder = msgspec.msgpack.Encoder(enc_hook=self._enc_hook)
        self._decoders: dict[Any, msgspec.msgpack.Decoder] = {}
        # The frames of the encode or decode in progress, per thread: one instance
        # shared by threads must never put one message's frames into another.
        self._call = threading.local()

    # -- encode -------------------------------------------------------------

    def encode(self, obj: Any) -> list[Buffer]:
        self._call.aux = [b""]
        try:
            header = self.encode_header(obj)
            frames = self._call.aux
        finally:
            self._call.aux = []
        frames[0] = header
        return frames

    def encode_header(self, obj: Any) -> bytes:
        """Frame 0; arrays met on the way go through ``array_ref``."""
        return self._encoder.encode(obj)

    def _enc_hook(self, obj: Any) -> Any:
        if isinstance(obj, torch.Tensor):
            code = GRAD_TENSOR_EXT if obj.requires_grad else TENSOR_EXT
            dtype, buf = torch_dtype_name(obj.dtype), type(self).tensor_to_buffer(obj)
        elif isinstance(obj, np.ndarray):
            code, dtype, buf = NDARRAY_EXT, numpy_dtype_name(obj.dtype), ndarray_buffer(obj)
        else:
            raise TypeError(f"{self.name} cannot encode {type(obj).__name__}")
        return self.array_ext(code, dtype, list(obj.shape), buf)

    def array_ext(self, code: int, dtype: str, shape: list[int], buf: memoryview) -> msgspec.msgpack.Ext:
        """The ext for one array: its header, and its bytes inline or as a frame."""
        return msgspec.msgpack.Ext(code, _header_encoder.encode((dtype, shape, self.array_ref(buf))))

    def array_ref(self, buf: memoryview) -> int | memoryview:
        """The bytes themselves below the threshold, else the index of a new frame."""
        if buf.nbytes < self.threshold:
            return buf
        self._call.aux.append(buf)
        return len(self._call.aux) - 1

    # -- decode -------------------------------------------------------------

    def decode(self, frames: Sequence[Buffer], type_: Any = Any) -> Any:
        if not frames:
            raise DecodeError(f"{self.name}: no frames")
        self._call.frames, self._call.used = frames, set()
        try:
            obj = self.decode_header(frames[0], type_)
            if len(self._call.used) != len(frames) - 1:
                raise DecodeError(
                    f"{len(frames) - 1 - len(self._call.used)} frame(s) not referenced by the header"
                )
            return obj
        except DecodeError as exc:
            raise DecodeError(f"{self.name}: {exc}") from None
        except (Exception, RecursionError) as exc:
            raise DecodeError(f"{self.name}: {type(exc).__name__}: {exc}") from exc
        finally:
            self._call.frames, self._call.used = (), set()

    def decode_header(self, header: Buffer, type_: Any) -> Any:
        decoder = self._decoders.get(type_)
        if decoder is None:
            decoder = self._decoders[type_] = msgspec.msgpack.Decoder(type_, ext_hook=self._ext_hook)
        return decoder.decode(header)

    def _ext_hook(self, code: int, data: memoryview) -> Any:
        dtype, shape, ref = _header_decoder.decode(data)
        return self.array_from_ref(code, dtype, shape, ref)

    def array_from_ref(self, code: int, dtype: Any, shape: Any, ref: int | bytes) -> Any:
        """Rebuild one array from its header, checking the frame it points at."""
        buf = self._frame(ref) if isinstance(ref, int) else ref
        if code == TENSOR_EXT:
            return type(self).tensor_from_buffer(dtype, shape, buf)
        if code == GRAD_TENSOR_EXT:
            return type(self).tensor_from_buffer(dtype, shape, buf).requires_grad_()
        if code == NDARRAY_EXT:
            return ndarray_from_buffer(dtype, shape, buf)
        raise DecodeError(f"unknown ext type {code}")

    def _frame(self, index: int) -> Buffer:
        frames, used = self._call.frames, self._call.used
        if not 1 <= index < len(frames):
            raise DecodeError(f"frame index {index} outside the {len(frames) - 1} payload frame(s)")
        if index in used:
            raise DecodeError(f"frame {index} referenced twice")
        used.add(index)
        return frames[index]
