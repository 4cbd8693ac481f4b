"""Backends ``sglang`` and ``sglang-pickle``, the two paths SGLang's frontend and scheduler talk by,
and ``sglang-oob``, a what-if of the first with tensors out of band.

``sglang`` is SGLang's msgspec path, ``io_struct.msgpack_encode`` / ``msgpack_decode``: one frame,
every tensor inside it as SGLang's own ext type (or its features in shm segments: ``features=``,
``transports.py``), decoded through the one tagged Union of its request types. ``sglang-pickle``
is its default path, what ``sock_send`` does while ``SGLANG_USE_PICKLE_IPC`` is on
(``send_pyobj``): the whole message pickled at the highest protocol, in one frame. Both are marked
unsafe: unpickling runs code named by its input, and SGLang's msgspec decoder unpickles a
``PickleWrapper`` sent as the message. ``sglang-oob`` keeps SGLang's Union and hooks but sends
tensors as msgspec-frombuffer does, and is safe: it never unpickles. SGLang's own messages
(``layout=sglang-native``) all three carry; what the msgspec paths cannot is declared below.
"""

from __future__ import annotations

import functools
import pickle
import typing
from collections.abc import Sequence
from typing import Any, Union

import msgspec

from serbench.model.specs import SpecError
from serbench.plugins.sglang import adapter, transports
from serbench.runtime import lazy
from serbench.serializers import conformance
from serbench.serializers.base import DEFAULT_THRESHOLD, Buffer, DecodeError
from serbench.serializers.msgpack_backend import GRAD_TENSOR_EXT, TENSOR_EXT
from serbench.serializers.msgspec_frombuffer import MsgspecFrombufferSerializer
from serbench.serializers.pickle_backend import PickleSerializer

torch = lazy.torch(__name__)  # imported on first use (serbench.runtime.lazy)

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
        *conformance.OWN_PAYLOAD_SPECIMENS,
        "conj-view",
        "neg-view",
        "workload-text-sonnet",
        "workload-text-sonnet:[!l]*",
        "workload-text-outputs",
        "workload-outputs-[0-9]",
        "workload-outputs-[0-9][0-9]",
        "workload-outputs-[0-9][0-9][0-9]",
        "workload-outputs-[0-9][0-9][0-9][0-9]",
        "workload-outputs-*layout=nested*",
        "workload-outputs-*layout=flat*",
        "workload-outputs-*:logprobs=[0-9]",
        "workload-outputs-*:logprobs=[0-9][0-9]",
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


def as_asked(backend: str, message: Any, type_: Any) -> Any:
    """``message`` if it is a ``type_`` (or ``type_`` is Any); else a DecodeError, as SGLang's
    dispatch by type refuses another of its messages."""
    if type_ is not Any and not isinstance(message, type_):
        raise DecodeError(f"{backend}: decoded a {type(message).__name__}, expected {type_.__name__}")
    return message


def _load() -> Any:
    try:
        return adapter.load()
    except adapter.Missing as exc:
        raise SpecError(str(exc)) from None


MSGSPEC_PATH = "SGLang's msgspec IPC path, io_struct.msgpack_encode / msgpack_decode"


class SglangSerializer:
    """SGLang's own msgpack_encode / msgpack_decode (io_struct), one frame per message; its
    multimodal features inline, in shm segments or by CUDA IPC (``features=``, ``transports.py``)."""

    name = "sglang"
    description = f"{MSGSPEC_PATH} ({transports.FEATURES['inline']})"
    # Its Union holds PickleWrapper, and msgpack_decode unpickles one sent at the top: code named by
    # its input runs (tests/plugins/test_sglang.py shows it), so it is not safe for untrusted input.
    safe = False
    unsupported = UNSUPPORTED
    consumes_frames = False

    def __init__(self, features: str = "inline") -> None:
        self.features = transports.checked(features)
        self.description = f"{MSGSPEC_PATH} ({transports.FEATURES[features]})"
        # the receiver unlinks a frame's segments as it takes them: a frame decodes once
        self.consumes_frames = features == "shm"
        sglang = _load()
        self.sglang_version = sglang.version
        self._encode = sglang.msgpack_encode
        self._decode = sglang.msgpack_decode
        if features == "cuda_ipc":  # every case recorded unsupported, with why; the run goes on
            self.unsupported = {"workload-*": transports.cuda_ipc_unsupported(), **UNSUPPORTED}

    def encode(self, obj: Any) -> list[Buffer]:
        if self.features == "shm":
            obj = transports.in_shm(obj)
        elif self.features == "cuda_ipc":
            raise RuntimeError(self.unsupported["workload-*"])
        return [self._encode(obj)]

    def decode(self, frames: Sequence[Buffer], type_: Any = Any) -> Any:
        """The message of ``frames[0]``, decoded through SGLang's one Union of its types, its features
        taken out of their shm segments (``features=shm``); a frame of another of its types than
        ``type_`` is refused, as SGLang's dispatch by type refuses it."""
        try:
            message = self._decode(frames[0])
            if self.features == "shm":
                transports.out_of_shm(message)
        except Exception as exc:
            raise DecodeError(f"{self.name}: {type(exc).__name__}: {exc}") from exc
        return as_asked(self.name, message, type_)


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


