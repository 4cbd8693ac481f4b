"""Results in formats that other programs read.

Every measured metric as a table (``serbench report --format csv|json``):

* ``csv`` — one header, then one row per case × metric: the ``Case`` fields, metric,
  unit, median, ci_low, ci_high, n and safe; a cell is empty only where the value does
  not exist (a dimension the case does not set, an undeclared ``safe``).
* ``json`` — the same rows as a list of objects, a missing value as null.

For dashboards (``serbench compare --export``):

* ``bencher`` — Bencher Metric Format (BMF): ``{benchmark: {measure:
  {value, lower_value, upper_value}}}``, one benchmark per case
  (``scenario/row/workload``, the row being ``Case.row``: the backend spec,
  ``@transport`` unless the default, then any other dimension), one measure per
  metric (median and its CI).
* ``github-action-benchmark`` — its ``customSmallerIsBetter`` tool: a list of
  ``{name, unit, value, range, extra}``; one direction per file, so rates are left out.

Failed cases are left out of all of them: a row or a dashboard point must be a measurement.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from serbench.model.metrics import metric
from serbench.model.results import Case, Record, Results, write_text_atomic
from serbench.model.stats import Measurement


def benchmark_name(case: Case) -> str:
    """A case as a dashboard's benchmark: ``scenario/row/workload`` (``Case.row``, so a case over
    the default transport keeps the name it had before transports were a dimension)."""
    return "/".join((case.scenario, case.row, case.workload))


def _metrics(data: Results) -> Iterator[tuple[Record, str, Measurement]]:
    """(record, metric name, its measurement) for every measured metric, by case then name."""
    for rec in data.of():
        for metric_name, measured in sorted(rec.metrics.items()):
            yield rec, metric_name, measured


COLUMNS: tuple[str, ...] = (
    *Case.__struct_fields__,
    "metric",
    "unit",
    "median",
    "ci_low",
    "ci_high",
    "n",
    "safe",
)


def rows(data: Results) -> list[dict[str, Any]]:
    """One row per case × measured metric, keyed by ``COLUMNS``: what the CSV and JSON tables
    hold. A dimension the case does not set, and ``safe`` of a backend that does not declare
    it, are None."""
    return [
        {
            **{field: getattr(rec, field) for field in Case.__struct_fields__},
            "metric": metric_name,
            "unit": measured.unit,
            "median": measured.median,
            "ci_low": measured.ci_low,
            "ci_high": measured.ci_high,
            "n": measured.n,
            "safe": data.backend(rec).safe,
        }
        for rec, metric_name, measured in _metrics(data)
    ]


def _csv(table: list[dict[str, Any]]) -> str:
    """Rows as CSV under one header (None as an empty cell)."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=COLUMNS)
    writer.writeheader()
    writer.writerows(table)
    return buffer.getvalue()


def _json(table: list[dict[str, Any]]) -> str:
    """Rows as a JSON list of objects (None as null)."""
    return json.dumps(table, indent=1, allow_nan=False) + "\n"


TABLES: dict[str, Callable[[list[dict[str, Any]]], str]] = {"csv": _csv, "json": _json}


def table(data: Results, fmt: str) -> str:
    """Every measured metric of ``data`` as text in ``fmt``, one of ``TABLES``."""
    return TABLES[fmt](rows(data))


def bencher(data: Results) -> dict:
    """Bencher Metric Format: benchmark → measure → value with its interval."""
    out: dict[str, dict] = {}
    for rec, metric_name, measured in _metrics(data):
        out.setdefault(benchmark_name(rec), {})[metric_name] = {
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
            "name": f"{benchmark_name(rec)} {metric_name}",
            "unit": measured.unit,
            "value": measured.median,
            "range": f"{measured.ci_low:.6g}..{measured.ci_high:.6g}",
            "extra": f"median of {measured.n} samples, 95% CI; {commit}",
        }
        for rec, metric_name, measured in _metrics(data)
        if not metric(metric_name).higher_is_better
    ]


FORMATS: dict[str, Callable[[Results], object]] = {
    "bencher": bencher,
    "github-action-benchmark": github_action_benchmark,
}


def write(data: Results, path: str | Path, fmt: str) -> None:
    """Write ``data`` (a results document) to ``path`` in format ``fmt``, as indented JSON."""
    write_text_atomic(Path(path), json.dumps(FORMATS[fmt](data), indent=1, allow_nan=False))
