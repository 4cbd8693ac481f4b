"""``serbench report --format csv|json``: one header, one row per case × metric, numbers a program
parses (synthetic results; no timings)."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from serbench import cli as commands
from serbench.model import results
from serbench.model.results import Backend, Case, Results, record
from serbench.model.stats import summarize
from serbench.present import export

NUMBERS = ("median", "ci_low", "ci_high", "n")
# Cells that exist only for some rows: a dimension a case does not set, an undeclared ``safe``.
MAY_BE_MISSING = {"transport", "workers", "cache", "safe"}


def _results() -> Results:
    """A micro case (no transport), an ipc case over shm with a cache, a backend of undeclared
    safety, a failed case and an unsupported one (neither measured)."""
    times = summarize([1.5e-5, 1.6e-5, 1.4e-5, 1.7e-5, 1.55e-5], "s")
    wire = summarize([157.0], "B")
    records = [
        record(Case("micro", "pickle", "images-4"), metrics={"decode_s": times, "wire_bytes": wire}),
        record(Case("micro", "mine:x=1", "images-4"), metrics={"decode_s": times}),
        record(Case("ipc", "flat-mmk", "images-4", "shm", cache="lru"), metrics={"ttft_s": times}),
        record(Case("ipc", "pickle", "images-4", "ipc"), metrics={"ttft_s": times}, error="Boom: crashed"),
        record(Case("micro", "flat-mmk", "text-sonnet"), error="unsupported", unsupported="no text"),
    ]
    return Results(
        records=records,
        backends={
            "pickle": Backend(name="pickle", safe=False),
            "flat-mmk": Backend(name="flat-mmk", safe=True),
        },
    )


def _exported(tmp_path: Path, fmt: str, capsys: pytest.CaptureFixture[str]) -> str:
    path = tmp_path / "results.json"
    results.save(path, _results())
    assert commands.main(["report", str(path), "--format", fmt]) == 0
    return capsys.readouterr().out


def test_csv_has_one_header_and_numeric_columns(tmp_path: Path, capsys) -> None:
    out = _exported(tmp_path, "csv", capsys)
    lines = list(csv.reader(io.StringIO(out)))
    assert tuple(lines[0]) == export.COLUMNS
    assert [line for line in lines if line[0] == "scenario"] == [lines[0]]  # the header, once
    rows = list(csv.DictReader(io.StringIO(out)))
    assert len(rows) == 4  # 2 + 1 + 1 metrics; the failed and the unsupported case have none
    for row in rows:
        for name in NUMBERS:
            float(row[name])  # raises if a cell is not a number
        assert int(row["n"]) == float(row["n"])
        empty = {name for name, value in row.items() if value == ""}
        assert empty <= MAY_BE_MISSING, row
    micro = rows[0]
    assert (micro["scenario"], micro["backend"], micro["workload"], micro["metric"]) == (
        "micro", "pickle", "images-4", "decode_s",
    )  # fmt: skip
    assert (micro["transport"], micro["unit"], float(micro["median"]), micro["n"]) == ("", "s", 1.55e-5, "5")
    assert [r["safe"] for r in rows] == ["False", "False", "", "True"]  # mine:x=1 declares nothing
    shm = rows[-1]
    assert (shm["transport"], shm["cache"], shm["workers"]) == ("shm", "lru", "")


def test_json_holds_the_same_rows_with_numbers_as_numbers(tmp_path: Path, capsys) -> None:
    rows = json.loads(_exported(tmp_path, "json", capsys))
    assert [tuple(row) for row in rows] == [export.COLUMNS] * 4
    for row in rows:
        assert all(isinstance(row[name], float) for name in ("median", "ci_low", "ci_high"))
        assert isinstance(row["n"], int)
        assert {name for name, value in row.items() if value is None} <= MAY_BE_MISSING
    assert rows == export.rows(_results())
    assert [(r["metric"], r["median"], r["safe"]) for r in rows[:2]] == [
        ("decode_s", 1.55e-5, False),
        ("wire_bytes", 157.0, False),
    ]


def test_markdown_stays_the_summary_tables(tmp_path: Path, capsys) -> None:
    out = _exported(tmp_path, "md", capsys)
    assert out.startswith("### ") and "| pickle (unsafe) |" in out
