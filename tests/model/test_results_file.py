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

import msgspec
import pytest
from suite_paths import FIXTURES

from serbench import cli as commands
from serbench.model import results
from serbench.model.results import Backend, Case, Environment, ResultsError, ResultsFile, record
from serbench.model.stats import summarize

METRIC = summarize([1.0, 2.0], "s")
SCHEMA_1 = FIXTURES / "results-schema-1.json"


def good_document(tmp_path: Path) -> dict:
    """A finished one-record results document, as the runner writes it (as JSON's builtins)."""
    run = ResultsFile(
        tmp_path / "good.json", Environment(python="3"), "quick", {"pickle": Backend(safe=False)}
    )
    run.add(record(Case("micro", "pickle", "text-sonnet"), metrics={"decode_s": METRIC}))
    run.finish()
    return msgspec.to_builtins(run.results)


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
    assert msgspec.to_builtins(results.load(tmp_path / "good.json")) == doc
    assert doc["schema"] == "serbench-results/2" and doc["records"][0]["transport"] is None


def test_a_schema_1_file_of_a_real_run_is_read_as_schema_2() -> None:
    """The transport folded into the backend (``spec@shm``) comes back as its own field, and an
    unmarked backend of a linked scenario as the default link; info is typed by its scenario."""
    old = json.loads(SCHEMA_1.read_text())
    doc = results.load(SCHEMA_1)
    assert old["schema"] == "serbench-results/1" and doc.schema == "serbench-results/2"
    assert len(doc.records) == len(old["records"])
    for was, now in zip(old["records"], doc.records, strict=True):
        spec, _, link = was["backend"].partition("@")
        assert (now.scenario, now.backend, now.workload) == (was["scenario"], spec, was["workload"])
        assert now.transport == (link or ("ipc" if was["scenario"] != "micro" else None))
        assert now.row == was["backend"]  # the label tables show is the one schema 1 showed
        assert {n: m.median for n, m in now.metrics.items()} == {
            n: m["median"] for n, m in was["metrics"].items()
        }
        if was["error"]:  # schema 1 kept no info of a failed case (two shm text cases here)
            assert now.error == was["error"] and now.info is None
            continue
        kind = "stream" if "step_s" in was["info"] else was["scenario"]
        assert type(now.info).__struct_config__.tag == kind
    assert {r.transport for r in doc.records if r.scenario in ("ipc", "memory")} == {"ipc", "shm"}
    assert doc.backends["pickle"].safe is False and doc.backends["pickle"].conformance.passed > 0
    assert doc.environment.accelerator is not None and doc.environment.system


def test_schema_2_round_trips_what_schema_1_held(tmp_path: Path) -> None:
    doc = results.load(SCHEMA_1)
    results.save(tmp_path / "again.json", doc)
    assert results.load(tmp_path / "again.json") == doc
    assert json.loads((tmp_path / "again.json").read_text())["schema"] == results.SCHEMA


def test_a_non_finite_number_is_refused_before_it_is_written(tmp_path: Path) -> None:
    """JSON has no NaN: msgspec would write null, which no reader could take back."""
    run = ResultsFile(tmp_path / "r.json", Environment(), "quick", {})
    with pytest.raises(ValueError, match="finite"):
        run.add(record(Case("micro", "pickle", "text-sonnet"), duration_s=float("nan")))
    assert results.load(tmp_path / "r.json").records == []  # the file on disk is the last good one


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


def test_a_replaced_record_is_checked_and_the_file_keeps_the_last_good_one(tmp_path: Path) -> None:
    run = ResultsFile(tmp_path / "r.json", Environment(), "quick", {})
    case = Case("micro", "pickle", "text-sonnet")
    index = run.add(record(case, duration_s=1.0))
    run.replace(index, record(case, duration_s=2.0))
    with pytest.raises(ValueError, match="finite"):
        run.replace(index, record(case, duration_s=float("inf")))
    assert [rec.duration_s for rec in results.load(tmp_path / "r.json").records] == [2.0]
    assert [rec.duration_s for rec in run.results.records] == [2.0]
