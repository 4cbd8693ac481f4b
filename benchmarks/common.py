"""What the asv suites share: the parameter grid and scenario runs through serbench's registries.

asv runs the suites of the working tree against every commit it benchmarks,
so a suite must cope with a commit that predates the scenario (or the
function) it wraps: that benchmark is skipped there (``NotImplementedError``
in ``setup``), not failed.

The grid is every built-in backend by every built-in workload;
``SERBENCH_ASV_BACKENDS`` / ``SERBENCH_ASV_WORKLOADS`` (specs separated by
spaces, e.g. ``"pickle msgspec-frombuffer:threshold=inf"``) narrow or change
it — the asv test uses them to stay quick. ``SERBENCH_ASV_TRANSPORTS``
(e.g. ``"ipc shm"``) adds the ipc and memory scenarios' transports: a case
over another transport than ipc is the backend parameter ``spec@transport``,
as in a results file; the default (ipc alone) keeps the parameters of
commits from before transports were a dimension.
"""

from __future__ import annotations

import math
import os
from typing import Any

from serbench.isolation import CaseFailed, run_isolated
from serbench.profiles import PROFILES
from serbench.runner import run_case
from serbench.scenarios import SCENARIOS, Case

try:  # one installed namespace
    from serbench import serializers, workloads
except ImportError:  # a commit from before it: top-level packages
    import serializers  # type: ignore[no-redef]
    import workloads  # type: ignore[no-redef]

BUILTINS = serializers.BUILTINS
get_serializer = serializers.get_serializer
get_workload = workloads.get_workload
# a commit from before the workloads run by name: all of them were the default
default_workloads = getattr(workloads, "default_workloads", workloads.available_workloads)

PARAM_NAMES = ["backend", "workload"]


def grid(variable: str, default: list[str]) -> list[str]:
    return os.environ.get(variable, "").split() or default


BACKENDS = grid("SERBENCH_ASV_BACKENDS", list(BUILTINS))
WORKLOADS = grid("SERBENCH_ASV_WORKLOADS", default_workloads())
TRANSPORTS = grid("SERBENCH_ASV_TRANSPORTS", ["ipc"])
LABELS = [b if t == "ipc" else f"{b}@{t}" for b in BACKENDS for t in TRANSPORTS]


class Unsupported(str):
    """A cell the backend declares unsupported: the reason; the benchmark is skipped there."""


def measure(scenario: str) -> dict[tuple[str, str], Any]:
    """``measure_grid`` over the default grid's workloads."""
    return measure_grid(scenario, WORKLOADS)


def measure_grid(scenario: str, workloads: list[str]) -> dict[tuple[str, str], Any]:
    """For ``setup_cache``: every case of ``scenario`` on the grid, as ``serbench run`` measures it.

    Each case runs in its own fresh process under the quick profile with the
    scenario's default options; the answer maps (backend, workload) to the
    case's metrics, or to the reason it failed. Empty when this commit has no
    such scenario; a cell the scenario does not measure is absent, and so
    are the extra variants its ``cases`` may add (memory's zero-copy-off
    rows): the parameters must stay the same from commit to commit, so a
    variant is measured by naming it in ``SERBENCH_ASV_BACKENDS``.
    """
    if scenario not in SCENARIOS:
        return {}
    # The quick profile with no scenario option given: every scenario's defaults,
    # in this commit and in older ones alike.
    profile = PROFILES["quick"]
    outcomes: dict[tuple[str, str], Any] = {}
    over = (tuple(TRANSPORTS),) if TRANSPORTS != ["ipc"] else ()
    try:
        cases = SCENARIOS[scenario].cases(BACKENDS, workloads, *over)
    except TypeError:  # a commit from before transports: its cases are the ipc ones only
        cases = SCENARIOS[scenario].cases(BACKENDS, workloads)
    for case in cases:
        if case.backend not in LABELS:
            continue
        try:
            outcome = run_isolated(run_case, (case, profile), profile.case_timeout_s)
        except CaseFailed as exc:
            outcome = {"metrics": str(exc)}
        if "unsupported" in outcome:  # declared by the backend: skipped, never timed
            outcome = {"metrics": Unsupported(outcome["unsupported"])}
        outcomes[case.backend, case.workload] = outcome["metrics"]
    return outcomes


class ScenarioTracks:
    """Base of the suites whose ``track_`` methods read one scenario's medians from ``setup_cache``.

    Each subclass defines its own ``setup_cache`` (asv keys the cache by the
    function's source line, so an inherited one would be shared between
    suites) returning ``measure(scenario)``.
    """

    scenario: str
    params = [LABELS, WORKLOADS]
    param_names = PARAM_NAMES

    def setup(self, cache: dict, backend: str, workload: str) -> None:
        if not cache:
            raise NotImplementedError(f"no {self.scenario} scenario in this commit")
        if (backend, workload) not in cache:
            raise NotImplementedError(f"no case {Case(self.scenario, backend, workload).label}")
        if isinstance(cache[backend, workload], Unsupported):
            raise NotImplementedError(f"unsupported by the backend: {cache[backend, workload]}")

    def median(self, cache: dict, backend: str, workload: str, metric: str) -> float:
        """The case's median of ``metric``; a failed case fails the benchmark with its reason.

        A metric the case does not have (``copies`` of a text request, which
        has no payload) is NaN, which asv shows as n/a.
        """
        outcome = cache[backend, workload]
        if isinstance(outcome, str):
            raise RuntimeError(f"{Case(self.scenario, backend, workload).label} failed: {outcome}")
        return outcome[metric]["median"] if metric in outcome else math.nan
