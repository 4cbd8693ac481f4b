"""Spec strings: ``name`` or ``name:key=value,key=value``.

Backends, workloads and scenario variants are all chosen by such strings
(docs/architecture.md, "Specs"); ``package.module:factory`` (the part after
the colon has no ``=``) names a third-party factory, and may carry options
after a second colon. The grammar is the bottom layer: ``workloads`` and
``serializers`` both parse specs, and neither should own what the other uses.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

T = TypeVar("T")


class SpecError(ValueError):
    """A spec string that names nothing known or carries a bad option."""


@dataclass(frozen=True)
class Spec:
    """A parsed spec: the name (or dotted path) and its string options."""

    name: str
    options: dict[str, str] = field(default_factory=dict)

    @property
    def is_dotted_path(self) -> bool:
        """True for ``module.path:factory`` rather than a registered name."""
        return ":" in self.name


def parse_spec(text: str) -> Spec:
    """Split ``name[:k=v,...]`` (or ``pkg.mod:factory[:k=v,...]``) into a Spec."""
    text = text.strip()
    if not text:
        raise SpecError("empty spec")
    head, sep, rest = text.partition(":")
    name = head
    first = rest.split(":", 1)[0]
    if sep and "=" not in first:  # module.path:factory, not name:key=value
        factory, sep, rest = rest.partition(":")
        if not factory.isidentifier():
            raise SpecError(f"{text!r}: expected name:key=value or module.path:factory")
        name = f"{head}:{factory}"
    options: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in rest.split(","))) if sep else ():
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise SpecError(f"{text!r}: option {item!r} is not key=value")
        options[key.strip()] = value.strip()
    return Spec(name, options)


def format_spec(spec: Spec) -> str:
    """The canonical string form of a spec (options sorted)."""
    if not spec.options:
        return spec.name
    opts = ",".join(f"{k}={v}" for k, v in sorted(spec.options.items()))
    return f"{spec.name}:{opts}"


def call_with_options(factory: Callable[..., T], spec: Spec) -> T:
    """Call ``factory(**spec.options)``; a bad option becomes a SpecError that
    lists the options the factory accepts."""
    params = inspect.signature(factory).parameters
    takes_any = any(p.kind is p.VAR_KEYWORD for p in params.values())
    unknown = sorted(set(spec.options) - set(params))
    if unknown and not takes_any:
        accepted = ", ".join(p for p in params if not p.startswith("_")) or "none"
        raise SpecError(f"{spec.name!r} has no option {', '.join(map(repr, unknown))}; options: {accepted}")
    try:
        return factory(**spec.options)
    except (TypeError, ValueError) as exc:
        raise SpecError(f"{format_spec(spec)!r}: {exc}") from exc
