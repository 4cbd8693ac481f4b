"""``python -m serbench.runner.measurer``: the process serbench execs to measure, over ``protocol``.

Not a user command. The gate starts one per side, that side's code first on
the path (``serbench.gate.measurers``), and a run that counts instructions
starts one under valgrind (``count``). It says ``Hello``, takes its ``Setup``
(the plan and profile, checked as ``serbench run`` checks its own), then
``matrix.work`` measures case by case on request until the client closes its
end. A measurer whose profile asks for counts but that was not set up to count
(the gate's counting side) checks the backends at full speed and relays each
request to a measurer of its own under valgrind.

Run as a program, it first makes sure it belongs to the serbench it was started
for (an editable install of another tree could supply it): if not, it ends at
once without a hello, and the gate falls back to that revision's own way. Its
protocol goes over its own copies of stdin and stdout (fd 0 then reads nothing,
fd 1 goes to stderr), so nothing a backend prints can break a message. Like
``serbench.cli`` it prints an error in one line on stderr (and sends it as
``Failed``) and exits with its code.
"""

from __future__ import annotations

import os
import sys

import serbench

if __name__ == "__main__":
    _here = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
    _package = os.path.dirname(os.path.realpath(serbench.__file__))
    if _here != _package:
        sys.stderr.write(
            f"serbench.runner.measurer: the serbench in {_package} has none ({__file__} is another's)\n"
        )
        sys.exit(2)

from serbench.probes import instructions

if __name__ == "__main__" and instructions.on_valgrind():
    instructions.align_arenas()  # before the imports below allocate (docs/instructions.md)

from collections.abc import Callable
from contextlib import suppress
from pathlib import Path

from serbench.model.errors import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_TERMINATED,
    EXIT_USAGE,
    SerbenchError,
    Terminated,
    UsageError,
)
from serbench.model.profiles import PROFILES, Profile
from serbench.model.results import Backend, Case
from serbench.model.specs import SpecError
from serbench.probes import environment
from serbench.runner import matrix as runner
from serbench.runner import protocol
from serbench.runner.protocol import Failed, Measure, Measured, MeasurerError, Progress, Ready, Setup
from serbench.scenarios import SCENARIOS, Option, dimensions, get_scenario
from serbench.serializers import get_serializer
from serbench.workloads import get_workload

ONE_RUN_PER_SIDE = "counting instructions is one run per side: every case in one request"


def scenario_options() -> dict[str, Option]:
    """Every scenario's options by their key in ``Profile.options``."""
    return {option.key: option for scenario in SCENARIOS.values() for option in scenario.options}


def hello() -> protocol.Hello:
    """What this measurer says first."""
    return protocol.Hello(
        protocol=protocol.PROTOCOL,
        serbench=serbench.__version__,
        capabilities=[protocol.MEASURE_CASE, protocol.INSTRUCTIONS, protocol.PROGRESS],
        dimensions=sorted(dimensions()),
        options=sorted(scenario_options()),
        code=os.path.dirname(os.path.realpath(serbench.__file__)),
    )


def checked(plan: runner.Plan) -> runner.Plan:
    """``plan`` once every backend, workload and scenario of it exists (SpecError naming the one
    that does not) and every dimension value is one its dimension takes (UsageError)."""
    known = dimensions()
    for field, values in plan.dimensions.items():
        if field not in known:
            raise UsageError(f"this serbench has no case dimension {field!r}")
        choices = known[field].choices
        unknown = [str(v) for v in values if choices is not None and v not in choices]
        if unknown:
            allowed = ", ".join(map(str, choices or ()))
            raise UsageError(f"{known[field].flag}: unknown {', '.join(unknown)}; {field}s: {allowed}")
    for spec in plan.backends:
        get_serializer(spec)
    for spec in plan.workloads:
        get_workload(spec)
    for name in plan.scenarios:
        get_scenario(name)
    return plan


def profile_of(message: protocol.Profile) -> Profile:
    """The profile a ``Setup`` names, each option read by its own ``parse``; UsageError."""
    if message.name not in PROFILES:
        raise UsageError(f"unknown profile {message.name!r}; profiles: {', '.join(PROFILES)}")
    options, parsed = scenario_options(), {}
    for key, text in message.options.items():
        if key not in options:
            raise UsageError(f"this serbench has no scenario option {key!r}")
        try:
            parsed[key] = options[key].parse(text)
        except ValueError as exc:
            raise UsageError(f"{options[key].flag}: {exc}") from None
    return PROFILES[message.name].with_options(**parsed)


def set_up(message: protocol.Setup) -> tuple[runner.Plan, Profile]:
    """The plan and profile of a ``Setup``, checked as ``serbench run`` checks its own."""
    plan = checked(runner.Plan(**{f: getattr(message.plan, f) for f in protocol.Plan.__struct_fields__}))
    profile = profile_of(message.profile)
    for name in plan.scenarios:
        get_scenario(name).check(profile)
    return plan, profile


def counts(profile: Profile) -> bool:
    """Whether ``profile`` asks for instruction counts."""
    return profile.options.get("measure") == "instructions"


