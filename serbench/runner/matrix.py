"""The runner: backends × workloads × scenarios, each case in its own process.

Before timing a backend, the runner round-trips the conformance cases through
it in a child of its own (``check_backends``): a backend that fails is not
timed, its cases recorded as failed with the first mismatches. A case whose
workload the backend declares unsupported is recorded so, never timed; every
other case verifies its own messages before timing them, unless an earlier case
of the run verified the same ones (the runner hands those keys on). Every case
is forked from one zygote taken before anything else of the run
(``isolation.Zygote``), so none inherits what the runner did before it, and
lands in the results file, saved after each one. In what order the cases are
visited, and how a case's visits merge, is ``serbench.runner.visits``'s; a child
measuring a group's round together that crashes or times out has each backend
measured again alone, so the error lands on the culprit. ``execute`` runs a plan; ``work`` is the same
loop on request, for a measurer (``serbench.runner.measurer``).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import msgspec

from serbench.model.errors import CaseFailed, Terminated
from serbench.model.profiles import Profile
from serbench.model.results import (
    Accelerator,
    Backend,
    Case,
    Conformance,
    Record,
    ResultsFile,
    record,
)
from serbench.probes import environment, instructions
from serbench.runner import protocol
from serbench.runner.visits import Stopping, StopRule, Visit, batches, merged, revisited, visit_order
from serbench.runtime.isolation import Zygote, error_text, run_isolated_each
from serbench.scenarios import Outcome, get_scenario
from serbench.serializers import (
    conformance,
    declared_safety,
    describe,
    get_serializer,
    scenario_unsupported,
    tensors,
)
from serbench.workloads import get_workload

CONFORMANCE_TIMEOUT_S = 120


@dataclass(frozen=True)
class Plan:
    """What a run measures: backends × workloads × scenarios, and the values of each case
    dimension (``scenarios.Dimension``, by field) the scenarios that declare it vary."""

    backends: list[str]
    workloads: list[str]
    scenarios: list[str]
    dimensions: dict[str, tuple[Any, ...]] = field(default_factory=dict)

    def cases(self) -> list[Case]:
        return [
            case
            for name in self.scenarios
            for case in get_scenario(name).cases(self.backends, self.workloads, self.dimensions)
        ]


def check_backend(spec: str) -> Backend:
    """Runs in a child: the backend's declared traits and its conformance results."""
    serializer = get_serializer(spec)
    results = list(conformance.check(serializer))
    return Backend(
        name=serializer.name,
        description=describe(serializer),
        safe=declared_safety(serializer),  # None: undeclared
        conformance=Conformance(
            passed=sum(r.status == "pass" for r in results),
            unsupported={r.id: r.detail for r in results if r.status == "unsupported"},
            failed={r.id: r.detail for r in results if r.status == "fail"},
        ),
    )


@dataclass(frozen=True)
class Unsupported:
    """A case never timed: its backend declares the workload unsupported, for ``reason``."""

    reason: str


def _unsupported(case: Case, profile: Profile) -> Unsupported | None:
    """Why ``case`` is never timed: its backend declares the scenario unsupported (its own
    reason comes first), its scenario cannot measure it, or its backend declares its workload
    unsupported; None when it can be."""
    serializer = get_serializer(case.backend)
    reason = (
        scenario_unsupported(serializer, case.scenario)
        or get_scenario(case.scenario).unsupported(case, profile)
        or conformance.case_unsupported(serializer, case.workload)
    )
    return None if reason is None else Unsupported(reason)


def run_case(case: Case, profile: Profile, verified: frozenset = frozenset()) -> Outcome | Unsupported:
    """Runs in a child: one scenario measurement, or ``Unsupported`` (nothing timed) when the
    scenario cannot measure the case or the backend declares its workload unsupported.
    ``verified``: the keys of the messages that earlier cases of the run round-tripped
    (``conformance.remember``)."""
    conformance.remember(verified)
    return _unsupported(case, profile) or get_scenario(case.scenario).run(case, profile)


