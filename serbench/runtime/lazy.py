"""torch, imported on first use, so that the command line's parsers, ``compare`` and ``report``
answer without paying its import — the modules that measure name it at their top as usual.

``torch = lazy.torch(__name__)`` gives a module a stand-in that, on its first attribute access,
imports torch and puts the real module in that module's globals in its own place: every later
use is a plain global lookup, nothing added on a timed path. The stand-in stays out of
``sys.modules``. That is why not ``lazy_loader.load``, which registers its proxy there: a library
that looks for torch in ``sys.modules`` (matplotlib does, for every array it plots) would import
it by looking. Only attribute access loads it: ``vars()`` or ``dir()`` of the stand-in are its
own, not torch's.

torch, and vLLM (``serbench.plugins.vllm.adapter``), are imported out of the cyclic collector's way
(``lasting``).
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import sys
from collections.abc import Iterator
from types import ModuleType
from typing import Any


class _Deferred:
    """Stands in for torch in the module ``owner`` until its first attribute access."""

    def __init__(self, owner: str) -> None:
        self._owner = owner

    def __getattr__(self, name: str) -> Any:
        real = imported()
        if real is None:
            with lasting():
                real = importlib.import_module("torch")
        sys.modules[self._owner].torch = real
        return getattr(real, name)


@contextlib.contextmanager
def lasting() -> Iterator[None]:
    """Run what makes objects that last as long as the process (a large library's import) with
    the cyclic collector paused, then move everything the process holds out of its reach
    (``gc.freeze``), as a serving process does once started (vLLM's engine and API server do).

    Such an import makes hundreds of thousands of objects and next to no garbage, and the
    collector's full passes walk them all for nothing, as they accumulate and every pass after
    (docs/measurements/2026-12-07-collector.md). Whether the collector is on afterwards is as
    it was before."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
        gc.freeze()
    finally:
        if enabled:
            gc.enable()


def imported() -> ModuleType | None:
    """torch where this process has imported it, else None: a question answered without the
    import (no object is a tensor, and no torch setting matters, before it)."""
    return sys.modules.get("torch")


def torch(owner: str) -> ModuleType:
    """A stand-in for torch in the module named ``owner`` (its ``__name__``), bound to the name
    ``torch`` there."""
    return _Deferred(owner)  # type: ignore[return-value]  # a module from its first use on
