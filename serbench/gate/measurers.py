"""The measuring processes of a gate's side, and how each is driven.

A side is measured by one of three, chosen by what its revision has:

* ``ProtocolMeasurer``: its ``python -m serbench.runner.measurer``, driven by
  ``serbench.runner.protocol``. It says hello, takes its ``Setup``, checks its
  backends (or is handed an earlier measurer's check of the same code) and
  announces its cases; then it measures one case per request.
* ``RunWorkerMeasurer``: for a revision from before that module (it ends without
  a hello), its ``serbench run --worker`` JSON lines, its schema-1 case keys and
  results converted to this model.
* ``OneShotMeasurer``: for a revision without ``--worker`` either, a fresh
  ``serbench run`` of every case per round — and then for head as well, so that
  both sides are measured alike (``measurers``).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from serbench.gate.cpus import measurer_cpus
from serbench.gate.revision import RUN_TIMEOUT_S, Revision, run_help
from serbench.model import results
from serbench.model.errors import GateError
from serbench.model.results import Backend, Case, Results
from serbench.runner import protocol
from serbench.runner.protocol import Measure, Measured, MeasurerError, MeasurerStopped, Ready
from serbench.runtime.isolation import end_tree
from serbench.scenarios import dimensions


def _last_line(path: Path, default: str) -> str:
    lines = path.read_text(errors="replace").strip().splitlines() if path.exists() else []
    return lines[-1] if lines else default


def _end(proc: subprocess.Popen) -> None:
    """Tell a measuring process to end (its stdin closes), without waiting for it."""
    with contextlib.suppress(OSError):
        proc.stdin.close()


def _close(proc: subprocess.Popen) -> None:
    """End a measuring process: its stdin closes; terminated, then killed, if it does not end
    in time."""
    _end(proc)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        end_tree(proc.pid)
        proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()


class ProtocolMeasurer:
    """A revision's ``python -m serbench.runner.measurer`` (``serbench.runner.protocol``): started
    once, set up, then one case measured per request, so a measurement costs only itself;
    stderr goes to ``log``. Given its ``backends`` as an earlier measurer of the same code
    checked them, it is handed those instead of checking the backends again."""

    def __init__(
        self,
        revision: Revision,
        log: Path,
        cpus: frozenset[int] | None = None,
        backends: Mapping[str, Backend] | None = None,
    ) -> None:
        """Started; ``greet`` reads its hello and sets it up, ``ready`` waits until it has
        announced its cases (start several, then wait)."""
        self.revision, self.log, self.backends = revision, log, backends
        with log.open("w") as err:
            pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "stderr": err}
            self.proc = revision.start(["-m", revision.measurer_module()], cpus, **pipes)
        self.client = protocol.Client(self.proc)
        self.hello: protocol.Hello | None = None
        self.cases: list[Case] | None = None

    def greet(self) -> bool:
        """Read the hello and send the setup; False (the process ended) when it ended without a
        hello: a revision from before ``serbench.runner.measurer``. GateError for a measurer of
        another protocol, of another tree, or without a dimension or option asked for."""
        try:
            hello = self.client.hello(RUN_TIMEOUT_S)
        except (TimeoutError, MeasurerError) as exc:
            self.close()
            raise self._stopped(exc) from None
        if hello is None:
            self.close()
            return False
        self.hello = hello
        problem = self._mismatch(hello)
        if problem:
            self.close()
            raise GateError(f"{self.revision.label}: {problem}")
        try:
            self.client.send(self.revision.setup(ask_backends=self.backends is not None))
        except MeasurerError as exc:
            self.close()
            raise self._stopped(exc) from None
        return True

    def _mismatch(self, hello: protocol.Hello) -> str | None:
        """Why this measurer cannot measure its revision's plan, or None."""
        code = self.revision.code.resolve()
        if hello.protocol != protocol.PROTOCOL:
            return f"its measuring process speaks protocol {hello.protocol}, this gate {protocol.PROTOCOL}"
        if Path(hello.code).resolve() != (code / "serbench").resolve():
            return f"its measuring process runs the serbench in {hello.code}, not the one in {code}"
        missing = [dimensions()[f].flag for f in self.revision.plan.dimensions if f not in hello.dimensions]
        missing += [f"option {k}" for k in self.revision.profile.options if k not in hello.options]
        return f"its serbench has no {', '.join(missing)}" if missing else None

    def ready(self) -> ProtocolMeasurer:
        """This measurer once it has announced its cases; GateError if it stopped instead."""
        try:
            handed = None if self.backends is None else (lambda specs: {s: self.backends[s] for s in specs})
            self.cases = self.client.reply(Ready, RUN_TIMEOUT_S, backends=handed).cases
        except (TimeoutError, MeasurerError) as exc:
            self.close()
            raise self._stopped(exc) from None
        return self

    def _stopped(self, exc: Exception | None = None) -> GateError:
        """What the measurer said (its ``Failed``), else the last line of its log (``exc`` None:
        it ended without a word)."""
        if exc is None or isinstance(exc, MeasurerStopped):
            reason = _last_line(self.log, "no reply")
        elif isinstance(exc, TimeoutError):
            reason = f"no answer in {RUN_TIMEOUT_S} s"
        else:
            reason = str(exc)
        return GateError(f"{self.revision.label}: serbench's measuring process stopped: {reason}")

    def request(self, out: Path, case: Case | None = None) -> None:
        """Ask for ``case`` (every case if None) measured into ``out``; ``result`` waits for it."""
        try:
            self.client.send(Measure(str(out), case))
        except MeasurerError as exc:
            raise self._stopped(exc) from None

    def result(self, out: Path) -> Results:
        """The results of the request for ``out``, once measured."""
        try:
            done = self.client.reply(Measured, RUN_TIMEOUT_S)
        except (TimeoutError, MeasurerError) as exc:
            raise self._stopped(exc) from None
        if done.out != str(out):
            raise GateError(f"{self.revision.label}: measured {done.out}, asked for {out}")
        return results.load(out / "results.json")

    def measure(self, out: Path, case: Case | None = None) -> Results:
        """``case`` (every case if None) measured into ``out``; its loaded results."""
        self.request(out, case)
        return self.result(out)

    def end(self) -> None:
        """Tell the measurer to end, without waiting (``close`` waits)."""
        _end(self.proc)

    def close(self) -> None:
        """End the measurer (its stdin closes); terminated, then killed, if it does not end in time."""
        _close(self.proc)


