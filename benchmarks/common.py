"""What the asv suites share: the parameter grid and scenario runs through serbench's registries.

asv runs the suites of the working tree against every commit it benchmarks,
so a suite must cope with a commit that predates the scenario (or the
function) it wraps: that benchmark is skipped there (``NotImplementedError``
in ``setup``), not failed. It must also cope with both shapes serbench's
cases and outcomes have had: today's typed ``Case`` (the transport a field of
its own) and ``runner.Outcome`` / ``runner.Unsupported``, and before the
typed model a ``Case`` whose backend carries ``@transport`` and dict outcomes
(``{"metrics": {...}}`` or ``{"unsupported": reason}``). Both become the same
cache: (label, workload) → each metric's median, or why the case failed.

The grid is every built-in backend by every built-in workload;
``SERBENCH_ASV_BACKENDS`` / ``SERBENCH_ASV_WORKLOADS`` (specs separated by
spaces, e.g. ``"pickle msgspec-frombuffer:threshold=inf"``) narrow or change
it — the asv test uses them to stay quick. ``SERBENCH_ASV_TRANSPORTS``
(e.g. ``"ipc shm"``) adds the ipc and memory scenarios' transports: a case
over another transport than ipc is the backend parameter ``spec@transport``
(its label, as tables show it), with either shape of ``Case``; the default
(ipc alone) keeps the parameters of commits from before transports were a
dimension.
"""

from __future__ import annotations

import math
import os
from typing import Any

# Imported here, once: asv's forkserver (asv.conf.json) imports the suites and forks each
# benchmark from that process. serbench imports torch on first use, so each benchmark's fork
# imported it again: 2 of the 2.1 s an images-4 request took to make.
import torch  # noqa: F401

from serbench.scenarios import SCENARIOS

try:  # serbench's folders by concern
    from serbench.model.profiles import PROFILES
    from serbench.runner.matrix import run_case
    from serbench.runtime.isolation import CaseFailed, run_isolated
except ImportError:  # a commit from before them: the same modules at the top level
    from serbench.isolation import CaseFailed, run_isolated  # type: ignore[no-redef]
    from serbench.profiles import PROFILES  # type: ignore[no-redef]

    from serbench.runner import run_case  # type: ignore[no-redef]

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


def _cases(scenario: str, workloads: list[str]) -> list:
    """The scenario's cases on the grid, in this commit's way of asking for them."""
    chosen = SCENARIOS[scenario]
    if TRANSPORTS == ["ipc"]:
        return chosen.cases(BACKENDS, workloads)
    if hasattr(chosen, "dimensions"):  # typed cases: each dimension's values by Case field
        return chosen.cases(BACKENDS, workloads, {"transport": tuple(TRANSPORTS)})
    try:  # before the typed model: the transports as a tuple
        return chosen.cases(BACKENDS, workloads, tuple(TRANSPORTS))
    except TypeError:  # a commit from before transports: its cases are the ipc ones only
        return chosen.cases(BACKENDS, workloads)


def label(case: Any) -> str:
    """The backend parameter of a case: its spec, ``spec@transport`` off the default
    transport (a typed case's ``row``; before, the backend carried it already)."""
    return getattr(case, "row", case.backend)


def medians(outcome: Any) -> dict[str, float] | str:
    """A case's outcome as each metric's median, or the reason it is not measured
    (``Unsupported``); either shape of outcome."""
    if isinstance(outcome, dict):  # before the typed model
        if "unsupported" in outcome:
            return Unsupported(outcome["unsupported"])
        return {name: m["median"] for name, m in outcome["metrics"].items()}
    if hasattr(outcome, "reason"):  # runner.Unsupported
        return Unsupported(outcome.reason)
    return {name: m.median for name, m in outcome.metrics.items()}


def measure_grid(scenario: str, workloads: list[str]) -> dict[tuple[str, str], Any]:
    """For ``setup_cache``: every case of ``scenario`` on the grid, as ``serbench run`` measures it.

    Each case runs in its own fresh process under the quick profile with the
    scenario's default options; the answer maps (backend label, workload) to
    each metric's median, or to the reason the case failed or is unsupported.
    Empty when this commit has no such scenario; a cell the scenario does not
    measure is absent, and so are the extra variants its ``cases`` may add
    (memory's zero-copy-off rows): the parameters must stay the same from
    commit to commit, so a variant is measured by naming it in
    ``SERBENCH_ASV_BACKENDS``.
    """
    if scenario not in SCENARIOS:
        return {}
    # The quick profile with no scenario option given: every scenario's defaults,
    # in this commit and in older ones alike.
    profile = PROFILES["quick"]
    outcomes: dict[tuple[str, str], Any] = {}
    for case in _cases(scenario, workloads):
        if label(case) not in LABELS:
            continue
        try:
            outcome = medians(run_isolated(run_case, (case, profile), profile.case_timeout_s))
        except CaseFailed as exc:
            outcome = str(exc)
        outcomes[label(case), case.workload] = outcome
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
            raise NotImplementedError(f"no case {self._label(backend, workload)}")
        if isinstance(cache[backend, workload], Unsupported):
            raise NotImplementedError(f"unsupported by the backend: {cache[backend, workload]}")

    def _label(self, backend: str, workload: str) -> str:
        return f"{self.scenario} {backend} × {workload}"

    def median(self, cache: dict, backend: str, workload: str, metric: str) -> float:
        """The case's median of ``metric``; a failed case fails the benchmark with its reason.

        A metric the case does not have (``copies`` of a text request, which
        has no payload) is NaN, which asv shows as n/a.
        """
        outcome = cache[backend, workload]
        if isinstance(outcome, str):
            raise RuntimeError(f"{self._label(backend, workload)} failed: {outcome}")
        return outcome.get(metric, math.nan)
