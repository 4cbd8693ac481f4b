"""The one protocol between serbench and the processes it execs: typed messages, a JSON line each.

serbench execs its own code in two places: the gate's workers (one per
revision, that revision's code first on the path) and the instruction-counting
process under valgrind. Both are ``python -m serbench.runner.measurer``
(``serbench.runner.measurer``), and both are driven through this protocol over the
worker's stdin and stdout. Every message is a ``msgspec.Struct`` of a tagged
union (``"kind"``), one JSON document per line::

    worker  Hello(protocol, serbench, capabilities, dimensions, options, code)
    client  Setup(plan, profile, argv, counting, ask_backends, progress)
    worker  [Wanted(backends) → client Backends(facts)]     (when ask_backends)
    worker  Ready(cases)              or Failed(error), then it exits 2
    client  Measure(out, case)        (case None: every case)
    worker  [Progress(index, total, case) ...] Measured(out), or Failed(error)
    ... more Measure requests ...
    client  closes the worker's stdin: the worker ends (exit 0)

The ``Hello`` comes first, before the worker reads anything, and states the
protocol version and what the worker can do: the gate reads it instead of a
revision's ``--help``. A revision from before this protocol has no
``serbench.runner.measurer``: its process ends without a hello, and the gate falls back
to that revision's ``serbench run --worker`` JSON lines, or a fresh ``serbench
run`` per round (``serbench.gate.measure``).

Settings travel in ``Setup``, never in the environment: the plan (backends,
workloads, scenarios, and each case dimension's values, typed), the profile
(its name and the scenario options given), and for the counting process where
callgrind writes its dumps (``Counting``); the backends' facts, which a
counting process's parent checks at full speed, are asked for with ``Wanted``
once the worker's zygote is taken, so they are in no case's heap. A scenario
option travels as its command-line text (``option_text``), which the worker
reads with the option's own ``parse``: an option's value may be one JSON has
no form for (the rate ``inf``).

Processes that serbench forks rather than execs — the zygote's case children
(``serbench.runtime.isolation``), the memory scenario's sides (``serbench.probes.rss``), a
forked engine — run their parent's very code, so they need no version and no
hello: they exchange the same typed structs (``Outcome``, ``results.Record``
and its ``Info``) by pickle over their pipe or file.
"""

from __future__ import annotations

import os
import select
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import msgspec

from serbench.model.errors import SerbenchError
from serbench.model.profiles import Profile as RunProfile
from serbench.model.results import Accelerator, Backend, Case

PROTOCOL = 1
MODULE = "serbench.runner.measurer"  # ``python -m serbench.runner.measurer``
# What a worker of this protocol can do, stated in its hello.
MEASURE_CASE = "measure-case"  # Measure(case=...) measures that case alone
INSTRUCTIONS = "instructions"  # a profile with measure=instructions counts them (one valgrind process)
PROGRESS = "progress"  # Setup(progress=True): a Progress message before every case


class WorkerError(SerbenchError):
    """A worker that failed (its ``Failed`` message) or said something this protocol does not know."""


class WorkerStopped(WorkerError):
    """A worker that ended, or closed its end, while an answer was awaited."""


class _Message(msgspec.Struct, tag_field="kind", forbid_unknown_fields=False):
    """Base of every message."""


# ---------------------------------------------------------------- the worker says


class Hello(_Message, tag="hello"):
    """The worker's first line: protocol version, serbench's version, what it can do
    (``MEASURE_CASE``, ``INSTRUCTIONS``, ``PROGRESS``), the case dimensions and the scenario
    options it knows (by ``Case`` field and ``Profile.options`` key), and the folder its
    serbench was imported from (so a client can check that it runs the code it meant)."""

    protocol: int
    serbench: str
    capabilities: list[str] = []
    dimensions: list[str] = []
    options: list[str] = []
    code: str = ""


class Wanted(_Message, tag="wanted"):
    """The worker asks for these backends' facts (``Setup.ask_backends``): answer ``Backends``."""

    backends: list[str]


class Ready(_Message, tag="ready"):
    """Set up: the backends checked, the cases it measures, in order."""

    cases: list[Case]


class Progress(_Message, tag="progress"):
    """About to measure ``case``, the ``index``-th (from 0) of ``total`` (``Setup.progress``)."""

    index: int
    total: int
    case: Case


class Measured(_Message, tag="measured"):
    """The request for ``out`` is done: its results are in ``out/results.json``."""

    out: str


class Failed(_Message, tag="failed"):
    """What the worker could not do, in one line; it ends after a failed setup."""

    error: str


# ---------------------------------------------------------------- the client says


class Plan(msgspec.Struct):
    """``runner.Plan`` on the wire: backends × workloads × scenarios and each dimension's values."""

    backends: list[str]
    workloads: list[str]
    scenarios: list[str]
    dimensions: dict[str, tuple[str | int | float, ...]] = {}


class Profile(msgspec.Struct):
    """``profiles.Profile`` on the wire: its name, and the scenario options given, by key, as
    their command-line text (``option_text``)."""

    name: str
    options: dict[str, str] = {}


class Counting(msgspec.Struct):
    """The worker runs under callgrind and counts instructions; ``dumps``: the folder valgrind
    was told to write its dumps in; ``accelerator``: what the client's probe found, for the
    results' environment (the probe imports torch, which under valgrind takes half a minute)."""

    dumps: str
    accelerator: Accelerator | None = None


