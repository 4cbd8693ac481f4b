"""Backends for testing serbench itself: a real backend slowed by a known factor.

The gate's power and false-alarm rate are measured against a slowdown whose
size is known: ``serbench.testing:slowed:base=msgspec-frombuffer,factor=1.10``
encodes and decodes with the named backend and repeats the operation on
every tenth call (see ``Slowed``), so a timing loop takes 1.10 times what
``factor=1.0`` takes, noise included. ``factor=1.0`` is the
same backend with the same wrapper (the A side of an A/B test).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from serbench.serializers import get_serializer, is_safe, unsupported_cases


class Slowed:
    """Delegates to ``inner`` and repeats its work so that each call costs ``factor`` calls.

    Every call adds ``factor - 1`` to the operation's credit and runs it once
    more for each whole unit: with 1.10, every tenth call works twice. The
    extra work is the real operation, freeing of its result included, so the
    slowdown is exactly ``factor`` of the operation's cost on average over a
    timing loop (a timed spin after each call measured short: the freeing of
    the returned result happens outside the call, and a sub-microsecond spin
    drowns in the wrapper's own bookkeeping). The credit is counted in
    millionths, in integers, so that the repeats recur exactly: with 1.005, one
    call in every 200 and never the 201st (float steps of 0.005 drift), which
    instruction counts, exact to a call, would see.
    """

    UNIT = 1_000_000  # credit per whole extra call

    def __init__(self, inner: Any, factor: float) -> None:
        if factor < 1:
            raise ValueError(f"factor {factor} < 1: a backend cannot be made faster")
        self.inner = inner
        self.factor = factor
        self.name = f"slowed-{inner.name}"
        self.description = f"{inner.name}, every encode/decode costing {factor:g} calls"
        self.safe = is_safe(inner)
        self.unsupported = unsupported_cases(inner)
        self._step = round((factor - 1) * self.UNIT)
        self._credit = {"encode": 0, "decode": 0}

    def _stretched(self, op: str, *args: Any) -> Any:
        fn = getattr(self.inner, op)
        out = fn(*args)
        self._credit[op] += self._step
        while self._credit[op] >= self.UNIT:
            self._credit[op] -= self.UNIT
            fn(*args)
        return out

    def encode(self, obj: Any) -> list:
        return self._stretched("encode", obj)

    def decode(self, frames: Sequence, type_: type) -> Any:
        return self._stretched("decode", frames, type_)


def slowed(base: str = "msgspec-frombuffer", factor: str = "1.10", slot: str = "") -> Slowed:
    """Factory for dotted-path specs: ``serbench.testing:slowed:base=NAME,factor=F``.

    ``slot`` changes nothing but the spec, so that one run can hold several
    otherwise identical cases (the gate-quality script's A sides).
    """
    return Slowed(get_serializer(base), float(factor))
