"""Do two runs of the same commit agree? The fanout scenario's medians, run against run.

Runs ``serbench run --scenarios fanout`` twice with the given arguments (or
reads two results files given with ``--results``) and prints, for every case
with at most ``--max-workers`` workers, the disagreement of the two medians —
larger / smaller - 1 — of the sampled fanout metrics, worst first, with the
load average around each run. Exit 1 when the worst exceeds ``--tolerance``
(15 % by default, issue 30's bound).

    python scripts/fanout_stability.py -- --workers 1,2 --transport zmq-each,shm-ring \
        --backends msgspec-frombuffer,pickle --workloads images-8,text-sonnet
    python scripts/fanout_stability.py --results A/results.json B/results.json
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from ipc_stability import run_once  # scripts/ is on the path of a script run from it

from serbench.results import load
from serbench.text import table

METRICS = ("fanout_s", "fanout_decode_s", "core_cpu_s")


def medians(path: Path, max_workers: int) -> dict[tuple[str, str, str], float]:
    out = {}
    for rec in load(path).of("fanout"):
        if rec.ok and rec.workers is not None and rec.workers <= max_workers:
            for name in METRICS:
                if name in rec.metrics:
                    out[rec.row, rec.workload, name] = rec.metrics[name].median
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", nargs=2, type=Path, metavar="FILE")
    parser.add_argument("--tolerance", type=float, default=0.15)
    parser.add_argument("--max-workers", type=int, default=2)
    parser.add_argument("extra", nargs="*", help="arguments for `serbench run` (after --)")
    args = parser.parse_args()
    if args.results:
        a, b = args.results
    else:
        folder = Path(tempfile.mkdtemp(prefix="serbench-fanout-stability-"))
        a, b = run_once(folder / "a", args.extra, "fanout"), run_once(folder / "b", args.extra, "fanout")
    first, second = medians(a, args.max_workers), medians(b, args.max_workers)
    rows = [
        (k, first[k], second[k], max(first[k], second[k]) / min(first[k], second[k]) - 1)
        for k in first
        if k in second
    ]
    rows.sort(key=lambda row: -row[3])
    body = [
        [row, workload, name, f"{x * 1e3:.3f}", f"{y * 1e3:.3f}", f"{d:.1%}"]
        for (row, workload, name), x, y, d in rows
    ]
    print(table(["case", "workload", "metric", "A ms", "B ms", "disagree"], body))
    worst = rows[0][3] if rows else 0.0
    print(f"worst disagreement {worst:.1%} (tolerance {args.tolerance:.0%}) over {len(rows)} medians")
    return 1 if worst > args.tolerance else 0


if __name__ == "__main__":
    sys.exit(main())
