"""Backends ``sglang`` and ``sglang-pickle``: the two paths SGLang's frontend and scheduler talk by.

``sglang`` is SGLang's msgspec path, ``io_struct.msgpack_encode`` / ``msgpack_decode``: one frame,
every tensor inside it as SGLang's own ext type, decoded through the one tagged Union of its
request types. ``sglang-pickle`` is its default path, what ``sock_send`` does while
``SGLANG_USE_PICKLE_IPC`` is on (``send_pyobj``): the whole message pickled at the highest protocol,
in one frame. Both are marked unsafe: unpickling runs code named by its input, and SGLang's
msgspec decoder unpickles a ``PickleWrapper`` sent as the message. SGLang's own messages
(``layout=sglang-native``) both carry; what the msgspec path cannot is declared below.
"""

from __future__ import annotations

import pickle
from collections.abc import Sequence
from typing import Any

from serbench.model.specs import SpecError
from serbench.plugins.sglang import adapter
from serbench.serializers.base import Buffer, DecodeError
from serbench.serializers.pickle_backend import PickleSerializer

# SGLang's msgpack_encode refuses any top-level object but its own Structs and int, float, bool,
# bytes: every payload of serbench's own (tensors, serbench's message models) is outside that
# Union, so only layout=sglang-native's cases are carried. Checked by the conformance suite.
OWN_TYPES_ONLY = (
    "SGLang's msgpack path carries only its own request types (BaseReq / BaseBatchReq) and "
    "int, float, bool, bytes at the top; this payload is none of them"
)
UNSUPPORTED = {
    pattern: OWN_TYPES_ONLY
    for pattern in (
        "dtype-*",
        "scalar-0d-*",
        "nan-payloads-*",
        "empty-*",
        "transposed",
        "column-slice",
        "row-slice",
        "offset-1d",
        "strided-1d*",
        "expanded",
        "conj-view",
        "neg-view",
        "*-threshold",
        "large",
        "requires-grad",
        "in-flight",
        "numpy-*",
        "nested-list",
        "dict-of-tensors",
        "mmk-all-kinds",
        "workload-text-sonnet",
        "workload-text-sonnet:[!l]*",
        "workload-text-outputs",
        "workload-outputs-*",
        "workload-tensor-*",
        "workload-images-llava",
        "workload-images-qwen2-vl-*",
        "workload-images-[0-9]",
        "workload-images-[0-9][0-9]",
        "workload-images-[0-9][0-9][0-9]",
        "workload-images-*layout=compact*",
        "workload-images-*layout=vllm*",
    )
}


def _load() -> Any:
    try:
        return adapter.load()
    except adapter.Missing as exc:
        raise SpecError(str(exc)) from None


class SglangSerializer:
    """SGLang's own msgpack_encode / msgpack_decode (io_struct), one frame per message."""

    name = "sglang"
    description = "SGLang's msgspec IPC path, io_struct.msgpack_encode / msgpack_decode (tensors in-band)"
    # Its Union holds PickleWrapper, and msgpack_decode unpickles one sent at the top: code named by
    # its input runs (tests/plugins/test_sglang.py shows it), so it is not safe for untrusted input.
    safe = False
    unsupported = UNSUPPORTED

    def __init__(self) -> None:
        sglang = _load()
        self.sglang_version = sglang.version
        self._encode = sglang.msgpack_encode
        self._decode = sglang.msgpack_decode

    def encode(self, obj: Any) -> list[Buffer]:
        return [self._encode(obj)]

    def decode(self, frames: Sequence[Buffer], type_: Any = Any) -> Any:
        """The message of ``frames[0]``, decoded through SGLang's one Union of its types; a frame of
        another of them than ``type_`` is refused, as SGLang's dispatch by type refuses it."""
        try:
            message = self._decode(frames[0])
        except Exception as exc:
            raise DecodeError(f"{self.name}: {type(exc).__name__}: {exc}") from exc
        if type_ is not Any and not isinstance(message, type_):
            raise DecodeError(f"{self.name}: decoded a {type(message).__name__}, expected {type_.__name__}")
        return message


class SglangPickleSerializer:
    """SGLang's default IPC path: ``send_pyobj``'s pickle, highest protocol, one frame."""

    name = "sglang-pickle"
    description = "SGLang's default IPC path (SGLANG_USE_PICKLE_IPC): send_pyobj's pickle, one frame"
    safe = False
    unsupported = PickleSerializer.unsupported  # the same pickle, torch's own tensor reducer

    def __init__(self) -> None:
        self.sglang_version = _load().version

    def encode(self, obj: Any) -> list[Buffer]:
        return [pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)]

    def decode(self, frames: Sequence[Buffer], type_: Any = Any) -> Any:
        return pickle.loads(frames[0])
