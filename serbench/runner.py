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

import json
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from serbench import conformance, environment
from serbench.errors import Terminated
from serbench.isolation import CaseFailed, Zygote, run_isolated
from serbench.profiles import Profile
from serbench.results import ResultsFile, record
from serbench.scenarios import Case, get_scenario
from serbench.serializers import declared_safety, describe, get_serializer
from serbench.transport import DEFAULT_KIND

CONFORMANCE_TIMEOUT_S = 120


@dataclass(frozen=True)
class Plan:
    backends: list[str]
    workloads: list[str]
    scenarios: list[str]
    transports: tuple[str, ...] = (DEFAULT_KIND,)  # for the scenarios that link two processes

    def cases(self) -> list[Case]:
        return [
            case
            for name in self.scenarios
            for case in get_scenario(name).cases(self.backends, self.workloads, self.transports)
        ]


def check_backend(spec: str) -> dict:
    """Runs in a child: the backend's declared traits and its conformance results."""
    serializer = get_serializer(spec)
    results = list(conformance.check(serializer))
    return {
        "name": serializer.name,
        "description": describe(serializer),
        "safe": declared_safety(serializer),  # None: undeclared
        "conformance": {
            "passed": sum(r.status == "pass" for r in results),
            "unsupported": {r.id: r.detail for r in results if r.status == "unsupported"},
            "failed": {r.id: r.detail for r in results if r.status == "fail"},
        },
    }


UNSUPPORTED = "unsupported"


def run_case(case: Case, profile: Profile, verified: frozenset = frozenset()) -> dict:
    """Runs in a child: one scenario measurement, or ``{"unsupported": reason}`` (nothing timed)
    when the backend declares the case's workload unsupported. ``verified``: the keys of the
    messages that earlier cases of the run round-tripped (``conformance.remember``)."""
    conformance.remember(verified)
    reason = conformance.case_unsupported(get_serializer(case.spec), case.workload)
    if reason is not None:
        return {UNSUPPORTED: reason}
    return get_scenario(case.scenario).run(case, profile)


def check_backends(specs: list[str]) -> dict[str, dict]:
    """Each backend's safety and conformance suite, checked in a child of its own: spec → facts
    (the suite's failures are why a backend is not timed)."""
    checked = {}
    for spec in specs:
        try:
            checked[spec] = run_isolated(check_backend, (spec,), CONFORMANCE_TIMEOUT_S)
        except CaseFailed as exc:
            checked[spec] = {"safe": False, "conformance": {"error": str(exc), "failed": {"*": str(exc)}}}
    return checked


def _conformance_error(info: dict) -> str | None:
    failed = info["conformance"].get("failed") or {}
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

    def run(self, case: Case, profile: Profile) -> dict:
        """The case's outcome (``run_case``), or CaseFailed."""
        args = (case, profile, frozenset(self.verified))
        outcome = self.zygote.run(run_case, args, profile.case_timeout_s)
        self.verified.update(_verified_keys(outcome))
        return outcome


def _measure(
    cases: list[Case],
    profile: Profile,
    backends: dict[str, dict],
    results: ResultsFile,
    forks: _Forks,
    on_case: Callable[[int, int, Case], None] | None = None,
) -> None:
    """Every case in its own child, recorded in ``results`` one by one; then finished."""
    for index, case in enumerate(cases):
        if on_case:
            on_case(index, len(cases), case)
        start = time.perf_counter()
        error = _conformance_error(backends[case.spec])
        outcome: dict = {}
        if error is None:
            try:
                outcome = forks.run(case, profile)
            except CaseFailed as exc:
                error = str(exc)
        if UNSUPPORTED in outcome:
            error = f"{UNSUPPORTED}: {outcome[UNSUPPORTED]}"
            outcome = {"info": {UNSUPPORTED: outcome[UNSUPPORTED]}}
        results.add(
            record(
                case.scenario,
                case.backend,
                case.workload,
                outcome.get("metrics"),
                outcome.get("info"),
                error,
                round(time.perf_counter() - start, 3),
            )
        )
    results.finish()


def _verified_keys(outcome: dict) -> list[tuple]:
    """Take the keys of the messages a case verified out of its info."""
    verification = (outcome.get("info") or {}).get("verification")
    if not isinstance(verification, dict):
        return []
    return [tuple(key) for key in verification.pop("keys", ())]


def execute(
    plan: Plan,
    profile: Profile,
    out: Path,
    argv: list[str],
    on_case: Callable[[int, int, Case], None] | None = None,
    backend_facts: Callable[[list[str]], dict[str, dict]] = check_backends,
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
        results.data["backends"] = backend_facts(sorted({c.spec for c in cases}))
        results.save()
        _measure(cases, profile, results.data["backends"], results, _Forks(zygote), on_case)
    return results


def work(plan: Plan, profile: Profile, argv: list[str], requests: TextIO, replies: TextIO) -> None:
    """The gate's worker: measure cases on request, one process for many short rounds.

    It checks the backends once and announces its cases, a JSON line
    ``{"cases": [[scenario, backend, workload], ...]}``. Then for each request
    line ``{"out": FOLDER, "case": [scenario, backend, workload]}`` it measures
    that case (every case if "case" is left out) into ``FOLDER/results.json``
    and echoes the line. The gate can thus alternate base and head case by
    case, a fraction of a second apart, without paying an interpreter start,
    the imports and the conformance checks each time.
    """
    cases = plan.cases()
    keys = [[c.scenario, c.backend, c.workload] for c in cases]
    with Zygote() as zygote:
        forks = _Forks(zygote)
        env = environment.collect(argv)
        backends = check_backends(sorted({c.spec for c in cases}))
        print(json.dumps({"cases": keys}), file=replies, flush=True)
        for line in requests:
            request = json.loads(line)
            chosen = [c for c, key in zip(cases, keys, strict=True) if request.get("case") in (None, key)]
            results = ResultsFile(Path(request["out"]) / "results.json", env, profile.name, backends)
            _measure(chosen, profile, backends, results, forks)
            print(line.strip(), file=replies, flush=True)
