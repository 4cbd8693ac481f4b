"""The one protocol between serbench and the measuring processes it execs: typed JSON lines.

serbench execs ``python -m serbench.runner.measurer`` in two places: the gate,
one per side with that side's code first on the path, and instruction counting,
under valgrind. Each message is a ``msgspec.Struct`` of a union tagged by
``"kind"``, one JSON document per line over the measurer's stdin and stdout::

    measurer  Hello(protocol, serbench, capabilities, dimensions, options, code)
    client    Setup(plan, profile, argv, counting, ask_backends, progress)
    measurer  [Wanted(backends) → client Backends(facts)]   (when ask_backends)
    measurer  Ready(cases)              or Failed(error), then it exits 2
    client    Measure(out, case)        (case None: every case)
    measurer  [Progress(index, total, case) ...] Measured(out), or Failed(error)
    client    closes the measurer's stdin: it ends (exit 0)

The ``Hello`` states what the measurer can do, so a client reads it instead of
a revision's ``--help``. Settings travel in ``Setup``, never in the environment;
a scenario option as its command-line text (``option_text``), since JSON has no
form for some values (the rate ``inf``). Wire tags and field names stay as they
are: older revisions speak them.
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
# What a measurer of this protocol can do, stated in its hello.
MEASURE_CASE = "measure-case"  # Measure(case=...) measures that case alone
INSTRUCTIONS = "instructions"  # a profile with measure=instructions counts them (one valgrind process)
PROGRESS = "progress"  # Setup(progress=True): a Progress message before every case


class MeasurerError(SerbenchError):
    """A measurer that failed (its ``Failed`` message) or said something this protocol does not know."""


class MeasurerStopped(MeasurerError):
    """A measurer that ended, or closed its end, while an answer was awaited."""


class _Message(msgspec.Struct, tag_field="kind", forbid_unknown_fields=False):
    """Base of every message."""


# ---------------------------------------------------------------- the measurer says


class Hello(_Message, tag="hello"):
    """The measurer's first line: protocol version, serbench's version, what it can do
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
    """The measurer asks for these backends as its client checked them (``Setup.ask_backends``):
    answer ``Backends``."""

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
    """What the measurer could not do, in one line; it ends after a failed setup."""

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
    """The measurer runs under callgrind and counts instructions; ``dumps``: the folder valgrind
    was told to write its dumps in; ``accelerator``: what the client's probe found, for the
    results' environment (the probe imports torch, which under valgrind takes half a minute)."""

    dumps: str
    accelerator: Accelerator | None = None


class Setup(_Message, tag="setup"):
    """What the measurer measures and how. ``argv``: the command line the results record.
    ``ask_backends``: ask the client for the checked backends (``Wanted``) instead of
    checking them; ``progress``: send ``Progress`` before every case."""

    plan: Plan
    profile: Profile
    argv: list[str] = []
    counting: Counting | None = None
    ask_backends: bool = False
    progress: bool = False


class Backends(_Message, tag="backends"):
    """The answer to ``Wanted``: spec → the backend as checked (``"facts"`` on the wire)."""

    backends: dict[str, Backend] = msgspec.field(name="facts")


class Measure(_Message, tag="measure"):
    """Measure ``case`` (every case when None) into ``out/results.json``."""

    out: str
    case: Case | None = None


FromMeasurer = Hello | Wanted | Ready | Progress | Measured | Failed
ToMeasurer = Setup | Backends | Measure

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
        """The next message; None at end of file. MeasurerError for a line that is none of the
        messages expected, TimeoutError after ``timeout`` s."""
        line = self.read_line(timeout)
        if line is None:
            return None
        try:
            return self._decoder.decode(line)
        except msgspec.DecodeError as exc:
            raise MeasurerError(
                f"not a message of serbench's protocol {PROTOCOL} ({exc}): {line[:200]!r}"
            ) from None


class Client:
    """serbench's end of a conversation with a measurer it started with pipes to its stdin and
    stdout (``python -m serbench.runner.measurer``). Every wait takes a timeout in seconds (None: none);
    a measurer that ends, fails or answers out of turn is a MeasurerError."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc
        self.channel = Channel(proc.stdout.fileno(), proc.stdin.fileno(), FromMeasurer)

    def hello(self, timeout: float | None) -> Hello | None:
        """The measurer's hello; None when it ends without one (no ``serbench.runner.measurer`` there)."""
        message = self.channel.receive(timeout)
        if message is None:
            return None
        if not isinstance(message, Hello):
            raise MeasurerError(f"said {type(message).__name__} before its hello")
        return message

    def send(self, message: msgspec.Struct) -> None:
        """Send ``message``; MeasurerError when the measurer is gone."""
        try:
            self.channel.send(message)
        except OSError:
            raise MeasurerStopped("stopped") from None

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
                raise MeasurerStopped("stopped")
            if isinstance(message, Failed):
                raise MeasurerError(message.error)
            if isinstance(message, Wanted) and backends is not None:
                self.send(Backends(dict(backends(message.backends))))
            elif isinstance(message, Progress):
                if progress is not None:
                    progress(message)
            else:
                raise MeasurerError(f"said {type(message).__name__} while {expected.__name__} was expected")
