"""The Serializer interface every backend implements (docs/architecture.md, "Interfaces").

A backend turns a message into frames (frame 0 a header, the rest payload buffers, possibly views
of the message's own memory) and back. Besides ``name``, ``encode`` and ``decode``, it may declare:

* ``safe`` — whether decoding untrusted bytes is safe (no code execution, no allocation the frames
  do not back); unknown backends count as unsafe;
* ``description`` — one line on its strategy;
* ``unsupported`` — conformance case tags it cannot carry, each with the reason; the conformance
  suite checks that each such case really fails;
* ``consumes_frames`` — whether its decode takes what its frames hold (a shm segment unlinked on
  receipt): a frame then decodes once, and one never decoded holds it until ``discard_frames``.
  Micro times such a decode on a frame of its own per call;
* ``unsupported_scenarios`` — scenario name → why it cannot run the backend (``scenario_unsupported``);
* ``channel()`` and ``attach(channel)`` — a context manager (or None: none needed), made without side
  effects, for what two processes must share from before one forks the other beside the frames
  (vLLM's tensor IPC queue), entered before the fork and left when both are done; ``attach`` gives
  it to the backend in either process (``has_channel``, ``shared_channel``, ``attached``).
"""

from __future__ import annotations

import contextlib
import functools
import warnings
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from serbench.runtime import lazy

torch = lazy.torch(__name__)  # imported on first use (serbench.runtime.lazy)

Buffer = Any  # anything with the buffer protocol: bytes, bytearray, memoryview, zmq.Frame


DEFAULT_THRESHOLD = 256


def parse_threshold(value: int | float | str) -> float:
    """Bytes at or above which an array leaves as its own frame; ``inf`` = never."""
    threshold = float(value)
    if not threshold >= 0:
        raise ValueError(f"threshold must be a byte count >= 0 or 'inf', got {value!r}")
    return threshold


@functools.cache  # once a process: the flag it spends is per process (and a fork inherits both)
def quiet_readonly_views() -> None:
    """Let torch give, unheard, its warning that a tensor viewing a read-only buffer could be
    written through; called by ``get_serializer``, and by any process that views frames otherwise.

    Decoded tensors view the received frames, read-only by design (zero-copy), and nothing
    writes through them; a writable buffer would cost the copy the decoders exist to avoid.
    ``torch.frombuffer`` and ``torch.from_numpy`` each give that warning once per process (a
    C++ warn-once flag, which forked children inherit), so giving both here, under a filter
    for that one message, keeps them off the terminal with no ``catch_warnings`` on the timed
    decode path (one costs more than ``torch.frombuffer`` itself) and no filter left
    installed for the rest of the process.
    """
    readonly = bytes(1)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given (buffer|NumPy array) is not writable")
        torch.frombuffer(readonly, dtype=torch.uint8)
        torch.from_numpy(np.frombuffer(readonly, np.uint8))


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


def describe(serializer: Serializer | type) -> str:
    """Its ``description``, else the first line of its class's docstring; of a backend or its class."""
    kind = serializer if isinstance(serializer, type) else type(serializer)
    return str(getattr(serializer, "description", "") or kind.__doc__ or "").strip().split("\n")[0]


def unsupported_cases(serializer: Serializer) -> Mapping[str, str]:
    return dict(getattr(serializer, "unsupported", {}) or {})


def frames_consumed(serializer: Serializer) -> bool:
    """Whether the backend declares that its decode consumes its frames (``consumes_frames``):
    each decodes once, and gives back what it holds then, also when the decode fails."""
    return bool(getattr(serializer, "consumes_frames", False))


def discard_frames(serializer: Serializer, frames: Sequence[Buffer], type_: type) -> None:
    """Give back what ``frames`` still hold where the backend's decode consumes them
    (``frames_consumed``), as a receiver that drops a message must: decoded, the result dropped,
    and a DecodeError too (a frame already taken, or a failed decode, which gave back what it
    held all the same). A no-op for any other backend."""
    if frames_consumed(serializer):
        with contextlib.suppress(DecodeError):
            serializer.decode(frames, type_)


def scenario_unsupported(serializer: Serializer, scenario: str) -> str | None:
    """Why ``scenario`` cannot run the backend, if the backend says (``unsupported_scenarios``)."""
    return dict(getattr(serializer, "unsupported_scenarios", {}) or {}).get(scenario)


def has_channel(serializer: Serializer) -> bool:
    """Whether the backend needs a channel shared with the processes it talks to (``channel()``)."""
    make = getattr(serializer, "channel", None)
    return make is not None and make() is not None


@contextlib.contextmanager
def shared_channel(serializer: Serializer) -> Iterator[Any]:
    """The backend's ``channel()`` entered and attached to ``serializer``: its channel, for the
    backends of the processes forked meanwhile (``attached``), released on the way out; None for a
    backend that needs none."""
    make = getattr(serializer, "channel", None)
    context = make() if make is not None else None
    if context is None:
        yield None
        return
    with context as channel:
        attached(serializer, channel)
        yield channel


def attached(serializer: Serializer, channel: Any) -> Serializer:
    """``serializer``, given ``channel`` (a ``shared_channel``; None: nothing to give)."""
    if channel is not None:
        serializer.attach(channel)
    return serializer
