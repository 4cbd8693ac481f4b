"""The gate's timed rounds: every case measured on both sides back to back, round after round.

The side that goes first alternates from case to case and from round to round.
On a shared machine whose speed changes every second or so, the two halves of
such a pair mostly see the same machine, and ``serbench.analysis.compare``
takes the median of the per-pair ratios, so the few pairs that straddle a
change are outvoted. Each round has measuring processes started for it
(``fresh_rounds``): a process keeps for its whole life some of what it draws
when it starts, and with one per side for the whole gate that draw would be a
difference between base and head that no number of rounds averages away
(docs/measurements/gate-verdicts.md; pyperf spreads its samples over many
processes for the same reason). Given a stopping rule (``gate.stopping``), a
case whose rows are settled is measured no more; the rounds end when none is open.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Sequence
from pathlib import Path

from serbench.gate.measurers import Measurer, measurers
from serbench.gate.revision import Revision
from serbench.model.results import Backend, Case, Results


def _units(sides: Sequence[Measurer]) -> list[Case | None]:
    """What one request measures: each case in turn when every side can measure one case
    (their cases, in order, without repeats), else everything at once."""
    if any(m.cases is None for m in sides):
        return [None]
    return list(dict.fromkeys(case for m in sides for case in m.cases))


def one_round(
    sides: Sequence[Measurer], r: int, out: Path, settled: Collection[Case] = ()
) -> list[list[Results]]:
    """Round ``r``: every case but the ``settled`` ones measured on every side, back to back, the
    side that goes first alternating from case to case and from round to round (per round only,
    where a side cannot measure one case). Each side's results, in order; raw measurements stay
    under ``out/<label>-<round>[-<case>]/``. A case one side lacks is measured on the other only."""
    runs: list[list[Results]] = [[] for _ in sides]
    for k, unit in enumerate(_units(sides), start=1):
        if unit in settled:
            continue
        order = list(enumerate(sides))
        for index, measurer in order if (r + k) % 2 == 0 else order[::-1]:
            if unit is None or unit in measurer.cases:
                name = f"{measurer.revision.label}-{r}" + (f"-{k}" if unit else "")
                runs[index].append(measurer.measure(out / name, unit))
    return runs


def fresh_rounds(
    revisions: Sequence[Revision],
    rounds: int,
    out: Path,
    log: Callable[[str], None] = print,
    on_round: Callable[[list[list[Results]]], None] | None = None,
    settled_cases: Callable[[list[list[Results]], int], set[Case]] | None = None,
) -> list[list[Results]]:
    """Every revision measured up to ``rounds`` times (``one_round``), each round by measuring
    processes started for it (``measurers``), so that what a process draws when it starts
    changes from round to round and the paired ratios and their interval see it. After each
    round ``settled_cases`` (``stopping.Stopping.settled_cases``) names the cases that need no
    more of the ``rounds``; they are skipped, and the rounds end once every case is. Each side's results, in
    order; ``on_round`` sees them after every round, so a caller can keep the rounds done so
    far when a later one is stopped."""
    runs: list[list[Results]] = [[] for _ in revisions]
    checked: list[dict[str, Backend] | None] = [None] * len(revisions)
    settled: set[Case] = set()
    for r in range(1, rounds + 1):
        start = time.perf_counter()
        with measurers(revisions, out, log if r == 1 else _quiet, checked) as sides:
            for side, measured in zip(runs, one_round(sides, r, out, settled), strict=True):
                side.extend(measured)
        if r == 1:  # the first round's measurers checked; every later one is handed that
            checked = [checked_backends(side) for side in runs]
        cases = {record.case for side in runs for data in side for record in data.records}
        settled = settled_cases(runs, rounds) if settled_cases is not None else set()
        still = f", {len(cases - settled)} of {len(cases)} case(s) open" if settled_cases else ""
        log(f"round {r}/{rounds}: {time.perf_counter() - start:.1f} s{still}")
        if on_round is not None:
            on_round(runs)
        if cases and cases <= settled:
            break
    return runs


def checked_backends(measured: Sequence[Results]) -> dict[str, Backend] | None:
    """The backends as a side's measurements so far recorded them (its first round's measurer
    checked every backend of its cases), or None where a case's backend is not among them:
    the later rounds' measurers run the same code on the same specimens, so they are handed
    these instead of checking again."""
    backends = {spec: backend for data in measured for spec, backend in data.backends.items()}
    used = {record.backend for data in measured for record in data.records}
    return backends if backends and used <= backends.keys() else None


def _quiet(message: str) -> None:
    """A log that says nothing: the later rounds' measurers repeat the first round's notes."""
