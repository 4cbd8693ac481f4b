"""Do two runs of the same commit agree? The ipc payload cases' between-backend ratios, run against run.

Runs the ipc scenario of the default quick matrix twice (``serbench run
--scenarios ipc``; every case runs in a fresh forked process of its own, so the
cases of other scenarios only change what else the machine did meanwhile), or
reads two results files given with ``--results``. For every payload case (a
workload with tensor bytes) it prints

* the within-run ratio of ``ttft_s`` and of ``ingress_s`` between every two
  backends of the same workload and transport (issue 33's "every between-backend
  ratio"; ``--reference NAME``: each backend's to that one's instead, or
  ``best``: to each run's fastest), paired by
  round where both were measured in the same interleaved rounds
  (``estimates.ratio_estimate``, as a comparison and a ranking read them), and
  whether the two runs' ratios agree within ``--tolerance`` (10 % by default,
  issue 33's bound): larger / smaller - 1; and whether their 95 % intervals
  overlap, i.e. whether the runs disagree by more than their own noise allows
  (where they overlap and still differ beyond the tolerance, the runs took too
  few samples for it on this machine);
* the two runs' absolute medians and their disagreement, for information: on
  a shared machine they follow its load, and are not expected to hold;

and first both runs' decisions (the set of safe backends each names per shape
and scenario), with the load average before and after each run. Exit 1 when
a decision differs or a ratio disagrees beyond ``--tolerance``.

    python scripts/ipc_stability.py                       # two fresh runs (~2-3 min each)
    python scripts/ipc_stability.py --results A.json B.json
    python scripts/ipc_stability.py --reference msgspec-frombuffer --results A.json B.json
    python scripts/ipc_stability.py -- --backends flat-mmk,pickle   # extra `serbench run` arguments
    python scripts/ipc_stability.py -- --scenarios micro,ipc,memory  # two whole default runs
"""

from __future__ import annotations

import argparse
import itertools
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import NamedTuple

import msgspec

from serbench.analysis import decision
from serbench.analysis.estimates import center_of, ratio_estimate
from serbench.model.results import Case, Record, load
from serbench.model.stats import Measurement
from serbench.present.terminal import table

METRICS = ("ttft_s", "ingress_s")
ALL = "all"
BEST = "best"


def run_once(folder: Path, extra: list[str], scenario: str = "ipc") -> Path:
    """One ``serbench run --scenarios SCENARIO`` into ``folder``; prints its wall time and the
    load average around it."""
    before, start = os.getloadavg(), time.perf_counter()
    command = [sys.executable, "-m", "serbench", "run", "--scenarios", scenario, "--out", str(folder), *extra]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    wall, after = time.perf_counter() - start, os.getloadavg()
    print(f"{folder}: {wall:.0f} s, load average {before[0]:.2f} before, {after[0]:.2f} after (1 min)")
    return folder / "results.json"


def payload_records(path: Path) -> Iterator[Record]:
    """The ipc payload cases of a results file that measured."""
    return (rec for rec in load(path).of("ipc") if rec.info is not None and rec.info.payload_bytes)


def payload_medians(path: Path) -> dict[tuple[str, str, str], float]:
    """(backend as a table row shows it, workload, metric) → median, for the payload cases of a
    results file."""
    out = {}
    for rec in payload_records(path):
        for name in METRICS:
            if name in rec.metrics:
                out[rec.row, rec.workload, name] = rec.metrics[name].median
    return out


def _pairs(base: Measurement, head: Measurement) -> int:
    """How many rounds pair the two (measured in the same interleaved rounds), 0 for none."""
    rounds = base.rounds or []
    return len(rounds) if len(rounds) > 1 and len(rounds) == len(head.rounds or []) else 0


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
    """A within-run ratio, its bootstrap interval (None where it has none) and the rounds that
    pair it (0: unpaired)."""

    value: float
    low: float | None
    high: float | None
    pairs: int

    def interval(self) -> str:
        return "-" if self.low is None else f"[{self.low:.3f}, {self.high:.3f}]"


def intervals_meet(a: Ratio, b: Ratio) -> bool:
    """Whether two runs' intervals of a ratio overlap: their disagreement is then within what
    each run's own noise allows, and only more samples a run would narrow it."""
    if a.low is None or b.low is None:
        return False
    return a.low <= b.high and b.low <= a.high


