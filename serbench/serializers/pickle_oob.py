"""``pickle-oob``: pickle protocol 5 with out-of-band buffers as frames.

torch's own tensor reducer yields no ``PickleBuffer``, so tensors get a
reducer of their own that hands their bytes out of band; numpy arrays do so
natively. Quantized tensors (bytes plus scale and zero point) stay with
torch's reducer, in-band. Buffers below ``threshold`` bytes stay in-band. Still pickle:
unsafe for untrusted input.
"""

from __future__ import annotations

import io
import pickle
from collections.abc import Sequence
from typing import Any

from serbench.runtime import lazy
from serbench.serializers.base import DEFAULT_THRESHOLD, Buffer, parse_threshold
from serbench.serializers.tensors import UNCARRIED_DTYPES, tensor_buffer, tensor_from_buffer, torch_dtype_name

torch = lazy.torch(__name__)  # imported on first use: `serbench list` describes this backend without it


def rebuild_tensor(buf: Any, dtype: str, shape: list[int], requires_grad: bool = False) -> torch.Tensor:
    """Unpickling hook: a tensor viewing its out-of-band (or in-band) buffer."""
    tensor = tensor_from_buffer(dtype, shape, buf)
    return tensor.requires_grad_() if requires_grad else tensor


class _TensorPickler(pickle.Pickler):
    def reducer_override(self, obj: Any) -> Any:
        imported = lazy.imported()  # no tensor exists before torch: a text message never imports it
        if imported is not None and isinstance(obj, imported.Tensor) and not obj.is_quantized:
            buf = pickle.PickleBuffer(tensor_buffer(obj))
            return rebuild_tensor, (buf, torch_dtype_name(obj.dtype), list(obj.shape), obj.requires_grad)
        return NotImplemented


class PickleOOBSerializer:
    """pickle 5; tensor and ndarray bytes leave as out-of-band frames."""

    name = "pickle-oob"
    description = "pickle protocol 5, out-of-band PickleBuffers as frames (own tensor reducer)"
    safe = False
    pickler = _TensorPickler
    unsupported = {k: v for k, v in UNCARRIED_DTYPES.items() if k != "dtype-q*"}

    def __init__(self, threshold: str | float = DEFAULT_THRESHOLD) -> None:
        self.threshold = parse_threshold(threshold)

    def encode(self, obj: Any) -> list[Buffer]:
        frames: list[Buffer] = [b""]

        def out_of_band(buf: pickle.PickleBuffer) -> bool:
            raw = buf.raw()
            if raw.nbytes < self.threshold:
                return True  # truthy: keep in-band
            frames.append(raw)
            return False

        stream = io.BytesIO()
        self.pickler(stream, protocol=5, buffer_callback=out_of_band).dump(obj)
        frames[0] = stream.getbuffer()
        return frames

    def decode(self, frames: Sequence[Buffer], type_: type) -> Any:
        return pickle.loads(frames[0], buffers=frames[1:])
