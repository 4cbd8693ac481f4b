"""The scenario registry: name → Scenario (docs/architecture.md, "Scenarios")."""

from __future__ import annotations

from serbench.model.results import Case
from serbench.model.specs import SpecError
from serbench.scenarios.base import Dimension, Option, Outcome, Scenario
from serbench.scenarios.fanout import Fanout
from serbench.scenarios.ipc import Ipc
from serbench.scenarios.memory import Memory
from serbench.scenarios.micro import Micro

__all__ = ["SCENARIOS", "Case", "Dimension", "Option", "Outcome", "Scenario", "dimensions", "get_scenario"]

SCENARIOS: dict[str, Scenario] = {s.name: s for s in (Micro(), Ipc(), Memory(), Fanout())}


def get_scenario(name: str) -> Scenario:
    try:
        return SCENARIOS[name]
    except KeyError:
        raise SpecError(f"unknown scenario {name!r}; scenarios: {', '.join(SCENARIOS)}") from None


def dimensions() -> dict[str, Dimension]:
    """Every dimension some scenario varies, by field (the command line's flags); a field several
    scenarios vary takes the values of all of them (``Dimension.merged``)."""
    found: dict[str, Dimension] = {}
    for dimension in (d for s in SCENARIOS.values() for d in s.dimensions):
        known = found.get(dimension.field)
        found[dimension.field] = dimension if known is None else known.merged(dimension)
    return found
