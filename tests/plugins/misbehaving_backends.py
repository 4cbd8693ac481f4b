"""Backends that go wrong on purpose, to prove the harness catches them.

* ``flatten_view`` is the reverted torch.frombuffer change of docs/architecture.md, "History":
  ``flatten().view(uint8)`` fails on a strided 1-D tensor such as
  ``arange(8)[::2]``. Conformance must reject it.
* ``misbehaving:mode=abort|hang|raise`` passes conformance (which only sends
  requests of up to 4 images) and then aborts the interpreter, hangs, or
  raises on a request with 8 or more images: the runner must record that case
  as failed and go on.
"""

from __future__ import annotations

import os
import time
from typing import Any

import torch

from serializers.msgspec_frombuffer import MsgspecFrombufferSerializer
from workloads.messages import EngineCoreRequest


def _flatten_view(tensor: torch.Tensor) -> memoryview:
    return memoryview(tensor.flatten().view(torch.uint8).numpy())


class FlattenView(MsgspecFrombufferSerializer):
    name = "flatten-view"
    tensor_to_buffer = staticmethod(_flatten_view)


def flatten_view() -> FlattenView:
    return FlattenView()


class Misbehaving(MsgspecFrombufferSerializer):
    name = "misbehaving"

    def __init__(self, mode: str) -> None:
        super().__init__()
        if mode not in ("abort", "hang", "raise"):
            raise ValueError(f"mode must be abort, hang or raise, not {mode!r}")
        self.mode = mode

    def encode(self, obj: Any) -> list:
        if (
            isinstance(obj, EngineCoreRequest)
            and obj.mm_inputs
            and len(obj.mm_inputs.items_by_modality["image"]) >= 8
        ):
            if self.mode == "abort":
                os.abort()
            if self.mode == "hang":
                time.sleep(3600)
            raise RuntimeError("misbehaving backend raised on purpose")
        return super().encode(obj)


def misbehaving(mode: str = "raise") -> Misbehaving:
    return Misbehaving(mode)