def schema_1_cases(keys: Sequence[Sequence[str]]) -> list[Case]:
    """Cases as serbench before the typed model named them, ``[scenario, spec[@transport],
    workload]``, read as its results files are read (``results.decode`` of schema 1)."""
    records = [{"scenario": s, "backend": b, "workload": w} for s, b, w in keys]
    document = {"schema": results.SCHEMA_1, "complete": True, "records": records}
    return [record.case for record in results.decode(json.dumps(document), "the measurer's cases").records]


class RunWorkerMeasurer:
    """A revision's ``serbench run --worker``, from before ``serbench.runner.measurer``: its
    options on the command line, then JSON lines — it announces ``{"cases": [[scenario,
    spec@transport, workload], ...]}``, and echoes each request ``{"out": FOLDER, "case":
    [...]}`` once measured. Its keys are converted to ``Case``s and its schema-1 results on load."""

    def __init__(self, revision: Revision, log: Path, cpus: frozenset[int] | None = None) -> None:
        self.revision, self.log = revision, log
        with log.open("a") as err:  # after the words of its failed serbench.runner.measurer
            pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "stderr": err}
            self.proc = revision.run("--worker", cpus=cpus, **pipes)
        self.channel = protocol.Channel(self.proc.stdout.fileno(), self.proc.stdin.fileno(), Any)
        self.cases: list[Case] | None = None
        self._keys: dict[Case, list[str]] = {}

    def _reply(self) -> str:
        try:
            line = self.channel.read_line(RUN_TIMEOUT_S)
        except TimeoutError:
            line = None
        return "" if line is None else line.decode().strip()

    def _stopped(self) -> GateError:
        return GateError(
            f"{self.revision.label}: serbench run --worker stopped: {_last_line(self.log, 'no reply')}"
        )

    def ready(self) -> RunWorkerMeasurer:
        """This measurer once it has announced its cases; GateError if it stopped instead."""
        announced = self._reply()
        if not announced:
            self.close()
            raise self._stopped()
        keys = json.loads(announced)["cases"]
        self.cases = schema_1_cases(keys)
        self._keys = dict(zip(self.cases, keys, strict=True))
        return self

    def measure(self, out: Path, case: Case | None = None) -> Results:
        """``case`` (every case if None) measured into ``out``; its loaded results."""
        request = json.dumps({"out": str(out), **({"case": self._keys[case]} if case else {})})
        try:
            self.channel.write_line(request.encode())
            reply = self._reply()
        except OSError:
            reply = ""
        if reply != request:
            raise self._stopped()
        return results.load(out / "results.json")

    def end(self) -> None:
        """Tell the measurer to end, without waiting (``close`` waits)."""
        _end(self.proc)

    def close(self) -> None:
        """End the measurer (its stdin closes); terminated, then killed, if it does not end in time."""
        _close(self.proc)


