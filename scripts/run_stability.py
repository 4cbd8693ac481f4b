"""Do two runs of the same commit agree? Their decisions, and every between-backend ratio, run against run.

Runs ``serbench run`` twice (the default matrix, plus any arguments after ``--``; every case
runs in a fresh process of its own), or reads two results files given with ``--results``.
It prints

* both runs' decisions (the set of safe backends each names per shape and scenario), with the
  load average around each run;
* per scenario, the within-run ratio of its headline metric between every two backends of the
  same workload and other dimensions (``--reference NAME``: each backend's to that one's
  instead, or ``best``: to each run's fastest), paired by round where both were measured in
  the same interleaved rounds (``estimates.ratio_estimate``, as a decision reads them), with
  its 95 % interval in each run; whether each run's ratio lies inside the other run's
  interval (a ratio of one reading a side, memory's, has none: it must agree within what its
  decision calls a tie, ``ranking.tie_tolerance``); and how far apart the two are.

What it vouches for, and its exit status (1 when either fails): the same decisions, and each
ratio inside the other run's interval. The share of ratios within ``--tolerance`` of each other
(10 % by default) is reported as a figure: on a shared machine it follows the load.

    python scripts/run_stability.py                          # two fresh default runs
    python scripts/run_stability.py --results A.json B.json
    python scripts/run_stability.py --reference best --results A.json B.json
    python scripts/run_stability.py -- --scenarios ipc --backends flat-mmk,pickle
"""

from __future__ import annotations

import argparse
import itertools
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import NamedTuple

import msgspec

from serbench.analysis import decision
from serbench.analysis.estimates import center_of, paired_rounds, ratio_estimate
from serbench.analysis.ranking import headline_metric, tie_tolerance
from serbench.model.results import Case, Record, load
from serbench.present.terminal import table

ALL = "all"
BEST = "best"


def run_once(folder: Path, extra: list[str]) -> Path:
    """One ``serbench run`` (with ``extra`` arguments) into ``folder``; prints its wall time and
    the load average around it."""
    before, start = os.getloadavg(), time.perf_counter()
    command = [sys.executable, "-m", "serbench", "run", "--out", str(folder), *extra]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    wall, after = time.perf_counter() - start, os.getloadavg()
    print(f"{folder}: {wall:.0f} s, load average {before[0]:.2f} before, {after[0]:.2f} after (1 min)")
    return folder / "results.json"


def headline_records(path: Path) -> tuple[list[Record], list[str]]:
    """The records of a results file that measured, and each scenario's headline metric's name
    (one per scenario that has one)."""
    data = load(path)
    names = [headline_metric(data, scenario) for scenario in data.scenarios()]
    return [rec for rec in data.records if rec.ok], [name for name in names if name is not None]


def _ratio_pairs(by_backend: dict[str, Record], name: str, reference: str) -> list[tuple[Record, Record]]:
    """(base, head) records of one group: every two backends once (``ALL``, the base first by
    name), else each backend over the reference (``BEST``: the one of lowest median)."""
    if reference == ALL:
        return list(itertools.combinations([by_backend[spec] for spec in sorted(by_backend)], 2))
    chosen = reference
    if reference == BEST:
        chosen = min(by_backend, key=lambda spec: by_backend[spec].metrics[name].median)
    if chosen not in by_backend:
        return []
    return [(by_backend[chosen], rec) for rec in by_backend.values() if rec.backend != chosen]


class Ratio(NamedTuple):
    """A within-run ratio, its 95 % interval (None where it has none) and the rounds that pair it
    (0: unpaired)."""

    value: float
    low: float | None
    high: float | None
    pairs: int

    def interval(self) -> str:
        return "-" if self.low is None else f"[{self.low:.3f}, {self.high:.3f}]"

    def holds(self, value: float) -> bool:
        """Whether ``value`` lies inside this ratio's interval; never without one."""
        return self.low is not None and self.low <= value <= self.high


def each_inside(a: Ratio, b: Ratio, name: str) -> bool:
    """Whether each run's ratio lies inside the other run's interval: the two runs then tell the
    same ratio within what each one's own noise allows. Two ratios without an interval (one
    reading a side) agree within metric ``name``'s tie without one (``ranking.tie_tolerance``)."""
    if a.low is None and b.low is None:
        return abs(math.log(a.value / b.value)) <= math.log1p(tie_tolerance(name))
    return a.holds(b.value) and b.holds(a.value)


def within_run_ratios(
    records: Iterable[Record], metrics: Sequence[str], reference: str = ALL
) -> dict[tuple[str, str, str], Ratio]:
    """(ratio's label, case less its backend, metric) → its ``Ratio``, for every two of ``records``
    of the same case but for the backend that ``_ratio_pairs`` names: the label is the head's
    row, ``head / base`` with ``ALL``."""
    groups: dict[tuple[Case, str], dict[str, Record]] = {}
    for rec in records:
        for name in (n for n in metrics if n in rec.metrics):
            groups.setdefault((msgspec.structs.replace(rec.case, backend=""), name), {})[rec.backend] = rec
    out = {}
    for (group, name), by_backend in groups.items():
        for base, head in _ratio_pairs(by_backend, name, reference):
            pair = base.metrics[name], head.metrics[name]
            ratio, low, high = ratio_estimate(*pair, pooled=True, center=center_of(name))
            if ratio is not None:
                label = f"{head.row} / {base.backend}" if reference == ALL else head.row
                where = f"{group.scenario} {group.workload}"
                out[label, where, name] = Ratio(ratio, low, high, paired_rounds(*pair))
    return out


