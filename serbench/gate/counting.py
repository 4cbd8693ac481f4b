"""The gate's instruction counts (``--measure instructions``, ``serbench.probes.instructions``).

After the timed rounds, one measuring process per side, set up with the
counting profile, counts every case in one valgrind process of its own
(``serbench.runner.measurer.count``), both sides at once, each on a CPU of its
own (``cpus.counting_cpu``). A count repeats exactly in one layout of the
interpreter, but an unrelated change can move it by shifting that layout, so
``count_layouts`` counts every case under two (``LAYOUTS``) and keeps both
counts: their spread is the count's band (``analysis.verdicts``). A revision
from before ``serbench.runner.measurer`` counts by ``serbench run --measure
instructions``. The counts are then added to the timed results (``add_counts``).
"""

from __future__ import annotations

import dataclasses
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import msgspec

from serbench.gate.cpus import counting_cpu
from serbench.gate.measurers import OneShotMeasurer, ProtocolMeasurer, close_all, greet_all
from serbench.gate.revision import Revision, run_help
from serbench.model import results
from serbench.model.results import Results
from serbench.probes import instructions
from serbench.runner import protocol
from serbench.runtime.isolation import end_trees

COUNTING_GRACE_S = 20.0  # for an ended counting run to stop valgrind, which runs its code slowly
PADDING_VARIABLE = "SERBENCH_LAYOUT_PADDING"  # read by nothing: its length moves the stack


@dataclass(frozen=True)
class Layout:
    """One layout of the interpreter a case is counted under: its hash seed (every string-keyed
    table: dicts, the type method cache's names), how long an unused environment variable is
    (where the stack starts), and glibc's heap margin (``top_pad``, "" for glibc's own: whether
    a growing buffer's realloc extends in place or moves)."""

    hash_seed: str
    padding: int
    top_pad: str

    def variables(self) -> tuple[tuple[str, str], ...]:
        """The environment that sets this layout (``instructions.counting_environment`` reads the
        seed and the margin)."""
        return (
            (instructions.HASH_SEED_VARIABLE, self.hash_seed),
            (PADDING_VARIABLE, "x" * self.padding),
            (instructions.TOP_PAD_VARIABLE, self.top_pad),
        )


# Two seeds, two environment sizes and two heap margins, as Mytkowicz et al. (ASPLOS 2009) perturb
# a layout: a count that differs between them moves with the layout, not with the code measured. The
# margin sees a realloc that a change elsewhere made extend in place instead of moving, which the
# other two did not (docs/measurements/2026-12-08-layouts.md).
LAYOUTS = (Layout(instructions.HASH_SEED, 0, ""), Layout("1", 1001, "0"))


def count_layouts(
    revisions: Sequence[Revision], out: Path, log: Callable[[str], None] = print
) -> list[Results] | None:
    """Every case of each revision counted under each of ``LAYOUTS`` (``count``), the first
    layout's folders named as a single count's, the others' suffixed ``-layout-N``; each
    side's counts merged, a count's values one per layout. None where a side cannot count."""
    counted = []
    for k, layout in enumerate(LAYOUTS, start=1):
        sides = [dataclasses.replace(r, environment=(*r.environment, *layout.variables())) for r in revisions]
        one = count(sides, out, log, "" if k == 1 else f"-layout-{k}")
        if one is None:
            return None
        counted.append(one)
    return [results.merge(list(side)) for side in zip(*counted, strict=True)]


def count(
    revisions: Sequence[Revision], out: Path, log: Callable[[str], None] = print, suffix: str = ""
) -> list[Results] | None:
    """Every case of each revision counted once (their profiles ask for instructions), the
    revisions at once, each on a CPU of its own where there are several, into
    ``out/<label>-instructions<suffix>/``; their results, or None (with a note) when a side
    cannot count (a revision older than instruction counts)."""
    started: list[ProtocolMeasurer] = []
    running: list[subprocess.Popen] = []
    try:
        for i, revision in enumerate(revisions):
            log_file = out / f"{revision.label}-instructions{suffix}.log"
            started.append(ProtocolMeasurer(revision, log_file, counting_cpu(i)))
        running = [measurer.proc for measurer in started]
        sides: list[ProtocolMeasurer | OneShotMeasurer] = list(started)
        older_sides = greet_all(started)
        older = [revisions[i] for i in older_sides]
        newer = [measurer for i, measurer in enumerate(started) if i not in older_sides]
        if not all("--measure" in text for text in run_help(older)) or not all(
            protocol.INSTRUCTIONS in side.hello.capabilities for side in newer
        ):
            log("note: a revision predates `serbench run --measure`: instructions not counted")
            close_all(sides)
            return None
        start = time.perf_counter()
        folders = [out / f"{revision.label}-instructions{suffix}" for revision in revisions]
        handles: list[subprocess.Popen | None] = [None] * len(sides)
        for i in older_sides:  # started first: a measurer is asked once its backends are checked
            log_file = out / f"{revisions[i].label}-instructions{suffix}.log"
            sides[i] = OneShotMeasurer(revisions[i], log_file, counting_cpu(i))
            handles[i] = sides[i].start(folders[i])
            running.append(handles[i])
        for i, side in enumerate(sides):
            if isinstance(side, ProtocolMeasurer):
                side.ready().request(folders[i])
        counted = [
            side.result(folder) if handle is None else side.finish(handle, folder)
            for side, handle, folder in zip(sides, handles, folders, strict=True)
        ]
        close_all(sides)
    finally:  # ended with SIGTERM first, so that each removes its dump folder
        end_trees([proc.pid for proc in running if proc.poll() is None], COUNTING_GRACE_S)
        for proc in running:
            proc.wait()
    log(f"instructions counted: {time.perf_counter() - start:.1f} s")
    return counted


def add_counts(timed: Results, counted: Results) -> Results:
    """``timed`` with the metrics that only ``counted`` has added to each of its cases; a case
    whose count failed fails (``serbench compare`` then says whether it did on one side only)."""
    counts = counted.by_case()
    records = []
    for rec in timed.records:
        other = counts.get(rec.case)
        if other is not None and rec.ok:
            if not other.ok:
                rec = msgspec.structs.replace(rec, error=f"counting instructions: {other.error}")
            else:
                rec = msgspec.structs.replace(rec, metrics={**other.metrics, **rec.metrics})
        records.append(rec)
    return msgspec.structs.replace(timed, records=records)
