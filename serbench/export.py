"""Results in formats other dashboards read.

* ``bencher`` — Bencher Metric Format (BMF): ``{benchmark: {measure:
  {value, lower_value, upper_value}}}``, one benchmark per case
  (``scenario/backend/workload``), one measure per metric (median and its CI).
* ``github-action-benchmark`` — its ``customSmallerIsBetter`` tool: a list of
  ``{name, unit, value, range, extra}``. That tool takes one direction per
  file, so higher-is-better metrics (rates, ``*_per_s``)
  are left out.

Failed cases are left out of both: a dashboard point must be a measurement.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

from serbench.metrics import metric
from serbench.results import ok_records, write_json_atomic


def _metrics(data: dict) -> Iterator[tuple[str, str, dict]]:
    """(benchmark name, metric name, its results-file entry) for every measured metric."""
    for rec in ok_records(data):
        name = "/".join((rec["scenario"], rec["backend"], rec["workload"]))
        for metric_name, measured in sorted(rec["metrics"].items()):
            yield name, metric_name, measured


def bencher(data: dict) -> dict:
    """Bencher Metric Format: benchmark → measure → value with its interval."""
    out: dict[str, dict] = {}
    for name, metric_name, measured in _metrics(data):
        out.setdefault(name, {})[metric_name] = {
            "value": measured["median"],
            "lower_value": measured["ci_low"],
            "upper_value": measured["ci_high"],
        }
    return out


def github_action_benchmark(data: dict) -> list[dict]:
    """github-action-benchmark ``customSmallerIsBetter`` entries (lower-is-better metrics only)."""
    commit = data["environment"].get("git_commit") or "unknown commit"
    return [
        {
            "name": f"{name} {metric_name}",
            "unit": measured["unit"],
            "value": measured["median"],
            "range": f"{measured['ci_low']:.6g}..{measured['ci_high']:.6g}",
            "extra": f"median of {len(measured['values'])} samples, 95% CI; {commit}",
        }
        for name, metric_name, measured in _metrics(data)
        if not metric(metric_name).higher_is_better
    ]


FORMATS: dict[str, Callable[[dict], object]] = {
    "bencher": bencher,
    "github-action-benchmark": github_action_benchmark,
}


def write(data: dict, path: str | Path, fmt: str) -> None:
    """Write ``data`` (a results document) to ``path`` in format ``fmt``."""
    write_json_atomic(Path(path), FORMATS[fmt](data))
