"""A results file that cannot be used is one line of ResultsError, and exit 2 for report and compare.

Truncated (a run killed mid-write by something other than serbench),
corrupted (bytes flipped, types changed) and foreign (another tool's JSON, a
future schema) files, each written next to a good one.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from serbench import commands, results
from serbench.results import ResultsError, ResultsFile, record

METRIC = {"unit": "s", "values": [1.0, 2.0], "median": 1.5, "ci_low": 1.0, "ci_high": 2.0}


def good_document(tmp_path: Path) -> dict:
    """A finished one-record results document, as the runner writes it."""
    run = ResultsFile(tmp_path / "good.json", {"python": "3"}, "quick", {"pickle": {"safe": False}})
    run.add(record("micro", "pickle", "text-sonnet", {"decode_s": METRIC}))
    run.finish()
    return run.data


def _edited(edit: Callable[[dict], object]) -> Callable[[dict], bytes]:
    """A good document with one edit applied (to a copy), as JSON bytes."""

    def build(doc: dict) -> bytes:
        doc = copy.deepcopy(doc)
        edit(doc)
        return json.dumps(doc).encode()

    return build


def _metric(doc: dict) -> dict:
    return doc["records"][0]["metrics"]["decode_s"]


BAD_FILES: dict[str, Callable[[dict], bytes]] = {
    "empty": lambda doc: b"",
    "truncated": lambda doc: json.dumps(doc, indent=1).encode()[:200],
    "truncated-one-byte-short": lambda doc: json.dumps(doc).encode()[:-1],
    "not-utf8": lambda doc: b"\xff\xfe\xfa" + json.dumps(doc).encode(),
    "nul-bytes": lambda doc: b"\0" * 64,
    "deep-nesting": lambda doc: b"[" * 100_000 + b"]" * 100_000,
    "over-long-int": lambda doc: b'{"schema": ' + b"9" * 5000 + b"}",
    "json-list": lambda doc: b"[]",
    "json-null": lambda doc: b"null",
    "json-string": lambda doc: json.dumps(results.SCHEMA).encode(),
    "asv-results": lambda doc: b'{"commit_hash": "abc", "results": {}, "version": 2}',
    "pytest-benchmark": lambda doc: b'{"machine_info": {}, "benchmarks": []}',
    "future-schema": _edited(lambda doc: doc.update(schema="serbench-results/99")),
    "schema-not-a-string": _edited(lambda doc: doc.update(schema=["x"])),
    "no-records": _edited(lambda doc: doc.pop("records")),
    "records-not-a-list": _edited(lambda doc: doc.update(records=5)),
    "records-null": _edited(lambda doc: doc.update(records=None)),
    "complete-not-a-bool": _edited(lambda doc: doc.update(complete="yes")),
    "environment-not-an-object": _edited(lambda doc: doc.update(environment=[])),
    "record-not-an-object": _edited(lambda doc: doc["records"].append("x")),
    "record-without-backend": _edited(lambda doc: doc["records"][0].pop("backend")),
    "metrics-not-an-object": _edited(lambda doc: doc["records"][0].update(metrics=[])),
    "metric-without-median": _edited(lambda doc: _metric(doc).pop("median")),
    "metric-median-a-string": _edited(lambda doc: _metric(doc).update(median="1.5")),
    "metric-values-not-numbers": _edited(lambda doc: _metric(doc).update(values=[1.0, None])),
    "metric-values-not-a-list": _edited(lambda doc: _metric(doc).update(values=3)),
}


@pytest.fixture(params=sorted(BAD_FILES))
def bad_file(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    path = tmp_path / f"{request.param}.json"
    path.write_bytes(BAD_FILES[request.param](good_document(tmp_path)))
    return path


def test_good_file_loads(tmp_path: Path) -> None:
    doc = good_document(tmp_path)
    assert results.load(tmp_path / "good.json") == doc


def test_unusable_file_is_one_line_of_results_error(bad_file: Path) -> None:
    with pytest.raises(ResultsError) as caught:
        results.load(bad_file)
    message = str(caught.value)
    assert message.startswith(f"{bad_file}: ") and len(message) > len(f"{bad_file}: ")
    assert "\n" not in message


@pytest.mark.parametrize("missing", ["no-such.json", "."])
def test_missing_file_or_directory_is_results_error(tmp_path: Path, missing: str) -> None:
    with pytest.raises(ResultsError, match=r"^\S.*[^\n]$"):
        results.load(tmp_path / missing)


@pytest.mark.parametrize("command", ["report", "compare"])
def test_commands_on_an_unusable_file_exit_2_with_one_line(
    bad_file: Path, command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    good = bad_file.parent / "good.json"
    out = ["--out", str(bad_file.parent / "report")] if command == "report" else []
    singles = [(bad_file,)] if command == "report" else []  # report takes one file or base and head
    for files in [(good, bad_file), (bad_file, good), *singles]:
        assert commands.main([command, *map(str, files), *out]) == 2
        err = capsys.readouterr().err
        assert err.startswith("serbench: error: ") and str(bad_file) in err
        assert len(err.strip().splitlines()) == 1
