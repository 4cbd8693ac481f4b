"""Backends for testing serbench itself: a real backend slowed by a known factor.

The gate's power and false-alarm rate are measured against a slowdown whose
size is known: ``serbench.testing:slowed:base=msgspec-frombuffer,factor=1.10``
encodes and decodes with the named backend, then spins for 10 % of the time
that call took (plus the wrapper's own measured overhead), so every call
takes 1.10 times what ``factor=1.0`` takes, noise included. ``factor=1.0`` is the
same backend with the same wrapper (the A side of an A/B test).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from serializers import get_serializer, is_safe, unsupported_cases


class Slowed:
    """Delegates to ``inner`` and stretches each encode/decode by ``factor``."""

    def __init__(self, inner: Any, factor: float) -> None:
        if factor < 1:
            raise ValueError(f"factor {factor} < 1: a backend cannot be made faster")
        self.inner = inner
        self.factor = factor
        self.name = f"slowed-{inner.name}"
        self.description = f"{inner.name}, every encode/decode stretched {factor:g} times"
        self.safe = is_safe(inner)
        self.unsupported = unsupported_cases(inner)
        self.overhead_s = 0.0
        self.overhead_s = min(_call_time(lambda: self._stretched(_noop)) for _ in range(5))

    def _stretched(self, fn: Callable[..., Any], *args: Any) -> Any:
        start = time.perf_counter()
        out = fn(*args)
        now = time.perf_counter()
        deadline = now + (now - start + self.overhead_s) * (self.factor - 1)
        while time.perf_counter() < deadline:
            pass
        return out

    def encode(self, obj: Any) -> list:
        return self._stretched(self.inner.encode, obj)

    def decode(self, frames: Sequence, type_: type) -> Any:
        return self._stretched(self.inner.decode, frames, type_)


def _noop() -> None:
    pass


def _call_time(fn: Callable[[], object], calls: int = 2000) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls


def slowed(base: str = "msgspec-frombuffer", factor: str = "1.10", slot: str = "") -> Slowed:
    """Factory for dotted-path specs: ``serbench.testing:slowed:base=NAME,factor=F``.

    ``slot`` changes nothing but the spec, so that one run can hold several
    otherwise identical cases (the gate-quality script's A sides).
    """
    return Slowed(get_serializer(base), float(factor))
