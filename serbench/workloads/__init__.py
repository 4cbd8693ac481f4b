"""Message types and deterministic synthetic workloads (docs/architecture.md, "Interfaces").

``get_workload("images-8:profile=qwen2-vl,dtype=bfloat16")`` returns a
workload; ``available_workloads()`` lists the built-in names.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from importlib.metadata import entry_points

from serbench.model.specs import Spec, SpecError, call_with_options, format_spec, parse_spec
from serbench.workloads.base import Running, Workload, output_token
from serbench.workloads.sizes import SIZES, TensorSize
from serbench.workloads.text import TextSonnet

__all__ = [
    "SWEEPS",
    "Running",
    "Workload",
    "available_workloads",
    "default_workloads",
    "get_workload",
    "output_token",
]


# The counts built in by name. images-N: the default matrix, both ends (payload costs are linear
# between, docs/workloads.md); outputs-B: the output sweep; tensor-N: the size sweep (``SIZES``).
IMAGE_COUNTS = (4, 32)
BATCHES = (1, 64, 256, 1024)

# The factories of images and outputs import their workload's module when one is built, not with
# the registry: naming workloads (the command line) imports no more than it needs.


def _images(count: int) -> Callable[..., Workload]:
    def factory(
        profile: str = "gemma",
        dtype: str = "float32",
        seed: str = "0",
        layout: str = "compact",
        turns: str = "1",
        repeat: str = "0",
    ) -> Workload:
        from serbench.workloads.images import Images  # torch: see above

        return Images(count, profile, dtype, seed, layout, turns, repeat)

    return factory


def _outputs(batch: int) -> Callable[..., Workload]:
    def factory(logprobs: str = "0", layout: str = "nested", seed: str = "0", steps: str = "40") -> Workload:
        from serbench.workloads.outputs import Outputs  # torch: see above

        return Outputs(batch, logprobs, layout, seed, steps)

    return factory


def _tensor(size: int) -> Callable[..., Workload]:
    def factory(seed: str = "0") -> Workload:
        return TensorSize(size, seed)

    return factory


_DEFAULT: dict[str, Callable[..., Workload]] = {
    "text-sonnet": TextSonnet,
    **{f"images-{n}": _images(n) for n in IMAGE_COUNTS},
}
# Built in, listed, run by name, but not in ``serbench run``'s default matrix (docs/workloads.md).
_BY_NAME: dict[str, Callable[..., Workload]] = {
    **{f"outputs-{n}": _outputs(n) for n in BATCHES},
    **{f"tensor-{n}": _tensor(n) for n in SIZES},
}
# Any count of these families works, not only the listed ones: images-1, outputs-512, tensor-1000.
_FAMILIES: dict[str, Callable[[int], Callable[..., Workload]]] = {
    r"images-([1-9][0-9]{0,2})": _images,
    r"outputs-([1-9][0-9]{0,6})": _outputs,
    r"tensor-(0|[1-9][0-9]{0,9})": _tensor,
}
# Shorthands that stand for several workloads on the command line (``expand``).
SWEEPS: dict[str, list[str]] = {
    "tensor-sweep": list(_BY_NAME)[len(BATCHES) :],
    "outputs-sweep": list(_BY_NAME)[: len(BATCHES)],
}


def default_workloads() -> list[str]:
    """The workloads of ``serbench run``'s default matrix, in order."""
    return list(_DEFAULT)


def available_workloads() -> list[str]:
    """Every built-in workload name: the default matrix, then those run by name."""
    return [*_DEFAULT, *_BY_NAME]


def expand(spec: str) -> list[str]:
    """A sweep shorthand (``tensor-sweep``, ``outputs-sweep[:options]``) as its workloads; else ``[spec]``.

    The options of a shorthand go to each workload of it:
    ``outputs-sweep:logprobs=5`` is ``outputs-1:logprobs=5,...,outputs-1024:logprobs=5``.
    """
    name, sep, options = spec.partition(":")
    if name not in SWEEPS:
        return [spec]
    return [f"{member}{sep}{options}" for member in SWEEPS[name]]


def _factory(name: str) -> Callable[..., Workload] | None:
    factory = _DEFAULT.get(name) or _BY_NAME.get(name)
    for pattern, family in _FAMILIES.items():
        match = re.fullmatch(pattern, name)
        if factory is None and match:
            factory = family(int(match.group(1)))
    return factory


def get_workload(spec: str | Spec) -> Workload:
    """Build a workload from ``name[:key=value,...]``; SpecError lists what exists."""
    parsed = parse_spec(spec) if isinstance(spec, str) else spec
    factory = _factory(parsed.name)
    if factory is None:
        raise SpecError(
            f"unknown workload {parsed.name!r}; workloads: {', '.join(available_workloads())} "
            f"(any images-N, outputs-B, tensor-N; sweeps: {', '.join(SWEEPS)})"
        )
    plugin = _layout_plugin(parsed.options.get("layout"))
    if plugin is not None:
        workload = plugin(parsed, lambda spec: call_with_options(factory, spec))
    else:
        workload = call_with_options(factory, parsed)
    workload.name = format_spec(parsed)
    return workload


# A layout an installed plugin adds (``layout=NAME``, entry-point group ``serbench.layouts``):
# ``factory(spec, build)`` gets the whole workload spec and ``build``, which makes serbench's
# own workload of a spec (e.g. the same one with a built-in layout), and returns the workload.
LAYOUT_GROUP = "serbench.layouts"


def _layout_plugin(layout: str | None) -> Callable[..., Workload] | None:
    if layout is None:
        return None
    plugin = next((ep for ep in entry_points(group=LAYOUT_GROUP) if ep.name == layout), None)
    return None if plugin is None else plugin.load()
