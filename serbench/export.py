"""Results in formats other dashboards read.

* ``bencher`` — Bencher Metric Format (BMF): ``{benchmark: {measure:
  {value, lower_value, upper_value}}}``, one benchmark per case
  (``scenario/row/workload``, the row being ``Case.row``: the backend spec,
  ``@transport`` unless the default, then any other dimension), one measure per
  metric (median and its CI).
* ``github-action-benchmark`` — its ``customSmallerIsBetter`` tool: a list of
  ``{name, unit, value, range, extra}``. That tool takes one direction per
  file, so higher-is-better metrics (rates, ``*_per_s``)
  are left out.

Failed cases are left out of both: a dashboard point must be a measurement.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

from serbench.metrics import metric
from serbench.results import Case, Results, write_text_atomic
from serbench.stats import Measurement


def benchmark_name(case: Case) -> str:
    """A case as a dashboard's benchmark: ``scenario/row/workload`` (``Case.row``, so a case over
    the default transport keeps the name it had before transports were a dimension)."""
    return "/".join((case.scenario, case.row, case.workload))


def _metrics(data: Results) -> Iterator[tuple[str, str, Measurement]]:
    """(benchmark name, metric name, its measurement) for every measured metric."""
    for rec in data.of():
        name = benchmark_name(rec)
        for metric_name, measured in sorted(rec.metrics.items()):
            yield name, metric_name, measured


def bencher(data: Results) -> dict:
    """Bencher Metric Format: benchmark → measure → value with its interval."""
    out: dict[str, dict] = {}
    for name, metric_name, measured in _metrics(data):
        out.setdefault(name, {})[metric_name] = {
            "value": measured.median,
            "lower_value": measured.ci_low,
            "upper_value": measured.ci_high,
        }
    return out


def github_action_benchmark(data: Results) -> list[dict]:
    """github-action-benchmark ``customSmallerIsBetter`` entries (lower-is-better metrics only)."""
    commit = data.environment.git_commit or "unknown commit"
    return [
        {
            "name": f"{name} {metric_name}",
            "unit": measured.unit,
            "value": measured.median,
            "range": f"{measured.ci_low:.6g}..{measured.ci_high:.6g}",
            "extra": f"median of {measured.n} samples, 95% CI; {commit}",
        }
        for name, metric_name, measured in _metrics(data)
        if not metric(metric_name).higher_is_better
    ]


FORMATS: dict[str, Callable[[Results], object]] = {
    "bencher": bencher,
    "github-action-benchmark": github_action_benchmark,
}


def write(data: Results, path: str | Path, fmt: str) -> None:
    """Write ``data`` (a results document) to ``path`` in format ``fmt``, as indented JSON."""
    write_text_atomic(Path(path), json.dumps(FORMATS[fmt](data), indent=1, allow_nan=False))
