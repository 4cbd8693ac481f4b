"""torch, imported on first use, so that the command line's parsers, ``compare`` and ``report``
answer without paying its import (2 s) — the modules that measure name it at their top as usual.

``torch = lazy.torch(__name__)`` gives a module a stand-in that, on its first attribute access,
imports torch and puts the real module in that module's globals in its own place: every later
use is a plain global lookup, nothing added on a timed path. The stand-in stays out of
``sys.modules``. That is why not ``lazy_loader.load``, which registers its proxy there: a library
that looks for torch in ``sys.modules`` (matplotlib does, for every array it plots) would import
it by looking. Only attribute access loads it: ``vars()`` or ``dir()`` of the stand-in are its
own, not torch's.
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType
from typing import Any


class _Deferred:
    """Stands in for torch in the module ``owner`` until its first attribute access."""

    def __init__(self, owner: str) -> None:
        self._owner = owner

    def __getattr__(self, name: str) -> Any:
        real = importlib.import_module("torch")
        sys.modules[self._owner].torch = real
        return getattr(real, name)


def imported() -> ModuleType | None:
    """torch where this process has imported it, else None: a question answered without the
    import (no object is a tensor, and no torch setting matters, before it)."""
    return sys.modules.get("torch")


def torch(owner: str) -> ModuleType:
    """A stand-in for torch in the module named ``owner`` (its ``__name__``), bound to the name
    ``torch`` there."""
    return _Deferred(owner)  # type: ignore[return-value]  # a module from its first use on
