"""The scenario registry: name → Scenario (docs/architecture.md, "Scenarios")."""

from __future__ import annotations

from serbench.scenarios.base import Case, Option, Scenario
from serbench.scenarios.ipc import Ipc
from serbench.scenarios.memory import Memory
from serbench.scenarios.micro import Micro
from serbench.specs import SpecError

__all__ = ["SCENARIOS", "Case", "Option", "Scenario", "get_scenario"]

SCENARIOS: dict[str, Scenario] = {s.name: s for s in (Micro(), Ipc(), Memory())}


def get_scenario(name: str) -> Scenario:
    try:
        return SCENARIOS[name]
    except KeyError:
        raise SpecError(f"unknown scenario {name!r}; scenarios: {', '.join(SCENARIOS)}") from None