def count(
    plan: runner.Plan,
    profile: Profile,
    argv: list[str],
    out: Path,
    backends: dict[str, Backend],
    on_case: Callable[[int, int, Case], None] | None = None,
) -> int:
    """Every case of ``plan`` counted in one measurer under callgrind (docs/instructions.md), its
    results in ``out/results.json``; that process's exit code (130 or 143 when it was
    interrupted or terminated). ``backends``: as checked here at full speed, and
    sent to it; ``on_case`` is called before each case.

    MeasurerError when it could not count, with what it said.
    """
    failure: list[str] = []

    def talk(proc, dumps: Path) -> None:
        client = protocol.Client(proc)
        try:
            if client.hello(None) is None:
                raise MeasurerError("ended before its hello")
            client.send(
                Setup(
                    protocol.plan_message(plan),
                    protocol.profile_message(profile),
                    argv,
                    counting=protocol.Counting(str(dumps), environment.accelerator()),
                    ask_backends=True,
                    progress=True,  # a case begins: the previous one's profiles are complete
                )
            )
            client.reply(Ready, None, backends=lambda specs: {s: backends[s] for s in specs})
            client.send(Measure(str(out)))
            counting: list[Case] = []

            def progress(p: Progress) -> None:
                if counting:
                    instructions.keep_profiles(dumps, instructions.profile_folder(out, counting.pop()))
                counting.append(p.case)
                if on_case:
                    on_case(p.index, p.total, p.case)

            client.reply(Measured, None, progress=progress)
            if counting:
                instructions.keep_profiles(dumps, instructions.profile_folder(out, counting.pop()))
        except MeasurerError as exc:
            failure.append(str(exc))

    code = instructions.run_under_callgrind([sys.executable, "-m", protocol.MODULE], talk)
    if failure and code not in (EXIT_INTERRUPTED, EXIT_TERMINATED):
        raise MeasurerError(f"counting instructions: {failure[0]} (exit code {code})")
    return code


def _relay(channel: protocol.Channel, plan: runner.Plan, profile: Profile, setup: Setup) -> int:
    """The counting side of a gate: backends checked here, every request counted by ``count``."""
    backends = runner.check_backends(sorted({case.backend for case in plan.cases()}))
    channel.send(Ready(plan.cases()))
    while (request := channel.receive()) is not None:
        if not isinstance(request, Measure):
            raise MeasurerError(f"{type(request).__name__} out of turn")
        if request.case is not None:
            channel.send(Failed(ONE_RUN_PER_SIDE))
            continue
        on_case = (lambda i, n, case: channel.send(Progress(i, n, case))) if setup.progress else None
        code = count(plan, profile, setup.argv, Path(request.out), backends, on_case)
        if code in (EXIT_INTERRUPTED, EXIT_TERMINATED):
            return code
        done = Measured(request.out) if code == 0 else Failed(f"the counting process exited with {code}")
        channel.send(done)
    return EXIT_OK


def serve(channel: protocol.Channel) -> int:
    """Hello, the setup, then requests until the client closes its end; the exit code."""
    channel.send(hello())
    setup = channel.receive()
    if setup is None:
        return EXIT_OK  # nothing asked
    if not isinstance(setup, Setup):
        raise MeasurerError(f"{type(setup).__name__} before the setup")
    if setup.counting is not None:
        instructions.counting_in(Path(setup.counting.dumps))
    plan, profile = set_up(setup)
    if counts(profile) and setup.counting is None:
        problem = instructions.cannot_launch()
        if problem is None:
            return _relay(channel, plan, profile, setup)
        print(instructions.wall_time_note(problem), file=sys.stderr)
    with runner.sigterm_as_interrupt():
        probed = setup.counting.accelerator if setup.counting else None
        runner.work(plan, profile, setup.argv, channel, setup.ask_backends, setup.progress, probed)
    return EXIT_OK


def protocol_channel() -> protocol.Channel:
    """The protocol's own copies of stdin and stdout; fd 0 then reads nothing and fd 1 writes to
    stderr, for everything else in this process and its forks."""
    reading, writing = os.dup(0), os.dup(1)
    nothing = os.open(os.devnull, os.O_RDONLY)
    os.dup2(nothing, 0)
    os.close(nothing)
    os.dup2(2, 1)
    return protocol.Channel(reading, writing, protocol.ToMeasurer)


def main() -> int:
    """Serve on this process's stdin and stdout; the exit code."""
    channel = protocol_channel()
    try:
        return serve(channel)
    except KeyboardInterrupt as exc:
        return EXIT_TERMINATED if isinstance(exc, Terminated) else EXIT_INTERRUPTED
    except (SerbenchError, SpecError) as exc:
        print(f"serbench measurer: error: {exc}", file=sys.stderr)
        with suppress(OSError):
            channel.send(Failed(str(exc)))
        return EXIT_USAGE


if __name__ == "__main__":
    code = main()
    if instructions.launched():  # everything is written; tearing torch down under valgrind takes seconds
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)