def run_together(
    cases: list[Case], profile: Profile, verified: frozenset = frozenset()
) -> list[Outcome | Unsupported | str]:
    """Runs in a child: ``run_case`` for the cases of one round of a group, measured together
    (``Scenario.run_together``); per case, in order, its outcome, ``Unsupported``, or the error
    that failed it alone."""
    conformance.remember(verified)
    unsupported = {}
    for case in cases:
        try:
            unsupported[case] = _unsupported(case, profile)
        except Exception as exc:  # a backend that cannot even say: its case fails, not the round
            unsupported[case] = error_text(exc)
    measured = [case for case in cases if unsupported[case] is None]
    together = get_scenario(cases[0].scenario).run_together(measured, profile) if measured else []
    outcomes = dict(zip(measured, together, strict=True))
    return [unsupported[case] or outcomes[case] for case in cases]


def check_backends(specs: list[str]) -> dict[str, Backend]:
    """Each backend's safety and conformance suite, checked in a child of its own, as many side
    by side as this process has CPUs: spec → the backend as checked (the suite's failures are
    why a backend is not timed)."""
    _preload_torch()
    at_once = len(os.sched_getaffinity(0))  # side by side: a check measures nothing
    outcomes = run_isolated_each(check_backend, [(spec,) for spec in specs], CONFORMANCE_TIMEOUT_S, at_once)
    return {
        spec: _check_failed(outcome) if isinstance(outcome, CaseFailed) else outcome
        for spec, outcome in zip(specs, outcomes, strict=True)
    }


def _check_failed(error: CaseFailed) -> Backend:
    """A backend whose check ended without a verdict (it crashed, or hung): not timed."""
    return Backend(safe=False, conformance=Conformance(error=str(error), failed={"*": str(error)}))


def _conformance_error(backend: Backend) -> str | None:
    failed = backend.conformance.failed
    if not failed:
        return None
    first = "; ".join(f"{k}: {v}" for k, v in list(failed.items())[:3])
    return f"failed conformance ({len(failed)} case(s)): {first}"


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """While running, SIGTERM ends the run as Ctrl-C does: partial file kept, children killed.

    It raises ``errors.Terminated``, a KeyboardInterrupt, so that the command can
    exit 143 rather than Ctrl-C's 130. Forked children inherit the handler; in
    them SIGTERM keeps its default meaning.
    """
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers belong to the main thread
        return
    owner = os.getpid()

    def interrupt(signum: int, frame: object) -> None:
        if os.getpid() != owner:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
        raise Terminated

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


# A case's time limit is this many times longer where it counts instructions: code runs far slower
# under callgrind (docs/measurements/2026-12-03-ipc-counts.md).
COUNTED_SLOWER = 5


class _Forks:
    """Where a run's cases are forked from, one zygote, and what its earlier cases verified.

    The zygote is taken before anything of the run that varies from one run to the
    next (the machine check, the backends' results), so that every case of every
    run starts from the same heap.
    """

    def __init__(self, zygote: Zygote) -> None:
        self.zygote = zygote
        self.verified: set[tuple] = set()

    def run(self, cases: list[Case], profile: Profile) -> list[Outcome | Unsupported | str]:
        """Per case, its outcome (``run_case``; ``run_together`` for more than one), or CaseFailed
        for them all. The time limit is each case's."""
        args = (cases[0] if len(cases) == 1 else cases, profile, frozenset(self.verified))
        timeout = profile.case_timeout_s * len(cases) * (COUNTED_SLOWER if instructions.launched() else 1)
        outcome = self.zygote.run(run_case if len(cases) == 1 else run_together, args, timeout)
        outcomes = [outcome] if len(cases) == 1 else outcome
        for each in outcomes:
            self.verified.update(_verified_keys(each))
        return outcomes


def _visit(
    visits: list[Visit], profile: Profile, backends: dict[str, Backend], forks: _Forks
) -> list[Record]:
    """The records of visits measured in one child (one visit, or a group's round measured
    together; ``Profile.split`` = their rounds): measured, failed, or unsupported; none timed
    for a backend that failed conformance."""
    cases = [visit.case for visit in visits]
    start = time.perf_counter()
    errors = {case: _conformance_error(backends[case.backend]) for case in cases}
    timed = [case for case in cases if errors[case] is None]
    outcomes = _outcomes(timed, replace(profile, split=visits[0].rounds), forks) if timed else {}
    whole = time.perf_counter() - start
    return [_record(case, errors[case] or outcomes[case], whole) for case in cases]


