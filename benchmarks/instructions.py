"""Instructions per encode and decode under callgrind, per commit: the history without the noise.

``setup_cache`` runs ``serbench run --scenarios micro --measure instructions``
over the grid, once per commit: one valgrind process counting every case (see
docs/instructions.md). The numbers repeat to within 0.1 % from run to run, so
a step in these plots is the code's. A commit older than ``--measure``, or a
machine without valgrind, shows the suite as skipped (n/a), not failed.

Its workloads are the grid's unless ``SERBENCH_ASV_COUNTED_WORKLOADS`` names
others: under valgrind a workload that makes tensors costs half a minute of
torch import before the first count, which the asv test spares itself by
counting text alone.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from .common import BACKENDS, LABELS, WORKLOADS, ScenarioTracks, grid

COUNTED = grid("SERBENCH_ASV_COUNTED_WORKLOADS", WORKLOADS)

COUNTS = ("encode_instructions", "decode_instructions")


def count() -> dict:
    """(backend, workload) → the case's metrics, or the reason it failed; empty without counts."""
    with tempfile.TemporaryDirectory(prefix="serbench-asv-") as out:
        chosen = ["--backends", ",".join(BACKENDS), "--workloads", ",".join(COUNTED)]
        command = [sys.executable, "-m", "serbench", "run", "--scenarios", "micro", *chosen]
        command += ["--measure", "instructions", "--out", out]
        if subprocess.run(command, capture_output=True).returncode:
            return {}  # no --measure in this commit
        records = json.loads((Path(out) / "results.json").read_text())["records"]
    outcomes = {(_label(r), r["workload"]): r["error"] or _medians(r["metrics"]) for r in records}
    counted = any(isinstance(o, dict) and COUNTS[0] in o for o in outcomes.values())
    return outcomes if counted else {}  # valgrind missing: wall time only, nothing to track


def _label(record: dict) -> str:
    """A record's backend parameter, from either schema: ``spec@transport`` where schema 1
    folded the transport in, else the spec, marked when schema 2 names another transport."""
    transport = record.get("transport")
    return record["backend"] + (f"@{transport}" if transport not in (None, "ipc") else "")


def _medians(metrics: dict) -> dict[str, float]:
    return {name: m["median"] for name, m in metrics.items()}


class Instructions(ScenarioTracks):
    scenario = "micro"
    params = [LABELS, COUNTED]

    def setup_cache(self) -> dict:
        return count()

    def setup(self, cache: dict, backend: str, workload: str) -> None:
        if not cache:
            raise NotImplementedError("no instruction counts: a commit before --measure, or no valgrind")
        super().setup(cache, backend, workload)

    setup_cache.timeout = 3600

    def track_encode_instructions(self, cache: dict, backend: str, workload: str) -> float:
        return self.median(cache, backend, workload, "encode_instructions")

    track_encode_instructions.unit = "instructions"

    def track_decode_instructions(self, cache: dict, backend: str, workload: str) -> float:
        return self.median(cache, backend, workload, "decode_instructions")

    track_decode_instructions.unit = "instructions"