# sglang-oob's own ext codes sit above SGLang's (1-5): its tensor ext, serbench's (dtype, shape, ref)
# header with the bytes inline or the index of their frame, shifted by OOB_EXT.
OOB_EXT = 16


class SglangOOBSerializer(MsgspecFrombufferSerializer):
    """SGLang's message types and hooks, tensors as zero-copy out-of-band frames (a what-if)."""

    name = "sglang-oob"
    description = (
        "SGLang's messages and msgpack hooks, tensors as out-of-band frames decoded by torch.frombuffer"
    )
    # It never unpickles: a PickleWrapper (SGLang's pickled payload) anywhere in a frame is refused,
    # and so are SGLang's in-band tensor, shm and CUDA IPC exts, which a peer's frame could make
    # allocate or attach what it names; its own tensors are checked as msgspec-frombuffer's.
    safe = True
    unsupported = UNSUPPORTED

    def __init__(self, threshold: str | float = DEFAULT_THRESHOLD) -> None:
        super().__init__(threshold)
        sglang = _load()
        self.sglang_version = sglang.version
        self._sglang = sglang
        self._message = msgspec.msgpack.Decoder(
            Union[sglang.message_types],  # noqa: UP007 (a Union of a tuple of types)
            dec_hook=self._dec_hook,
            ext_hook=self._ext_hook,
        )

    def _enc_hook(self, obj: Any) -> Any:
        if isinstance(obj, torch.Tensor):
            ext = super()._enc_hook(obj)
            return msgspec.msgpack.Ext(OOB_EXT + ext.code, ext.data)
        return self._sglang.enc_hook(obj)

    def decode_header(self, header: Buffer, type_: Any) -> Any:
        message = self._message.decode(header)
        if holds_pickle(message, self._sglang.PickleWrapper):
            raise DecodeError("a PickleWrapper (pickled code) is refused: this decoder never unpickles")
        return as_asked(self.name, message, type_)

    def _ext_hook(self, code: int, data: memoryview) -> Any:
        if code - OOB_EXT in (TENSOR_EXT, GRAD_TENSOR_EXT):
            return super()._ext_hook(code - OOB_EXT, data)
        if code in self._sglang.buffer_ext_codes:  # array.array, ndarray: built of the ext's bytes
            return self._sglang.ext_hook(code, data)
        raise DecodeError(f"ext type {code} refused (only array, ndarray and this backend's tensors)")

    def _dec_hook(self, type_: type, obj: Any) -> Any:
        if isinstance(obj, type_):
            return obj
        if type_ is torch.Tensor:  # SGLang's own hook would build one of a size the frame names
            raise DecodeError(f"a tensor field holds a {type(obj).__name__}, not a tensor ext")
        return self._sglang.dec_hook(type_, obj)


def holds_pickle(message: Any, pickled: type) -> bool:
    """Whether ``message`` holds a ``pickled`` (SGLang's PickleWrapper) at the top or in a field its
    type declares can hold one: only those fields are looked into."""
    if isinstance(message, pickled):
        return True
    if isinstance(message, msgspec.Struct):
        return any(
            holds_pickle(getattr(message, name), pickled) for name in _pickle_fields(type(message), pickled)
        )
    if isinstance(message, (list, tuple)):
        return any(holds_pickle(item, pickled) for item in message)
    if isinstance(message, dict):
        return any(holds_pickle(value, pickled) for value in message.values())
    return False


@functools.cache
def _pickle_fields(struct: type, pickled: type) -> tuple[str, ...]:
    """The fields of ``struct`` whose declared type can hold a ``pickled``, at any depth."""
    return tuple(f.name for f in msgspec.structs.fields(struct) if _can_hold(f.type, pickled, {struct}))


def _can_hold(type_: Any, pickled: type, seen: set[type]) -> bool:
    if type_ is pickled:
        return True
    if isinstance(type_, type) and issubclass(type_, msgspec.Struct):
        fields = msgspec.structs.fields(type_) if type_ not in seen else ()
        return any(_can_hold(f.type, pickled, seen | {type_}) for f in fields)
    return any(_can_hold(arg, pickled, seen) for arg in typing.get_args(type_))
