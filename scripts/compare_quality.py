"""Measure ``serbench compare`` on plain runs: false alarms of A/A comparisons.

Runs ``serbench run`` (one plain run each, as a user would, nothing paired)
RUNS times on the same code, then compares each run with the next one —
RUNS - 1 A/A comparisons of two plain runs of the same commit — with
``serbench compare``'s defaults, and counts

* alarms: comparisons whose exit code is 1 (what would fail a script or CI);
* indicative flags: rows labelled slower beyond tolerance but only indicative
  (one process per side: the run-to-run spread is unmeasured), shown and not
  failing.

    python scripts/compare_quality.py --runs 21 --out reports/compare-quality
    python scripts/compare_quality.py --analyze reports/compare-quality   # re-score stored runs

Stored runs are kept and reused: a second call only adds the missing ones.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

from serbench import cli as commands
from serbench.analysis import verdicts
from serbench.analysis.verdicts import Verdict
from serbench.model import results

DEFAULT_RUN = ("--scenarios", "micro")


def measure(out: Path, runs: int, run_args: list[str]) -> None:
    """``serbench run`` into ``out/run-NN`` for each run not stored yet (one at a time)."""
    for n in range(runs):
        folder = out / f"run-{n + 1:02d}"
        if (folder / "results.json").exists() and results.load(folder / "results.json").complete:
            continue
        load = os.getloadavg()[0]
        command = [sys.executable, "-m", "serbench", "run", *run_args, "--out", str(folder), "--force"]
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        print(f"run {n + 1}/{runs} done (load before {load:.1f})", file=sys.stderr)


def score(out: Path) -> dict:
    """Compare each stored run with the next; alarms (exit 1) and indicative flags per comparison."""
    paths = sorted(out.glob("run-*/results.json"))
    rows = []
    for base, head in itertools.pairwise(paths):
        with open(os.devnull, "w") as sink:
            stdout, sys.stdout = sys.stdout, sink
            try:
                code = commands.main(["compare", str(base), str(head)])
            finally:
                sys.stdout = stdout
        comparison = verdicts.compare(results.load(base), results.load(head))
        flagged = [r for r in comparison.rows if r.verdict == Verdict.SLOWER_INDICATIVE]
        rows.append({"base": base.parent.name, "head": head.parent.name, "exit": code, "flags": len(flagged)})
        print(f"{base.parent.name} → {head.parent.name}: exit {code}, {len(flagged)} indicative slower rows")
    alarms = sum(r["exit"] == 1 for r in rows)
    summary = {"comparisons": len(rows), "alarms": alarms, "rows": rows}
    print(f"A/A compare of plain runs: {alarms}/{len(rows)} false alarms (exit 1)")
    print(f"indicative 'slower' rows per comparison: {[r['flags'] for r in rows]}")
    results.write_text_atomic(out / "summary.json", json.dumps(summary, indent=1, allow_nan=False))
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=21, help="plain runs (comparisons = runs - 1)")
    parser.add_argument("--out", default="reports/compare-quality")
    parser.add_argument("--analyze", metavar="DIR", help="only re-score the runs stored in DIR")
    parser.add_argument(
        "run_args", nargs="*", help=f"arguments of each serbench run (default: {' '.join(DEFAULT_RUN)})"
    )
    args = parser.parse_args(argv)
    if args.analyze:
        score(Path(args.analyze))
        return 0
    out = Path(args.out)
    measure(out, args.runs, args.run_args or list(DEFAULT_RUN))
    score(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
