"""What a scenario is: a named measurement run on one (backend, workload) case.

A scenario's ``run`` executes inside the case's own fresh process (see
``serbench.runtime.isolation``) and returns an ``Outcome``: metrics built with
``metrics.measured`` and its own kind of ``results.Info``; raising fails that
case only. The dimensions it varies beyond backend and workload (the
transport, …) are declared as ``Dimension``s. Its command-line
settings are declared as ``Option``s, data that ``serbench.cli`` turns
into flags: no scenario sees argparse.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from itertools import product
from typing import Any, ClassVar

from serbench.links import transport
from serbench.model.profiles import Profile
from serbench.model.results import Case, Results, ScenarioInfo
from serbench.model.stats import Measurement
from serbench.model.views import Figure, Table


@dataclass
class Outcome:
    """What a scenario's ``run`` returns: the case's metrics by name and its typed info."""

    metrics: dict[str, Measurement]
    info: ScenarioInfo | None = None
    # Measured together with other cases in one process (``Scenario.run_together``): the seconds
    # that were this case's own. None: the whole process was the case's.
    seconds: float | None = None


def positive_int(text: str) -> int:
    """An integer of at least 1; ValueError otherwise."""
    value = int(text)
    if value < 1:
        raise ValueError(f"expected at least 1, got {text}")
    return value


@dataclass(frozen=True)
class Dimension:
    """A case dimension beyond backend and workload: a field of ``results.Case`` that the
    scenarios declaring it vary, and the command line lists values of (``--transport
    ipc,shm``). Adding one is a ``Case`` field, a ``Dimension`` here, and the scenario
    that measures along it.
    """

    field: str  # the ``results.Case`` field it fills
    flag: str
    parse: Callable[[str], Any]  # one value from its text; ValueError says why it is refused
    default: tuple[Any, ...]
    help: str
    choices: tuple[Any, ...] | None = None

    def allowed(self, values: tuple[Any, ...]) -> tuple[Any, ...]:
        """The values this dimension takes, of ``values``."""
        return values if self.choices is None else tuple(v for v in values if v in self.choices)

    def merged(self, other: Dimension) -> Dimension:
        """One flag for a field that several scenarios vary, each with its own values: the union of
        their choices, both helps; the first's default and parse."""
        if self.choices is None or other.choices is None or other == self:
            return self
        choices = tuple(dict.fromkeys((*self.choices, *other.choices)))
        helps = self.help if other.help == self.help else f"{self.help}; {other.help}"
        return replace(self, choices=choices, help=helps)


TRANSPORT = Dimension(
    "transport",
    "--transport",
    str,
    (transport.DEFAULT_KIND,),
    "link the ipc and memory scenarios' processes over ZeroMQ ipc:// (default), loopback tcp://, "
    "or shared memory (payload frames in a shared ring, references over ipc://); a list runs each",
    choices=transport.KINDS,
)


@dataclass(frozen=True)
class Option:
    """A scenario setting given on the command line.

    ``flag`` is the option (``--num-prompts``), ``key`` where its value goes
    in ``Profile.options``, ``parse`` turns the text into the value and
    raises ValueError with the reason when it cannot. ``applies`` = (a ``Case`` field, a value):
    the option means something only for the scenario's cases with that value, and the commands
    refuse it for a run with others (``--fanout-rendezvous``: torch-dist cases only).
    """

    flag: str
    key: str
    parse: Callable[[str], Any]
    help: str
    metavar: str | None = None
    choices: tuple[str, ...] | None = None
    applies: tuple[str, Any] | None = None


# What ``--measure`` chooses for the scenarios that can count instructions under valgrind's callgrind
# (micro: each encode and decode; ipc: each side's path per request); one valgrind process for the run.
MEASURES = ("time", "instructions")
MEASURE = Option(
    "--measure",
    "measure",
    str,
    "micro, ipc and fanout: wall time (default), or instructions under valgrind's callgrind, one "
    "valgrind process for the run: micro per encode / decode, ipc per request on each side's "
    "path, fanout per step on the core's and a worker's (docs/instructions.md)",
    choices=MEASURES,
)


