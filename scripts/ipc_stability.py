"""Do two runs of the same commit agree? The ipc payload cases' TTFT and ingress medians, run against run.

Runs the ipc scenario of the default quick matrix twice (``serbench run
--scenarios ipc``; every case runs in a fresh forked process of its own, so the
cases of other scenarios only change what else the machine did meanwhile), or
reads two results files given with ``--results``, and prints for every payload
case (a workload with tensor bytes) the disagreement of the two medians —
larger / smaller - 1 — of ``ttft_s`` and ``ingress_s``, worst first, with the
load average before and after each run. Exit 1 when the worst exceeds
``--tolerance`` (15 % by default, issue 15's bound).

    python scripts/ipc_stability.py                       # two fresh runs (~1-2 min each)
    python scripts/ipc_stability.py --results A.json B.json
    python scripts/ipc_stability.py -- --backends flat-mmk,pickle   # extra `serbench run` arguments
    python scripts/ipc_stability.py -- --scenarios micro,ipc,memory  # two whole default runs
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from serbench.results import load
from serbench.text import table

METRICS = ("ttft_s", "ingress_s")


def run_once(folder: Path, extra: list[str], scenario: str = "ipc") -> Path:
    """One ``serbench run --scenarios SCENARIO`` into ``folder``; prints its wall time and the
    load average around it."""
    before, start = os.getloadavg(), time.perf_counter()
    command = [sys.executable, "-m", "serbench", "run", "--scenarios", scenario, "--out", str(folder), *extra]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    wall, after = time.perf_counter() - start, os.getloadavg()
    print(f"{folder}: {wall:.0f} s, load average {before[0]:.2f} before, {after[0]:.2f} after (1 min)")
    return folder / "results.json"


def payload_medians(path: Path) -> dict[tuple[str, str, str], float]:
    """(backend as a table row shows it, workload, metric) → median, for the payload cases of a
    results file."""
    out = {}
    for rec in load(path).of("ipc"):
        if rec.info is not None and rec.info.payload_bytes:
            for name in METRICS:
                if name in rec.metrics:
                    out[rec.row, rec.workload, name] = rec.metrics[name].median
    return out


def disagreements(a: dict, b: dict) -> list[tuple[tuple[str, str, str], float, float, float]]:
    """(case, median a, median b, larger / smaller - 1) for every case in both, worst first."""
    rows = [(key, a[key], b[key], max(a[key], b[key]) / min(a[key], b[key]) - 1) for key in a if key in b]
    return sorted(rows, key=lambda row: -row[3])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", nargs=2, type=Path, metavar="RESULTS.json", help="compare these")
    parser.add_argument("--tolerance", type=float, default=0.15, help="worst allowed (default 0.15)")
    parser.add_argument("extra", nargs="*", help="after --: more `serbench run` arguments")
    args = parser.parse_args(argv)
    if args.results:
        first, second = args.results
    else:
        base = Path(tempfile.mkdtemp(prefix="serbench-stability-"))
        first, second = (run_once(base / name, args.extra) for name in ("a", "b"))
    rows = disagreements(payload_medians(first), payload_medians(second))
    if not rows:
        print("no payload case in both runs", file=sys.stderr)
        return 2
    cells = [
        [f"{b} × {w}", name, f"{x * 1e3:.2f}", f"{y * 1e3:.2f}", f"{d:.1%}"] for (b, w, name), x, y, d in rows
    ]
    print(table(["case", "metric", "run 1 (ms)", "run 2 (ms)", "disagreement"], cells))
    (backend, workload, name), _, _, worst = rows[0]
    within = sum(d <= args.tolerance for *_, d in rows)
    print(
        f"\nworst disagreement: {worst:.1%} ({backend} × {workload}, {name}); "
        f"{within} of {len(rows)} medians within {args.tolerance:.0%}"
    )
    return 0 if worst <= args.tolerance else 1


if __name__ == "__main__":
    sys.exit(main())
