"""The CI performance gate's measurement: a base revision against the working tree.

``measure`` takes each side's serbench code (``worktree``: base's checked out
in a temporary git worktree), measures both sides in interleaved rounds
(``rounds``) by measuring processes started for each round (``measurers``),
each case until its rows are settled (``stopping``),
merges each side's rounds into one ``Results`` whose metrics remember each
round's sample count (which is what pairs them), and adds instruction counts,
each under two layouts of the interpreter, where asked (``counting``). The
command, its options and the verdict are ``serbench.cli.gate``'s; why the gate
is shaped so is docs/gate.md's.
"""

from __future__ import annotations

import dataclasses
import subprocess
from collections.abc import Callable
from pathlib import Path

from serbench.gate.counting import add_counts, count_layouts
from serbench.gate.revision import Revision, Runtime
from serbench.gate.rounds import fresh_rounds
from serbench.gate.stopping import Stopping
from serbench.gate.worktree import serbench_code
from serbench.model import results
from serbench.model.errors import GateError
from serbench.model.profiles import Profile
from serbench.model.results import Results
from serbench.runner.matrix import Plan


def measure(
    repo: Path | None,
    base_ref: str | None,
    plan: Plan,
    profile: Profile,
    rounds: int,
    out: Path,
    log: Callable[[str], None],
    counting: tuple[Plan, Profile] | None = None,
    runtimes: tuple[Runtime, Runtime] = (Runtime(), Runtime()),
    stopping: Stopping | None = None,
) -> tuple[Results, Results]:
    """Base and head, each case of ``plan`` measured on both up to ``rounds`` times under
    ``profile`` — each until its rows are settled by ``stopping``'s thresholds, or every round
    without one;
    the merged results of base and of head, with instruction counts added when ``counting``
    (the plan and profile of the counting run) is given — or, with no rounds, the counts alone.
    Base runs ``base_ref``'s serbench (``serbench_code``; this one without a ref) under
    ``runtimes[0]``, head the working tree of ``repo`` under ``runtimes[1]``.

    GateError for anything that stops the measurement: a bad ref, git, a measuring process
    that stops or a run that takes too long, or no rounds and no counts.
    """
    try:
        with serbench_code(repo, base_ref, log) as codes:
            revisions = [
                Revision(label, code, plan, profile, runtime)
                for label, code, runtime in zip(("base", "head"), codes, runtimes, strict=True)
            ]
            for revision in revisions:
                if revision.runtime != Runtime():
                    log(f"gate: {revision.label} runs {revision.runtime.describe()}")
            timed = None
            if rounds:
                settled = stopping.settled_cases if stopping is not None else None
                base_runs, head_runs = fresh_rounds(revisions, rounds, out, log, settled_cases=settled)
                timed = results.merge(base_runs), results.merge(head_runs)
            counted = None
            if counting is not None:
                counters = [dataclasses.replace(r, plan=counting[0], profile=counting[1]) for r in revisions]
                counted = count_layouts(counters, out, log)
    except (subprocess.TimeoutExpired, OSError) as exc:
        raise GateError(str(exc)) from None
    if timed is None:
        if not counted:
            raise GateError("nothing measured: no counts and no rounds (--rounds N or --measure time)")
        return counted[0], counted[1]
    if counted:
        return add_counts(timed[0], counted[0]), add_counts(timed[1], counted[1])
    return timed
