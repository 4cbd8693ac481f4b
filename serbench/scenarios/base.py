"""What a scenario is: a named measurement run on one (backend, workload) case.

A scenario's ``run`` executes inside the case's own fresh process (see
``serbench.isolation``) and returns metrics summarised with
``stats.summarize`` plus free-form ``info``; raising fails that case only.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from itertools import product
from typing import Any, ClassVar

from serbench.profiles import Profile


def positive_int(text: str) -> int:
    """argparse type for scenario options: an integer of at least 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected at least 1, got {text}")
    return value


@dataclass(frozen=True)
class Case:
    scenario: str
    backend: str
    workload: str

    @property
    def label(self) -> str:
        return f"{self.scenario} {self.backend} × {self.workload}"


@dataclass(frozen=True)
class Column:
    """One metric as the terminal summary shows it: label, scale and format."""

    metric: str
    label: str
    scale: float = 1.0
    fmt: str = "{:.3g}"


class Scenario:
    name: ClassVar[str]
    description: ClassVar[str]
    summary: ClassVar[list[Column]] = []

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """Options of this scenario for ``serbench run`` (none by default)."""

    def options(self, args: argparse.Namespace) -> dict[str, Any]:
        """This scenario's settings from parsed arguments, for ``Profile.options``."""
        return {}

    def cases(self, backends: list[str], workloads: list[str]) -> list[Case]:
        """The cases this scenario measures for the chosen backends and workloads."""
        return [Case(self.name, b, w) for b, w in product(backends, workloads)]

    def run(self, case: Case, profile: Profile) -> dict[str, Any]:
        """Measure one case; return ``{"metrics": {...}, "info": {...}}``."""
        raise NotImplementedError
