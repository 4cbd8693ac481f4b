"""The Serializer interface every backend implements (docs/architecture.md, "Interfaces").

A backend turns a message into frames (frame 0 a header, the rest payload
buffers, possibly views of the message's own memory) and back. Besides
``name``, ``encode`` and ``decode``, a backend may declare:

* ``safe`` — whether decoding untrusted bytes is safe (no code execution, no
  allocation the frames do not back); unknown backends count as unsafe;
* ``description`` — one line on its strategy;
* ``unsupported`` — conformance case tags it cannot carry, each with the
  reason; the conformance suite checks that each such case really fails.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

Buffer = Any  # anything with the buffer protocol: bytes, bytearray, memoryview, zmq.Frame


DEFAULT_THRESHOLD = 256


def parse_threshold(value: int | float | str) -> float:
    """Bytes at or above which an array leaves as its own frame; ``inf`` = never."""
    threshold = float(value)
    if not threshold >= 0:
        raise ValueError(f"threshold must be a byte count >= 0 or 'inf', got {value!r}")
    return threshold


class DecodeError(ValueError):
    """Raised by safe backends for any input they cannot decode; says what was wrong."""


@runtime_checkable
class Serializer(Protocol):
    name: str

    def encode(self, obj: Any) -> list[Buffer]: ...

    def decode(self, frames: Sequence[Buffer], type_: type) -> Any: ...


def is_safe(serializer: Serializer) -> bool:
    """Whether the backend declares itself safe for untrusted input."""
    return bool(getattr(serializer, "safe", False))


def declared_safety(serializer: Serializer) -> bool | None:
    """What the backend declares: True safe, False unsafe, None nothing (treated as unsafe)."""
    safe = getattr(serializer, "safe", None)
    return None if safe is None else bool(safe)


def safety_text(safe: bool | None) -> str:
    """``declared_safety`` in words, for tables: no claim is made for a backend that made none."""
    return {True: "yes", False: "NO (runs code from input)", None: "undeclared (treated as unsafe)"}[safe]


def describe(serializer: Serializer) -> str:
    return (
        str(getattr(serializer, "description", "") or type(serializer).__doc__ or "").strip().split("\n")[0]
    )


def unsupported_cases(serializer: Serializer) -> Mapping[str, str]:
    return dict(getattr(serializer, "unsupported", {}) or {})