def within_run_ratios(
    records: Iterable[Record], metrics: Sequence[str], reference: str = ALL
) -> dict[tuple[str, str, str], Ratio]:
    """(ratio's label, workload, metric) → its ``Ratio``, for every two of ``records``
    of the same workload and other dimensions that ``_ratio_pairs`` names: the label is the
    head's row, ``head / base`` with ``ALL``."""
    groups: dict[tuple[Case, str], dict[str, Record]] = {}
    for rec in records:
        for name in (n for n in metrics if n in rec.metrics):
            groups.setdefault((msgspec.structs.replace(rec.case, backend=""), name), {})[rec.backend] = rec
    out = {}
    for (_, name), by_backend in groups.items():
        for base, head in _ratio_pairs(by_backend, name, reference):
            pair = base.metrics[name], head.metrics[name]
            ratio, low, high = ratio_estimate(*pair, pooled=True, center=center_of(name))
            if ratio is not None:
                label = f"{head.row} / {base.backend}" if reference == ALL else head.row
                out[label, head.workload, name] = Ratio(ratio, low, high, _pairs(*pair))
    return out


def disagreements(a: dict, b: dict) -> list[tuple[tuple[str, str, str], float, float, float]]:
    """(case, value a, value b, larger / smaller - 1) for every case in both, worst first."""
    rows = [(key, a[key], b[key], max(a[key], b[key]) / min(a[key], b[key]) - 1) for key in a if key in b]
    return sorted(rows, key=lambda row: -row[3])


def _medians_table(first: Path, second: Path) -> None:
    """The old output: absolute medians run against run, for information."""
    rows = disagreements(payload_medians(first), payload_medians(second))
    cells = [
        [f"{b} × {w}", name, f"{x * 1e3:.2f}", f"{y * 1e3:.2f}", f"{d:.1%}"] for (b, w, name), x, y, d in rows
    ]
    print("absolute medians (not expected to hold on a shared machine):")
    print(table(["case", "metric", "run 1 (ms)", "run 2 (ms)", "disagreement"], cells))
    if rows:
        within = sum(d <= 0.15 for *_, d in rows)
        print(f"worst {rows[0][3]:.1%}; {within} of {len(rows)} medians within 15 %\n")


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
        "--tolerance", type=float, default=0.10, help="worst allowed ratio disagreement (0.10)"
    )
    parser.add_argument("extra", nargs="*", help="after --: more `serbench run` arguments")
    args = parser.parse_args(argv)
    if args.results:
        first, second = args.results
    else:
        base = Path(tempfile.mkdtemp(prefix="serbench-stability-"))
        first, second = (run_once(base / name, args.extra) for name in ("a", "b"))
    same_decision = _decisions_table(first, second)
    _medians_table(first, second)
    ratios = [within_run_ratios(payload_records(path), METRICS, args.reference) for path in (first, second)]
    rows = disagreements(*({key: r.value for key, r in run.items()} for run in ratios))
    if not rows:
        print(f"no two payload cases to compare ({args.reference}) in both runs", file=sys.stderr)
        return 2
    meets = [intervals_meet(*(run[key] for run in ratios)) for key, *_ in rows]
    cells = [
        [
            f"{b} × {w}",
            name,
            *(f"{run[b, w, name].value:.3f} {run[b, w, name].interval()}" for run in ratios),
            "/".join(str(run[b, w, name].pairs or "-") for run in ratios),
            f"{d:.1%}",
            "yes" if d <= args.tolerance else "NO",
            "yes" if meet else "no",
        ]
        for ((b, w, name), _, _, d), meet in zip(rows, meets, strict=True)
    ]
    over = "between every two backends" if args.reference == ALL else f"to {args.reference}"
    print(f"within-run ratios {over} (paired over the rounds shown, '-': unpaired), 95 % intervals:")
    headers = ["case", "metric", "run 1 (×)", "run 2 (×)", "pairs", "disagreement", "agree", "intervals meet"]
    print(table(headers, cells))
    (backend, workload, name), _, _, worst = rows[0]
    within = sum(d <= args.tolerance for *_, d in rows)
    print(
        f"\nworst ratio disagreement: {worst:.1%} ({backend} × {workload}, {name}); "
        f"{within} of {len(rows)} ratios within {args.tolerance:.0%}; "
        f"{sum(meets)} of {len(rows)} within the runs' own intervals (they overlap)"
    )
    return 0 if worst <= args.tolerance and same_decision else 1


if __name__ == "__main__":
    sys.exit(main())