class Setup(_Message, tag="setup"):
    """What the worker measures and how. ``argv``: the command line the results record.
    ``ask_backends``: ask the client for the backends' facts (``Wanted``) instead of
    checking them; ``progress``: send ``Progress`` before every case."""

    plan: Plan
    profile: Profile
    argv: list[str] = []
    counting: Counting | None = None
    ask_backends: bool = False
    progress: bool = False


class Backends(_Message, tag="backends"):
    """The answer to ``Wanted``: spec → facts."""

    facts: dict[str, Backend]


class Measure(_Message, tag="measure"):
    """Measure ``case`` (every case when None) into ``out/results.json``."""

    out: str
    case: Case | None = None


FromWorker = Hello | Wanted | Ready | Progress | Measured | Failed
ToWorker = Setup | Backends | Measure

_ENCODER = msgspec.json.Encoder()


class _PlanLike(Protocol):
    backends: list[str]
    workloads: list[str]
    scenarios: list[str]
    dimensions: Mapping[str, Sequence[Any]]


def plan_message(plan: _PlanLike) -> Plan:
    """A ``runner.Plan`` as its message."""
    dimensions = {k: tuple(v) for k, v in plan.dimensions.items()}
    return Plan(list(plan.backends), list(plan.workloads), list(plan.scenarios), dimensions)


def option_text(value: Any) -> str:
    """A scenario option's value as the command line gives it, which its ``parse`` reads back
    exactly: a list comma-separated, a float as ``repr`` writes it (``inf`` too)."""
    if isinstance(value, (tuple, list)):
        return ",".join(option_text(v) for v in value)
    if isinstance(value, float):
        return repr(value)
    return str(value)


def profile_message(profile: RunProfile) -> Profile:
    """A ``profiles.Profile`` as its message."""
    return Profile(profile.name, {key: option_text(value) for key, value in profile.options.items()})


class Channel:
    """One end of a conversation: messages out on one file descriptor, in on another, a JSON
    line each. Reading keeps what it read past a line for the next one (a reply of several
    lines arrives in one read), so a timeout applies to a whole message."""

    def __init__(self, reading: int, writing: int, incoming: Any) -> None:
        self.reading, self.writing = reading, writing
        self._decoder = msgspec.json.Decoder(incoming)
        self._buffer = bytearray()

    def send(self, message: msgspec.Struct) -> None:
        """Write one message (OSError when the other end is gone)."""
        self.write_line(_ENCODER.encode(message))

    def write_line(self, line: bytes) -> None:
        data = memoryview(line + b"\n")
        while data:
            data = data[os.write(self.writing, data) :]

    def read_line(self, timeout: float | None = None) -> bytes | None:
        """The next line without its end; None at end of file; TimeoutError after ``timeout`` s."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while (end := self._buffer.find(b"\n")) < 0:
            if deadline is not None:
                ready, _, _ = select.select([self.reading], [], [], max(0.0, deadline - time.monotonic()))
                if not ready:
                    raise TimeoutError(f"no message in {timeout:g} s")
            chunk = os.read(self.reading, 1 << 16)
            if not chunk:
                return None
            self._buffer += chunk
        line = bytes(self._buffer[:end])
        del self._buffer[: end + 1]
        return line

    def receive(self, timeout: float | None = None) -> Any:
        """The next message; None at end of file. WorkerError for a line that is none of the
        messages expected, TimeoutError after ``timeout`` s."""
        line = self.read_line(timeout)
        if line is None:
            return None
        try:
            return self._decoder.decode(line)
        except msgspec.DecodeError as exc:
            raise WorkerError(
                f"not a message of serbench's protocol {PROTOCOL} ({exc}): {line[:200]!r}"
            ) from None


class Client:
    """serbench's end of a conversation with a worker it started with pipes to its stdin and
    stdout (``python -m serbench.runner.measurer``). Every wait takes a timeout in seconds (None: none);
    a worker that ends, fails or answers out of turn is a WorkerError."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc
        self.channel = Channel(proc.stdout.fileno(), proc.stdin.fileno(), FromWorker)

    def hello(self, timeout: float | None) -> Hello | None:
        """The worker's hello; None when it ends without one (no ``serbench.runner.measurer`` there)."""
        message = self.channel.receive(timeout)
        if message is None:
            return None
        if not isinstance(message, Hello):
            raise WorkerError(f"said {type(message).__name__} before its hello")
        return message

    def send(self, message: msgspec.Struct) -> None:
        """Send ``message``; WorkerError when the worker is gone."""
        try:
            self.channel.send(message)
        except OSError:
            raise WorkerStopped("stopped") from None

    def reply(
        self,
        expected: type,
        timeout: float | None,
        backends: Callable[[list[str]], Mapping[str, Backend]] | None = None,
        progress: Callable[[Progress], None] | None = None,
    ) -> Any:
        """Wait for a message of type ``expected``, answering ``Wanted`` with ``backends`` and
        passing ``Progress`` to ``progress`` on the way."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            message = self.channel.receive(left)
            if isinstance(message, expected):
                return message
            if message is None:
                raise WorkerStopped("stopped")
            if isinstance(message, Failed):
                raise WorkerError(message.error)
            if isinstance(message, Wanted) and backends is not None:
                self.send(Backends(dict(backends(message.backends))))
            elif isinstance(message, Progress):
                if progress is not None:
                    progress(message)
            else:
                raise WorkerError(f"said {type(message).__name__} while {expected.__name__} was expected")