class OneShotMeasurer:
    """A revision measured by a fresh ``serbench run`` of every case per round: for revisions
    without ``--worker``."""

    cases = None  # unknown until run: every round measures them all

    def __init__(self, revision: Revision, log: Path, cpus: frozenset[int] | None = None) -> None:
        self.revision, self.log, self.cpus = revision, log, cpus

    def ready(self) -> OneShotMeasurer:
        """Nothing to wait for: each round starts its own process."""
        return self

    def measure(self, out: Path, case: None = None) -> Results:
        """Every case measured into ``out``; its loaded results."""
        return self.finish(self.start(out), out)

    def start(self, out: Path) -> subprocess.Popen:
        """The run that measures every case into ``out``, started."""
        with self.log.open("a") as err:
            return self.revision.run("--out", str(out), cpus=self.cpus, stdout=subprocess.DEVNULL, stderr=err)

    def finish(self, proc: subprocess.Popen, out: Path) -> Results:
        """Wait for ``proc`` (from ``start``); its loaded results, or GateError."""
        try:
            code = proc.wait(timeout=RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            end_tree(proc.pid)  # ended, not killed: it removes its temporary files
            proc.wait()
            raise GateError(f"{self.revision.label}: serbench run took over {RUN_TIMEOUT_S} s") from None
        if code:
            raise GateError(
                f"{self.revision.label}: serbench run failed: {_last_line(self.log, f'exit code {code}')}"
            )
        return results.load(out / "results.json")

    def end(self) -> None:
        """Nothing stays running between rounds."""

    def close(self) -> None:
        """Nothing stays running between rounds."""


Measurer = ProtocolMeasurer | RunWorkerMeasurer | OneShotMeasurer


def close_all(started: Sequence[Measurer]) -> None:
    """Close every measurer, all told to end before any is waited for: a measuring process's
    exit tears down its zygote and interpreter, and with one per side every round, exits
    waited for one after the other would add up per side per round."""
    for measurer in started:
        measurer.end()
    for measurer in started:
        measurer.close()


def greet_all(started: Sequence[ProtocolMeasurer]) -> list[int]:
    """Greet every measurer (``ProtocolMeasurer.greet``); the indices of those that ended without
    a hello: revisions from before ``serbench.runner.measurer``. Where every side runs the same
    serbench (another package's change is gated) none predates it: a silent one failed to
    start (an interpreter without serbench's dependencies, a broken path), a GateError with
    its last words."""
    older = [i for i, measurer in enumerate(started) if not measurer.greet()]
    if older and len({measurer.revision.code for measurer in started}) == 1:
        raise started[older[0]]._stopped()
    return older


@contextmanager
def measurers(
    revisions: Sequence[Revision],
    out: Path,
    log: Callable[[str], None] = print,
    backends: Sequence[Mapping[str, Backend] | None] | None = None,
) -> Iterator[list[Measurer]]:
    """A measuring process per revision (``serbench.runner.measurer``, else the revision's
    ``serbench run --worker``), or a process per round for both if one of them has neither
    (the two are measured alike either way); all stopped on exit. ``backends``: per revision,
    its checked backends to hand its ``ProtocolMeasurer``, or None for one that checks them."""
    cpus = measurer_cpus()
    if cpus:
        log(f"measuring processes pinned to CPU(s) {','.join(map(str, sorted(cpus)))}")
    handed = list(backends or [None] * len(revisions))
    started: list[Measurer] = []
    try:
        for revision, checked in zip(revisions, handed, strict=True):  # all started, then waited for
            started.append(ProtocolMeasurer(revision, out / f"{revision.label}.log", cpus, checked))
        older = greet_all(started)
        if older and all("--worker" in text for text in run_help([revisions[i] for i in older])):
            for i in older:
                label = revisions[i].label
                log(f"note: {label} predates serbench.runner.measurer: measured by `serbench run --worker`")
                started[i] = RunWorkerMeasurer(revisions[i], out / f"{label}.log", cpus)
        elif older:
            log("note: a revision predates `serbench run --worker`: a process per round (slower, noisier)")
            close_all(started)
            started = [
                OneShotMeasurer(revision, out / f"{revision.label}.log", cpus) for revision in revisions
            ]
        yield [measurer.ready() for measurer in started]
    finally:
        close_all(started)
