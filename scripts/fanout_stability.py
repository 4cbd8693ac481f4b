"""Do two runs of the same commit agree? The fanout scenario's medians, run against run.

Runs ``serbench run --scenarios fanout`` twice with the given arguments (or
reads two results files given with ``--results``) and prints, for every case
with at most ``--max-workers`` workers, the disagreement of the two medians —
larger / smaller - 1 — of the sampled fanout metrics, worst first, with the
load average around each run; then, for information, the within-run ratios
between every two backends of a case, run against run (``run_stability``'s:
what a ranking and a decision read). Exit 1 when the worst median disagreement
exceeds ``--tolerance`` (15 % by default, issue 30's bound).

    python scripts/fanout_stability.py -- --workers 1,2 --transport zmq-each,shm-ring \
        --backends msgspec-frombuffer,pickle --workloads images-8,text-sonnet
    python scripts/fanout_stability.py --results A/results.json B/results.json
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from run_stability import disagreements, run_once, within_run_ratios  # scripts/ is on the path

from serbench.model.results import Record, load
from serbench.present.terminal import table

METRICS = ("fanout_s", "fanout_decode_s", "core_cpu_s")


def records(path: Path, max_workers: int) -> list[Record]:
    """The fanout cases of a results file that measured, with at most ``max_workers`` workers."""
    return [
        rec
        for rec in load(path).of("fanout")
        if rec.ok and rec.workers is not None and rec.workers <= max_workers
    ]


def medians(path: Path, max_workers: int) -> dict[tuple[str, str, str], float]:
    """(row, workload, metric) → median of the sampled fanout metrics of those cases."""
    return {
        (rec.row, rec.workload, name): rec.metrics[name].median
        for rec in records(path, max_workers)
        for name in METRICS
        if name in rec.metrics
    }


def _ratios_table(first: Path, second: Path, max_workers: int, tolerance: float) -> None:
    """Within-run ratios between every two backends of a case, run against run."""
    runs = [within_run_ratios(records(path, max_workers), METRICS) for path in (first, second)]
    rows = disagreements(*({key: ratio.value for key, ratio in run.items()} for run in runs))
    body = [
        [f"{label} × {w}", name, f"{x:.3f}", f"{y:.3f}", f"{d:.1%}"] for (label, w, name), x, y, d in rows
    ]
    print("\nwithin-run ratios between every two backends (for information):")
    print(table(["case", "metric", "A (×)", "B (×)", "disagree"], body))
    within = sum(d <= tolerance for *_, d in rows)
    print(f"{within} of {len(rows)} ratios within {tolerance:.0%}")


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
        a, b = (run_once(folder / name, ["--scenarios", "fanout", *args.extra]) for name in ("a", "b"))
    rows = disagreements(medians(a, args.max_workers), medians(b, args.max_workers))
    body = [
        [row, workload, name, f"{x * 1e3:.3f}", f"{y * 1e3:.3f}", f"{d:.1%}"]
        for (row, workload, name), x, y, d in rows
    ]
    print(table(["case", "workload", "metric", "A ms", "B ms", "disagree"], body))
    worst = rows[0][3] if rows else 0.0
    print(f"worst disagreement {worst:.1%} (tolerance {args.tolerance:.0%}) over {len(rows)} medians")
    _ratios_table(a, b, args.max_workers, args.tolerance)
    return 1 if worst > args.tolerance else 0


if __name__ == "__main__":
    sys.exit(main())
