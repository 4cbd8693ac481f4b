"""Backend ``vllm``: vLLM's own codec, ``MsgpackEncoder`` / ``MsgpackDecoder`` of ``vllm.v1.serial_utils``.

Used as vLLM uses it: one encoder, and one decoder per message type built once
and reused (the engine holds ``MsgpackDecoder(EngineCoreRequest)``, the frontend
``MsgpackDecoder(EngineCoreOutputs)``). ``threshold=`` is the encoder's
``size_threshold`` (bytes; tensors at or above it leave as their own frame;
``inf`` = everything inline; default: vLLM's ``VLLM_MSGPACK_ZERO_COPY_THRESHOLD``).
``tensor_ipc=torch_shm`` sends those tensors as vLLM's ``--mm-tensor-ipc torch_shm`` does, over
a queue beside the frames (``tensor_ipc.py``), which a scenario shares with the engine it forks
(``channel``, ``attach``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

from serbench.model.specs import SpecError
from serbench.plugins.vllm import adapter
from serbench.plugins.vllm.tensor_ipc import TRANSPORTS, UNSUPPORTED_SCENARIOS, Channel, Endpoint, checked
from serbench.serializers import conformance
from serbench.serializers.base import Buffer, DecodeError, parse_threshold

# What vLLM's codec does not carry, found by serbench's conformance suite (docs/vllm.md), which
# checks on every run that each really fails: vLLM's decoder rebuilds arrays only where the message
# type names them (``UNTYPED``); vLLM's own types (``layout=vllm-native``) it carries.
UNTYPED = (
    "vLLM's decoder rebuilds tensors only where the message type names torch.Tensor; "
    "this payload is typed Any, so it decodes as a [dtype, shape, data] list"
)
UNSUPPORTED = {
    **{
        pattern: UNTYPED
        for pattern in (
            *conformance.OWN_PAYLOAD_SPECIMENS,
            "workload-tensor-*",
            "workload-outputs-*layout=flat*",
            "workload-images-llava",
            "workload-images-qwen2-vl-*",
            # serbench's image layouts as run cases: bare (compact), compact, vllm — not vllm-native
            "workload-images-[0-9]",
            "workload-images-[0-9][0-9]",
            "workload-images-[0-9][0-9][0-9]",
            "workload-images-*layout=compact*",
            "workload-images-*layout=vllm",
            "workload-images-*layout=vllm,*",
        )
    },
    "conj-view": "vLLM's encoder views the tensor's bytes as uint8: torch refuses that on a conjugate view",
    "neg-view": "vLLM's encoder views the tensor's bytes as uint8: torch refuses that on a negative view",
}


class VllmSerializer:
    """vLLM's MsgpackEncoder / MsgpackDecoder(type), one decoder per message type; its tensors as
    out-of-band frames or over vLLM's tensor IPC queue (``tensor_ipc=``)."""

    name = "vllm"
    description = "vLLM's own MsgpackEncoder / MsgpackDecoder (vllm.v1.serial_utils), one decoder per type"
    # Without VLLM_ALLOW_INSECURE_SERIALIZATION its decoder refuses pickle ext types. Over tensor IPC
    # it unpickles what comes over the queue, which only this process and its forks can write to.
    safe = True
    unsupported = UNSUPPORTED

    def __init__(self, threshold: str | float | None = None, tensor_ipc: str = "none") -> None:
        try:
            vllm = adapter.load()
            self.tensor_ipc = checked(tensor_ipc)
            self._endpoint = None if self.tensor_ipc == "none" else Endpoint()
        except adapter.Missing as exc:
            raise SpecError(str(exc)) from None
        self.vllm_version = vllm.version
        if self._endpoint is not None:
            self.description = f"{self.description}; {TRANSPORTS[self.tensor_ipc]}"
            self.unsupported_scenarios = UNSUPPORTED_SCENARIOS
            self.consumes_frames = True  # a decode takes the frame's tensors off the queue
        self.threshold = None if threshold is None else parse_threshold(threshold)
        self._encoder = adapter.encoder(self.threshold, self._endpoint)
        if self.threshold is None:
            self.threshold = self._encoder.size_threshold
        self._decoders: dict[Any, Any] = {}

    def channel(self) -> contextlib.AbstractContextManager[Any] | None:
        """Over tensor IPC, the queue to share with a forked engine (``serializers.base``); else None."""
        return None if self._endpoint is None else Channel.opened()

    def attach(self, channel: Any) -> None:
        """Send and receive tensors over ``channel``, one ``channel()`` made here or in a parent."""
        self._endpoint.attach(channel)

    def encode(self, obj: Any) -> list[Buffer]:
        return self._encoder.encode(obj)

    def decode(self, frames: Sequence[Buffer], type_: Any = Any) -> Any:
        decoder = self._decoders.get(type_)
        if decoder is None:
            provider = None if self._endpoint is None else self._endpoint.receive
            decoder = self._decoders[type_] = adapter.decoder(None if type_ is Any else type_, provider)
        try:
            return decoder.decode(frames)
        except Exception as exc:
            raise DecodeError(f"{self.name}: {type(exc).__name__}: {exc}") from exc
