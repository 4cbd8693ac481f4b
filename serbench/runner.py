"""The runner: backends × workloads × scenarios, each case in its own process.

Before timing a backend, the runner round-trips the conformance cases through
it (in a child of its own): a backend that fails conformance is not timed,
its cases are recorded as failed with the first mismatches. A case whose
workload the backend declares unsupported is recorded as unsupported (its
``error`` says so and why, ``info.unsupported`` holds the reason), never
timed; every other case verifies its own messages before timing them
(``conformance.verify``, called by each scenario), unless an earlier case of
the run verified the same ones: the runner keeps what each case verified and
hands it to the cases after it, so micro, ipc and memory do not round-trip the
same 308 MB request three times. Every case is forked from one zygote taken
before anything else of the run (``isolation.Zygote``), so none inherits what
the runner did before it. Every case, failed or not, lands in the results
file, which is saved after each one. ``work`` is the same loop on request, for
the gate's workers.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from serbench import conformance, environment, protocol
from serbench.errors import Terminated
from serbench.isolation import CaseFailed, Zygote, run_isolated
from serbench.profiles import Profile
from serbench.results import Backend, Case, Conformance, ResultsFile, record
from serbench.scenarios import Outcome, get_scenario
from serbench.serializers import declared_safety, describe, get_serializer

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


def run_case(case: Case, profile: Profile, verified: frozenset = frozenset()) -> Outcome | Unsupported:
    """Runs in a child: one scenario measurement, or ``Unsupported`` (nothing timed) when the
    backend declares the case's workload unsupported. ``verified``: the keys of the messages
    that earlier cases of the run round-tripped (``conformance.remember``)."""
    conformance.remember(verified)
    reason = conformance.case_unsupported(get_serializer(case.backend), case.workload)
    if reason is not None:
        return Unsupported(reason)
    return get_scenario(case.scenario).run(case, profile)


def check_backends(specs: list[str]) -> dict[str, Backend]:
    """Each backend's safety and conformance suite, checked in a child of its own: spec → facts
    (the suite's failures are why a backend is not timed)."""
    checked = {}
    for spec in specs:
        try:
            checked[spec] = run_isolated(check_backend, (spec,), CONFORMANCE_TIMEOUT_S)
        except CaseFailed as exc:
            failed = Conformance(error=str(exc), failed={"*": str(exc)})
            checked[spec] = Backend(safe=False, conformance=failed)
    return checked


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


class _Forks:
    """Where a run's cases are forked from, one zygote, and what its earlier cases verified.

    The zygote is taken before anything of the run that varies from one run to the
    next (the machine check, the backends' results), so that every case of every
    run starts from the same heap.
    """

    def __init__(self, zygote: Zygote) -> None:
        self.zygote = zygote
        self.verified: set[tuple] = set()

    def run(self, case: Case, profile: Profile) -> Outcome | Unsupported:
        """The case's outcome (``run_case``), or CaseFailed."""
        args = (case, profile, frozenset(self.verified))
        outcome = self.zygote.run(run_case, args, profile.case_timeout_s)
        self.verified.update(_verified_keys(outcome))
        return outcome


def _measure(
    cases: list[Case],
    profile: Profile,
    backends: dict[str, Backend],
    results: ResultsFile,
    forks: _Forks,
    on_case: Callable[[int, int, Case], None] | None = None,
) -> None:
    """Every case in its own child, recorded in ``results`` one by one; then finished."""
    for index, case in enumerate(cases):
        if on_case:
            on_case(index, len(cases), case)
        start = time.perf_counter()
        error = _conformance_error(backends[case.backend])
        outcome: Outcome | Unsupported = Outcome({})
        if error is None:
            try:
                outcome = forks.run(case, profile)
            except CaseFailed as exc:
                error = str(exc)
        duration = round(time.perf_counter() - start, 3)
        if isinstance(outcome, Unsupported):
            rec = record(case, error=f"unsupported: {outcome.reason}", unsupported=outcome.reason)
        else:
            rec = record(case, metrics=outcome.metrics, info=outcome.info, error=error)
        results.add(msgspec.structs.replace(rec, duration_s=duration))
    results.finish()


def _verified_keys(outcome: Outcome | Unsupported) -> list[tuple]:
    """Take the keys of the messages a case verified out of its info."""
    info = getattr(outcome, "info", None)
    if info is None or info.verification is None:
        return []
    keys, info.verification.keys = info.verification.keys or [], None
    return [tuple(key) for key in keys]


def execute(
    plan: Plan,
    profile: Profile,
    out: Path,
    argv: list[str],
    on_case: Callable[[int, int, Case], None] | None = None,
    backend_facts: Callable[[list[str]], dict[str, Backend]] = check_backends,
) -> ResultsFile:
    """Run every case of ``plan`` and write ``out``; returns the finished results.

    ``backend_facts`` gives the backends' facts (``check_backends``'s), called once
    the zygote is taken; a counting run's parent checks them outside valgrind.
    On KeyboardInterrupt (Ctrl-C or SIGTERM) the file keeps ``complete: false``
    and the cases so far; it exists from the start, before the conformance checks.
    """
    cases = plan.cases()
    with sigterm_as_interrupt(), Zygote() as zygote:
        results = ResultsFile(out, environment.collect(argv), profile.name, {})
        results.results.backends = backend_facts(sorted({c.backend for c in cases}))
        results.save()
        _measure(cases, profile, results.results.backends, results, _Forks(zygote), on_case)
    return results


def work(
    plan: Plan,
    profile: Profile,
    argv: list[str],
    channel: protocol.Channel,
    ask_backends: bool = False,
    progress: bool = False,
) -> None:
    """A worker's loop (``python -m serbench.worker``, ``serbench.protocol``): measure cases on
    request, one process for many short rounds.

    Once its zygote is taken it checks the backends — or, with ``ask_backends``,
    asks the client for their facts (``Wanted``; a counting process's parent
    checked them at full speed) — and answers ``Ready`` with its cases. Then each
    ``Measure(out, case)`` measures that case (every case when None; a case it
    does not have, none) into ``out/results.json`` and is answered
    ``Measured(out)``, after a ``Progress`` before each case when ``progress``.
    It returns when the client closes its end. The gate can thus alternate base
    and head case by case, a fraction of a second apart, without paying an
    interpreter start, the imports and the conformance checks each time.
    """
    cases = plan.cases()
    with Zygote() as zygote:
        forks = _Forks(zygote)
        env = environment.collect(argv)
        specs = sorted({c.backend for c in cases})
        if ask_backends:
            channel.send(protocol.Wanted(specs))
            answer = channel.receive()
            if not isinstance(answer, protocol.Backends) or set(specs) - set(answer.facts):
                raise protocol.WorkerError(f"asked for the facts of {', '.join(specs)}, got {answer!r:.200}")
            backends = answer.facts
        else:
            backends = check_backends(specs)
        channel.send(protocol.Ready(cases))

        def on_case(index: int, total: int, case: Case) -> None:
            channel.send(protocol.Progress(index, total, case))

        while (request := channel.receive()) is not None:
            if not isinstance(request, protocol.Measure):
                raise protocol.WorkerError(f"{type(request).__name__} out of turn")
            chosen = [c for c in cases if request.case in (None, c)]
            results = ResultsFile(Path(request.out) / "results.json", env, profile.name, backends)
            _measure(chosen, profile, backends, results, forks, on_case if progress else None)
            channel.send(protocol.Measured(request.out))
