"""What a scenario is: a named measurement run on one (backend, workload) case.

A scenario's ``run`` executes inside the case's own fresh process (see
``serbench.isolation``) and returns metrics built with ``metrics.measured``
plus free-form ``info``; raising fails that case only. Its command-line
settings are declared as ``Option``s, data that ``serbench.commands`` turns
into flags: no scenario sees argparse.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from itertools import product
from typing import Any, ClassVar

from serbench.profiles import Profile
from serbench.results import split_backend, with_transport
from serbench.transport import DEFAULT_KIND


def positive_int(text: str) -> int:
    """An integer of at least 1; ValueError otherwise."""
    value = int(text)
    if value < 1:
        raise ValueError(f"expected at least 1, got {text}")
    return value


@dataclass(frozen=True)
class Case:
    """One measured case: a scenario run on one backend and one workload.

    ``backend`` is the backend spec, followed by ``@transport`` when the case
    runs over a transport other than the default (``results.with_transport``).
    """

    scenario: str
    backend: str
    workload: str

    @property
    def label(self) -> str:
        return f"{self.scenario} {self.backend} × {self.workload}"

    @property
    def spec(self) -> str:
        """The backend spec alone, without the transport."""
        return split_backend(self.backend)[0]

    @property
    def transport(self) -> str:
        return split_backend(self.backend)[1] or DEFAULT_KIND


@dataclass(frozen=True)
class Option:
    """A scenario setting given on the command line.

    ``flag`` is the option (``--num-prompts``), ``key`` where its value goes
    in ``Profile.options``, ``parse`` turns the text into the value and
    raises ValueError with the reason when it cannot.
    """

    flag: str
    key: str
    parse: Callable[[str], Any]
    help: str
    metavar: str | None = None
    choices: tuple[str, ...] | None = None


class Scenario:
    name: ClassVar[str]
    description: ClassVar[str]
    options: ClassVar[tuple[Option, ...]] = ()
    transports: ClassVar[tuple[str, ...]] = ()  # the links it can run over; () = none (in-process)

    def cases(
        self, backends: list[str], workloads: list[str], transports: tuple[str, ...] = (DEFAULT_KIND,)
    ) -> list[Case]:
        """The cases this scenario measures for the chosen backends, workloads and transports."""
        return [Case(self.name, b, w) for b, w in product(self.over(backends, transports), workloads)]

    def over(self, backends: list[str], transports: tuple[str, ...]) -> list[str]:
        """Each backend once per transport this scenario runs over (the default one unmarked)."""
        if not self.transports:
            return list(backends)
        chosen = [t for t in transports if t in self.transports]
        return [with_transport(b, None if t == DEFAULT_KIND else t) for b in backends for t in chosen]

    def check(self, profile: Profile) -> None:
        """Refuse, before any case runs, settings this machine cannot measure (UsageError)."""

    def run(self, case: Case, profile: Profile) -> dict[str, Any]:
        """Measure one case; return ``{"metrics": {...}, "info": {...}}``."""
        raise NotImplementedError