def counting(profile: Profile) -> bool:
    """Whether the run asked for instruction counts (``--measure instructions``)."""
    return profile.options.get("measure") == "instructions"


class Scenario:
    name: ClassVar[str]
    description: ClassVar[str]
    options: ClassVar[tuple[Option, ...]] = ()
    dimensions: ClassVar[tuple[Dimension, ...]] = ()  # what it varies beyond backend and workload
    figures: ClassVar[tuple[Figure, ...]] = ()  # its report section's figures (``serbench.model.views``)
    # Its cases of a run are measured in interleaved rounds (``serbench.runner.matrix``): every backend of
    # a group in turn, each visit ``Profile.share`` of the samples, so between-backend ratios pair.
    interleaved: ClassVar[bool] = False
    # At least this many rounds where the profile has rounds at all: for a scenario whose visits'
    # levels (a process, a slow spell) differ more than the samples within one visit, more visits
    # weigh each level less in its between-backend ratios.
    min_rounds: ClassVar[int] = 1
    # Each round of an interleaved group is one process timing every backend of the group still
    # visited, a sample of each in turn (``run_together``), instead of a process per backend: a
    # slow spell of the machine lasts milliseconds, and only samples taken side by side share it.
    together: ClassVar[bool] = False

    def cases(
        self, backends: list[str], workloads: list[str], chosen: Mapping[str, tuple[Any, ...]] | None = None
    ) -> list[Case]:
        """The cases this scenario measures: every backend by every value of each of its
        dimensions (``chosen``, by field, else the dimension's default), by every workload.
        Of the chosen values it takes those its own dimension allows: ``--transport shm,shm-ring``
        gives the first-hop scenarios shm and the fan-out one shm-ring (none: no case)."""
        chosen = chosen or {}
        values = [d.allowed(chosen.get(d.field, d.default)) for d in self.dimensions]
        fields = [d.field for d in self.dimensions]
        return [
            Case(self.name, b, w, **dict(zip(fields, combo, strict=True)))
            for b, *combo, w in product(backends, *values, workloads)
        ]

    def rounds(self, case: Case, profile: Profile) -> int:
        """How many interleaved visits measure ``case``: the profile's rounds for an interleaved
        scenario, else 1 (one process measures it whole). A scenario narrows it to the cases whose
        samples mean the same whichever visit takes them. At least ``min_rounds`` where the
        profile has more than one."""
        if not self.interleaved or profile.rounds == 1:
            return 1
        return max(profile.rounds, self.min_rounds)

    def revisit(self, case: Case, profile: Profile, visited: int, spent_s: float) -> bool:
        """Whether a case measured in rounds is visited again after ``visited`` visits that took
        ``spent_s`` seconds in all: by default yes, every round ``rounds`` planned."""
        return True

    def tables(self, data: Results) -> list[Table]:
        """Tables only this scenario can compute from its records in ``data`` (shown after the
        summary's in the terminal, in its section of the report); none by default."""
        return []

    def check(self, profile: Profile) -> None:
        """Refuse, before any case runs, settings this machine cannot measure (UsageError)."""

    def unsupported(self, case: Case, profile: Profile) -> str | None:
        """Why this scenario cannot measure ``case`` whatever its backend (the case is recorded
        unsupported, never timed), or None; the backend's own declarations come after."""
        return None

    def run(self, case: Case, profile: Profile) -> Outcome:
        """Measure one case: its metrics (``metrics.measured``) and the scenario's typed info."""
        raise NotImplementedError

    def run_together(self, cases: list[Case], profile: Profile) -> list[Outcome | str]:
        """Measure the cases of one round of a group (``together``) in this one process: per case,
        in order, its outcome (``Outcome.seconds`` its own share of the time) or the error that
        failed it alone."""
        raise NotImplementedError
