"""Message types and deterministic synthetic workloads (docs/architecture.md, "Interfaces").

``get_workload("images-8:profile=qwen2-vl,dtype=bfloat16")`` returns a
workload; ``available_workloads()`` lists the built-in names.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from specs import Spec, SpecError, call_with_options, format_spec, parse_spec
from workloads.base import Workload, output_token
from workloads.images import IMAGE_COUNTS, Images
from workloads.text import TextSonnet

__all__ = [
    "Workload",
    "available_workloads",
    "get_workload",
    "output_token",
]


def _images(count: int) -> Callable[..., Workload]:
    def factory(
        profile: str = "gemma", dtype: str = "float32", seed: str = "0", layout: str = "compact"
    ) -> Workload:
        return Images(count, profile, dtype, seed, layout)

    return factory


_FACTORIES: dict[str, Callable[..., Workload]] = {
    "text-sonnet": TextSonnet,
    **{f"images-{n}": _images(n) for n in IMAGE_COUNTS},
}


def available_workloads() -> list[str]:
    """Names of the built-in workloads, in the order of the default matrix."""
    return list(_FACTORIES)


def get_workload(spec: str | Spec) -> Workload:
    """Build a workload from ``name[:key=value,...]``; SpecError lists what exists."""
    parsed = parse_spec(spec) if isinstance(spec, str) else spec
    factory = _FACTORIES.get(parsed.name)
    count = re.fullmatch(r"images-([1-9][0-9]{0,2})", parsed.name)
    if factory is None and count:  # any image count, e.g. images-1 for one tensor
        factory = _images(int(count.group(1)))
    if factory is None:
        raise SpecError(f"unknown workload {parsed.name!r}; workloads: {', '.join(_FACTORIES)}")
    workload = call_with_options(factory, parsed)
    workload.name = format_spec(parsed)
    return workload