def _outcomes(cases: list[Case], profile: Profile, forks: _Forks) -> dict[Case, Outcome | Unsupported | str]:
    """Each case's outcome from one child, or the error that failed it. A child of several that
    crashed or timed out measures each again alone, so that the error is the culprit's own."""
    try:
        return dict(zip(cases, forks.run(cases, profile), strict=True))
    except CaseFailed as exc:
        if len(cases) == 1:
            return {cases[0]: str(exc)}
    return {case: outcome for alone in cases for case, outcome in _outcomes([alone], profile, forks).items()}


def _record(case: Case, outcome: Outcome | Unsupported | str, whole_s: float) -> Record:
    """A visit's record of ``case``: its ``outcome``, or the error (a string) that failed it;
    its duration the outcome's own seconds where it was measured with others, else ``whole_s``."""
    if isinstance(outcome, Unsupported):
        rec = record(case, error=f"unsupported: {outcome.reason}", unsupported=outcome.reason)
    elif isinstance(outcome, str):
        rec = record(case, error=outcome)
    else:
        rec = record(case, metrics=outcome.metrics, info=outcome.info)
    own = outcome.seconds if isinstance(outcome, Outcome) else None
    seconds = whole_s if own is None else own
    return msgspec.structs.replace(rec, duration_s=round(seconds, 3))


def _measure(
    planned: list[Visit],
    profile: Profile,
    backends: dict[str, Backend],
    results: ResultsFile,
    forks: _Forks,
    on_case: Callable[[int, int, Case], None] | None = None,
    stop_rule: StopRule | None = None,
) -> None:
    """Every visit in its own child, its case's record in ``results`` (saved) after each; then
    finished. A case measured in rounds is one record, its visits so far merged
    (``results.merge``); once a visit fails (or finds the case unsupported, or its backend
    failed conformance), or its scenario takes no more of them (``Scenario.revisit``), the case
    is visited no more; nor are the backends of a group that ``stop_rule`` no longer finds open
    (``visits.Stopping``)."""
    stopping = Stopping(stop_rule, profile, backends)
    rounds: dict[Case, list[Record]] = {}
    where: dict[Case, int] = {}  # a case measured in rounds: its record's index in the file
    ended: set[Case] = set()
    for batch in batches(planned):
        due = [
            (index, visit)
            for index, visit in batch
            if visit.case not in ended
            and stopping.takes(visit)
            and revisited(visit, profile, rounds.get(visit.case, []))
        ]
        if not due:
            continue
        if on_case:
            for index, visit in due:
                on_case(index, len(planned), visit.case)
        visits = [visit for _, visit in due]
        for visit, rec in zip(visits, _visit(visits, profile, backends, forks), strict=True):
            case = visit.case
            if visit.rounds == 1:
                results.add(rec)
                continue
            done = rounds.setdefault(case, [])
            done.append(rec)
            if not rec.ok:
                ended.add(case)
            # a first visit that measured nothing (failed, unsupported, not conformant) stays as it is
            kept = rec if len(done) == 1 and not rec.ok else merged(done)
            stopping.keep(case, kept)
            if case in where:
                results.replace(where[case], kept)
            else:
                where[case] = results.add(kept)
    results.finish()


def _verified_keys(outcome: Outcome | Unsupported) -> list[tuple]:
    """Take the keys of the messages a case verified out of its info."""
    info = getattr(outcome, "info", None)
    if info is None or info.verification is None:
        return []
    keys, info.verification.keys = info.verification.keys or [], None
    return [tuple(key) for key in keys]


def _preload_torch() -> None:
    """torch, and the dtype tables the backends build from it on first use: computed here, once,
    they are inherited by every child instead of landing in a case's first timed request."""
    tensors.tables()  # imports torch; the conformance specimens are tensors of every dtype


