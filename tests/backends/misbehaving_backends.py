"""Backends that go wrong on purpose, to prove the harness catches them.

* ``flatten_view`` is the reverted torch.frombuffer change of docs/architecture.md, "History":
  ``flatten().view(uint8)`` fails on a strided 1-D tensor such as
  ``arange(8)[::2]``. Conformance must reject it.
* ``misbehaving:mode=abort|hang|raise|wrong`` passes conformance (which only
  sends requests of up to 4 images) and then aborts the interpreter, hangs,
  raises, or (``wrong``) decodes each image as ``[dtype, shape]`` instead of
  a tensor, as an untyped third-party codec did, on a request with 8 or more
  images: the runner must record that case as failed, untimed, and go on.
* ``declares_everything`` returns None for everything and declares every
  specimen unsupported (``*``), so it passes conformance with nothing
  carried: its cases must be recorded as unsupported, never timed.
"""

from __future__ import annotations

import os
import time
from typing import Any

import torch

from serbench.serializers.msgspec_frombuffer import MsgspecFrombufferSerializer
from serbench.workloads.messages import EngineCoreRequest
from serbench.workloads.tree import is_array, map_leaves


def _flatten_view(tensor: torch.Tensor) -> memoryview:
    return memoryview(tensor.flatten().view(torch.uint8).numpy())


class FlattenView(MsgspecFrombufferSerializer):
    name = "flatten-view"
    tensor_to_buffer = staticmethod(_flatten_view)


def flatten_view() -> FlattenView:
    return FlattenView()


def _many_images(obj: Any) -> bool:
    return (
        isinstance(obj, EngineCoreRequest)
        and obj.mm_inputs is not None
        and len(obj.mm_inputs.items_by_modality["image"]) >= 8
    )


class Misbehaving(MsgspecFrombufferSerializer):
    name = "misbehaving"

    def __init__(self, mode: str) -> None:
        super().__init__()
        if mode not in ("abort", "hang", "raise", "wrong"):
            raise ValueError(f"mode must be abort, hang, raise or wrong, not {mode!r}")
        self.mode = mode

    def decode(self, frames: Any, type_: Any) -> Any:
        obj = super().decode(frames, type_)
        if self.mode == "wrong" and _many_images(obj):
            return map_leaves(obj, lambda x: [str(x.dtype), list(x.shape)] if is_array(x) else x)
        return obj

    def encode(self, obj: Any) -> list:
        if self.mode != "wrong" and _many_images(obj):
            if self.mode == "abort":
                os.abort()
            if self.mode == "hang":
                time.sleep(3600)
            raise RuntimeError("misbehaving backend raised on purpose")
        return super().encode(obj)


def misbehaving(mode: str = "raise") -> Misbehaving:
    return Misbehaving(mode)


class DeclaresEverything:
    """Carries nothing, says so for every specimen: conformance passes with zero passed."""

    name = "declares-everything"
    safe = True
    unsupported = {"*": "a stub: decodes everything as None"}

    def encode(self, obj: Any) -> list:
        return [b"stub"]

    def decode(self, frames: Any, type_: Any) -> None:
        return None


def declares_everything() -> DeclaresEverything:
    return DeclaresEverything()
