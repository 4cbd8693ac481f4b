"""Pluggable serializers for the frontend↔engine path, and their registry.

``get_serializer("msgspec-frombuffer:threshold=inf")`` builds a backend from
a spec (docs/architecture.md, "Interfaces"). Besides the built-ins, a spec may name a backend
registered under the entry-point group ``serbench.serializers`` or a factory
by dotted path, ``package.module:factory`` (installed, or in the current
folder); options after the name become keyword arguments of the factory.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any

from serbench.model.specs import Spec, SpecError, call_with_options, format_spec, parse_spec
from serbench.runtime import lazy
from serbench.serializers.base import (
    DecodeError,
    Serializer,
    attached,
    declared_safety,
    describe,
    discard_frames,
    frames_consumed,
    has_channel,
    is_safe,
    quiet_readonly_views,
    safety_text,
    scenario_unsupported,
    shared_channel,
    unsupported_cases,
)

__all__ = [
    "BUILTINS",
    "DecodeError",
    "Serializer",
    "attached",
    "available_serializers",
    "declared",
    "declared_safety",
    "describe",
    "discard_frames",
    "frames_consumed",
    "get_serializer",
    "has_channel",
    "is_safe",
    "safety_text",
    "scenario_unsupported",
    "shared_channel",
    "unsupported_cases",
]

ENTRY_POINT_GROUP = "serbench.serializers"

# The built-in backends by name: the module and class that build each. A module is imported when
# a backend of it is built, not with the registry: most need torch, which naming backends (the
# command line, compare, the report) must not pay.
BUILTINS: dict[str, str] = {
    "pickle": "serbench.serializers.pickle_backend:PickleSerializer",
    "pickle-oob": "serbench.serializers.pickle_oob:PickleOOBSerializer",
    "cloudpickle": "serbench.serializers.cloudpickle_backend:CloudPickleSerializer",
    "numpy-intermediate": "serbench.serializers.numpy_intermediate:NumpyIntermediateSerializer",
    "msgspec-frombuffer": "serbench.serializers.msgspec_frombuffer:MsgspecFrombufferSerializer",
    "flat-mmk": "serbench.serializers.flat_mmk:FlatMMKSerializer",
}


def _plugins() -> dict[str, Any]:
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def available_serializers() -> list[str]:
    """Built-in backend names, then those registered through entry points."""
    return list(BUILTINS) + sorted(set(_plugins()) - set(BUILTINS))


def _factory(spec: Spec) -> Callable[..., Serializer]:
    if spec.name in BUILTINS:
        module_name, _, attr = BUILTINS[spec.name].partition(":")
        return getattr(importlib.import_module(module_name), attr)
    plugin = _plugins().get(spec.name)
    if plugin is not None:
        return plugin.load()
    if spec.is_dotted_path:
        module_name, _, attr = spec.name.partition(":")
        try:
            return getattr(_import(module_name), attr)
        except (ImportError, AttributeError) as exc:
            raise SpecError(f"cannot load backend {spec.name!r}: {exc}") from exc
    raise SpecError(
        f"unknown backend {spec.name!r}; backends: {', '.join(available_serializers())}"
        " (or package.module:factory)"
    )


def _import(module_name: str) -> Any:
    """The module a dotted spec names: an installed one, else one in the current folder, as
    ``python -m`` would find it but after the installed packages (a local folder named like
    one of them does not shadow it). The folder joins ``sys.path`` only then: every import
    that misses reads the listing of each folder there, and a listing that other programs
    change moves where the objects of a counting process land (docs/instructions.md)."""
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError:
        here = os.getcwd()
        if here in sys.path:
            raise
        sys.path.append(here)
        return importlib.import_module(module_name)


def declared(name: str) -> Serializer | type:
    """What a backend declares (``safe``, ``description``) without building it where its factory
    is a class, whose attributes they are: building the vLLM backend imports vLLM, which is slow,
    and ``serbench list`` answers without it. A factory function's backend is built."""
    factory = _factory(parse_spec(name))
    return factory if isinstance(factory, type) else get_serializer(name)


def get_serializer(spec: str | Spec) -> Serializer:
    """Build the backend a spec names, with its options; SpecError says what exists."""
    parsed = parse_spec(spec) if isinstance(spec, str) else spec
    serializer = call_with_options(_factory(parsed), parsed)
    for attr in ("name", "encode", "decode"):
        if not hasattr(serializer, attr):
            raise SpecError(f"{format_spec(parsed)!r} built an object without {attr!r}")
    if lazy.imported():  # its decoder's tensors may view read-only frames; without torch
        quiet_readonly_views()  # imported yet, the first tensor a backend makes does this (tensors.py)
    return serializer
