"""One side of the gate: the serbench code it runs, what it measures, and under what runtime.

A ``Revision`` starts its side's processes with its code first on the path
(``PYTHONPATH`` and the working directory both point at it, and both come
before the editable install's finder), under its ``Runtime``: an interpreter
and a folder put first on its path (``--base-python``, ``--base-path`` and
head's). It also speaks for revisions from before ``serbench.runner.measurer``:
the ``serbench run`` options that give them the same plan (``run_options``),
and what their ``serbench run --help`` offers (``run_help``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from serbench.model.profiles import Profile
from serbench.runner import protocol
from serbench.runner.matrix import Plan
from serbench.runner.protocol import Setup
from serbench.scenarios import SCENARIOS, dimensions

RUN_TIMEOUT_S = 1800


def run_options(plan: Plan, profile: Profile) -> tuple[str, ...]:
    """``serbench run``'s options for ``plan`` and ``profile``: what a revision from before
    ``serbench.runner.measurer`` is given, and the command line a measurer's results record.
    Only what was chosen: a dimension or option left at its default is not named, so a
    revision from before it still runs."""
    options = ["--backends", ",".join(plan.backends), "--workloads", ",".join(plan.workloads)]
    options += ["--scenarios", ",".join(plan.scenarios)]
    known = dimensions()
    for field, values in plan.dimensions.items():
        options += [known[field].flag, ",".join(map(str, values))]
    flags = {option.key: option.flag for scenario in SCENARIOS.values() for option in scenario.options}
    for key, value in profile.options.items():
        options += [flags[key], protocol.option_text(value)]
    if profile.name != "quick":
        options.append(f"--{profile.name}")
    return tuple(options)


@dataclass(frozen=True)
class Runtime:
    """What one side runs serbench under: its interpreter, and a folder put first on its path
    (``--base-python`` / ``--base-path`` and head's) — how a change to another package, two
    vLLM checkouts or two venvs, is gated with one serbench."""

    python: str = sys.executable
    path: Path | None = None

    def describe(self) -> str:
        """``PYTHON`` and, where given, ``with PATH first on its path``."""
        return self.python + (f", with {self.path} first on its path" if self.path else "")


@dataclass(frozen=True)
class Revision:
    """One side of the comparison: a label (base or head), the folder whose serbench runs, what
    it measures there, and the interpreter and path it runs under."""

    label: str
    code: Path
    plan: Plan
    profile: Profile
    runtime: Runtime = Runtime()
    environment: tuple[tuple[str, str], ...] = ()  # variables added to its processes' environment

    def start(
        self, command: Sequence[str], cpus: frozenset[int] | None = None, **popen: Any
    ) -> subprocess.Popen:
        """``python COMMAND`` with this side's runtime path and code first on the path and its
        ``environment`` added, pinned to ``cpus`` when given."""
        first = [self.runtime.path, self.code, os.environ.get("PYTHONPATH")]
        path = os.pathsep.join(str(p) for p in first if p)
        env = {**os.environ, **dict(self.environment), "PYTHONPATH": path}
        pin = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
        command = [self.runtime.python, *command]
        return subprocess.Popen(command, cwd=self.code, env=env, preexec_fn=pin, **popen)

    def measurer_module(self) -> str:
        """The module this side's serbench measures in: ``serbench.runner.measurer``, or
        ``serbench.worker`` in a revision from before serbench's folders by concern."""
        return protocol.MODULE if (self.code / "serbench/runner/measurer.py").exists() else "serbench.worker"

    def run(self, *extra: str, cpus: frozenset[int] | None = None, **popen: Any) -> subprocess.Popen:
        """``python -m serbench run`` with this side's plan and profile as options (``run_options``):
        for a revision from before ``serbench.runner.measurer``."""
        command = ["-m", "serbench", "run", *run_options(self.plan, self.profile), *extra]
        return self.start(command, cpus, **popen)

    def setup(self, ask_backends: bool = False) -> Setup:
        """The ``Setup`` message of this side's measurer; ``ask_backends``: it asks for its
        checked backends instead of checking them (``ProtocolMeasurer``'s ``backends``)."""
        argv = ["run", *run_options(self.plan, self.profile)]
        plan, profile = protocol.plan_message(self.plan), protocol.profile_message(self.profile)
        return Setup(plan, profile, argv, ask_backends=ask_backends)


_HELP: dict[Path, str] = {}  # code folder → its `serbench run --help`


def run_help(revisions: Sequence[Revision]) -> list[str]:
    """Each revision's ``serbench run --help``, read only for a revision without
    ``serbench.runner.measurer``: it says whether it has ``--worker`` and ``--measure`` (older
    revisions lack them). Those not asked before are asked all at once: each answer is an
    interpreter start with torch's import."""
    unasked = {r.code: r for r in revisions if r.code not in _HELP}
    quiet = {"stdout": subprocess.PIPE, "stderr": subprocess.DEVNULL, "text": True}
    asking = {code: r.start(["-m", "serbench", "run", "--help"], **quiet) for code, r in unasked.items()}
    for code, proc in asking.items():
        _HELP[code] = proc.communicate(timeout=RUN_TIMEOUT_S)[0]
    return [_HELP[r.code] for r in revisions]