def disagreements(a: dict, b: dict) -> list[tuple[tuple[str, str, str], float, float, float]]:
    """(key, value a, value b, larger / smaller - 1) for every key in both, worst first."""
    rows = [(key, a[key], b[key], max(a[key], b[key]) / min(a[key], b[key]) - 1) for key in a if key in b]
    return sorted(rows, key=lambda row: -row[3])


def chosen_sets(path: Path) -> dict[tuple[str, str], frozenset[str]]:
    """Per (shape, scenario) of a run's decision, the safe backends it names (order ignored:
    a tie is a set)."""
    return {
        (d.shape, d.where): frozenset(s.row.row for s in d.chosen) for d in decision.decisions(load(path))
    }


def _decisions_table(first: Path, second: Path) -> bool:
    """Print both runs' decisions side by side; whether every one names the same set."""
    a, b = chosen_sets(first), chosen_sets(second)
    keys = sorted(a.keys() | b.keys())
    named = [[" = ".join(sorted(run.get(k, ()))) or "-" for run in (a, b)] for k in keys]
    agree = [a.get(k) == b.get(k) for k in keys]
    cells = [[*k, *pair, "yes" if ok else "NO"] for k, pair, ok in zip(keys, named, agree, strict=True)]
    print("decisions (the safe backends named; a tie is a set):")
    print(table(["shape", "scenario", "run 1", "run 2", "same"], cells))
    print(f"{sum(agree)} of {len(keys)} decisions the same\n")
    return all(agree)


def _ratios_table(first: Path, second: Path, reference: str, tolerance: float) -> bool | None:
    """Print the headline ratios of both runs side by side; whether each lies inside the other
    run's interval (None: no ratio in both runs)."""
    runs = []
    for path in (first, second):
        records, names = headline_records(path)
        runs.append(within_run_ratios(records, names, reference))
    rows = disagreements(*({key: r.value for key, r in run.items()} for run in runs))
    if not rows:
        return None
    inside = [each_inside(runs[0][key], runs[1][key], key[2]) for key, *_ in rows]
    cells = [
        [
            f"{label} × {where}",
            name,
            *(f"{run[label, where, name].value:.3f} {run[label, where, name].interval()}" for run in runs),
            "/".join(str(run[label, where, name].pairs or "-") for run in runs),
            f"{d:.1%}",
            "yes" if ok else "NO",
        ]
        for ((label, where, name), _, _, d), ok in zip(rows, inside, strict=True)
    ]
    over = "between every two backends" if reference == ALL else f"to {reference}"
    print(f"headline ratios {over} (paired over the rounds shown, '-': unpaired), 95 % intervals:")
    print(table(["ratio", "metric", "run 1 (×)", "run 2 (×)", "pairs", "apart", "each inside"], cells))
    (label, where, name), _, _, worst = rows[0]
    within = sum(d <= tolerance for *_, d in rows)
    bare = [runs[0][key].low is None and runs[1][key].low is None for key, *_ in rows]
    with_interval = [ok for ok, alone in zip(inside, bare, strict=True) if not alone]
    without = [ok for ok, alone in zip(inside, bare, strict=True) if alone]
    print(
        f"\n{sum(with_interval)} of {len(with_interval)} ratios each inside the other run's interval; "
        f"{sum(without)} of {len(without)} without one (one reading a side) within their tie; "
        f"{within} of {len(rows)} within {tolerance:.0%} of each other "
        f"(worst {worst:.1%}: {label} × {where}, {name})"
    )
    return all(inside)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", nargs=2, type=Path, metavar="RESULTS.json", help="compare these")
    parser.add_argument(
        "--reference",
        default=ALL,
        help=f"'{ALL}' (default): every two backends; a backend's name: each one's ratio to it; "
        f"'{BEST}': to each run's fastest",
    )
    parser.add_argument(
        "--tolerance", type=float, default=0.10, help="the share of ratios within this is reported (0.10)"
    )
    parser.add_argument("extra", nargs="*", help="after --: more `serbench run` arguments")
    args = parser.parse_args(argv)
    if args.results:
        first, second = args.results
    else:
        base = Path(tempfile.mkdtemp(prefix="serbench-stability-"))
        first, second = (run_once(base / name, args.extra) for name in ("a", "b"))
    same_decisions = _decisions_table(first, second)
    inside = _ratios_table(first, second, args.reference, args.tolerance)
    if inside is None:
        print(f"no two backends to compare ({args.reference}) in both runs", file=sys.stderr)
        return 2
    return 0 if same_decisions and inside else 1


if __name__ == "__main__":
    sys.exit(main())