def _preload(plan: Plan, checks_backends: bool) -> None:
    """Import before any fork what every case or conformance child would otherwise import again:
    the plan's workload modules and, where anything uses it, torch (the modules import it on
    first use). A counting measurer of text cases alone (its backends checked by its parent)
    never imports torch, which is slow to import under valgrind (docs/instructions.md)."""
    workloads = [get_workload(name) for name in plan.workloads]
    if checks_backends or any(workload.tensors for workload in workloads):
        _preload_torch()


def execute(
    plan: Plan,
    profile: Profile,
    out: Path,
    argv: list[str],
    on_case: Callable[[int, int, Case], None] | None = None,
    check: Callable[[list[str]], dict[str, Backend]] = check_backends,
    stop_rule: StopRule | None = None,
) -> ResultsFile:
    """Run every case of ``plan`` and write ``out``; returns the finished results.

    ``check`` gives the backends as checked (``check_backends``), called once
    the zygote is taken; a counting run's parent checks them outside valgrind.
    ``stop_rule``: the rule that stops visiting a group's backends (``visits.Stopping``).
    On KeyboardInterrupt (Ctrl-C or SIGTERM) the file keeps ``complete: false``
    and the cases so far; it exists from the start, before the conformance checks.
    """
    cases = plan.cases()
    _preload(plan, checks_backends=check is check_backends)
    with sigterm_as_interrupt(), Zygote() as zygote:
        results = ResultsFile(out, environment.collect(argv), profile.name, {})
        results.set_backends(check(sorted({c.backend for c in cases})))
        planned = visit_order(cases, profile)
        _measure(planned, profile, results.results.backends, results, _Forks(zygote), on_case, stop_rule)
    return results


def work(
    plan: Plan,
    profile: Profile,
    argv: list[str],
    channel: protocol.Channel,
    ask_backends: bool = False,
    progress: bool = False,
    accelerator: Accelerator | None = None,
) -> None:
    """A measurer's loop (``python -m serbench.runner.measurer``, ``serbench.runner.protocol``):
    measure cases on request, one process for many short rounds.

    Once its zygote is taken it checks the backends — or, with ``ask_backends``,
    asks the client for their facts (``Wanted``; a counting process's parent
    checked them at full speed) — and answers ``Ready`` with its cases. Then each
    ``Measure(out, case)`` measures that case (every case when None; a case it
    does not have, none) into ``out/results.json`` and is answered
    ``Measured(out)``, after a ``Progress`` before each case when ``progress``. ``accelerator``:
    the client's probe of it, for the results' environment (``environment.collect``).
    It returns when the client closes its end. The gate can thus alternate base
    and head case by case, a fraction of a second apart, without paying an
    interpreter start, the imports and the conformance checks each time.
    """
    cases = plan.cases()
    _preload(plan, checks_backends=not ask_backends)
    with Zygote() as zygote:
        forks = _Forks(zygote)
        env = environment.collect(argv, accelerator)
        specs = sorted({c.backend for c in cases})
        if ask_backends:
            channel.send(protocol.Wanted(specs))
            answer = channel.receive()
            if not isinstance(answer, protocol.Backends) or set(specs) - set(answer.backends):
                raise protocol.MeasurerError(
                    f"asked for the backends {', '.join(specs)}, got {answer!r:.200}"
                )
            backends = answer.backends
        else:
            backends = check_backends(specs)
        channel.send(protocol.Ready(cases))

        def on_case(index: int, total: int, case: Case) -> None:
            channel.send(protocol.Progress(index, total, case))

        while (request := channel.receive()) is not None:
            if not isinstance(request, protocol.Measure):
                raise protocol.MeasurerError(f"{type(request).__name__} out of turn")
            chosen = [Visit(c) for c in cases if request.case in (None, c)]  # whole: the gate has rounds
            results = ResultsFile(Path(request.out) / "results.json", env, profile.name, backends)
            _measure(chosen, profile, backends, results, forks, on_case if progress else None)
            channel.send(protocol.Measured(request.out))
