"""The transport in a case's identity: rows ``backend@transport`` everywhere; old files still match."""

from __future__ import annotations

import dataclasses

import msgspec
import pytest
from builders import doc

from serbench.analysis import summary, verdicts
from serbench.analysis.summary import summarize_run
from serbench.analysis.verdicts import Verdict
from serbench.cli import main
from serbench.model import results
from serbench.model.results import Backend, Case, Record, record
from serbench.model.stats import summarize
from serbench.present import terminal
from serbench.runner.matrix import Plan


def _schema_1(records: list[dict]) -> bytes:
    """A results file as serbench wrote it before the typed model (``spec@transport`` backends)."""
    return msgspec.json.encode({"schema": results.SCHEMA_1, "complete": True, "records": records})


def test_the_default_transport_is_unmarked_and_labels_round_trip() -> None:
    assert Case("ipc", "pickle", "images-4", transport="ipc").row == "pickle"
    shm = Case("memory", "msgspec-frombuffer:threshold=inf", "images-4", transport="shm")
    assert shm.row == "msgspec-frombuffer:threshold=inf@shm"
    old = [
        {"scenario": "memory", "backend": shm.row, "workload": "images-4", "metrics": {}},
        {"scenario": "micro", "backend": "pkg.mod:factory:k=v", "workload": "images-4", "metrics": {}},
    ]
    read = results.decode(_schema_1(old)).records
    assert [r.case for r in read] == [shm, Case("micro", "pkg.mod:factory:k=v", "images-4")]


def test_plan_multiplies_only_the_scenarios_that_link_two_processes() -> None:
    plan = Plan(
        ["pickle", "msgspec-frombuffer"],
        ["images-4"],
        ["micro", "ipc", "memory"],
        {"transport": ("ipc", "shm")},
    )
    by_scenario: dict[str, list[str]] = {}
    for case in plan.cases():
        by_scenario.setdefault(case.scenario, []).append(case.row)
    assert by_scenario["micro"] == ["pickle", "msgspec-frombuffer"]
    assert by_scenario["ipc"] == ["pickle", "pickle@shm", "msgspec-frombuffer", "msgspec-frombuffer@shm"]
    assert "msgspec-frombuffer:threshold=inf@shm" in by_scenario["memory"]
    shm_case = next(c for c in plan.cases() if c.row == "pickle@shm")
    assert (shm_case.backend, shm_case.transport) == ("pickle", "shm")
    assert {c.transport for c in plan.cases() if c.scenario == "micro"} == {None}


def _ttft(backend: str, transport: str, seconds: float) -> Record:
    metrics = {"ttft_s": summarize([seconds] * 9, "s")}
    return record(Case("ipc", backend, "images-4", transport=transport), metrics=metrics)


def test_compare_keeps_transports_apart_and_an_old_file_matches_the_default() -> None:
    # written before transports were a dimension: the backend unmarked
    ttft = msgspec.to_builtins(summarize([0.2] * 9, "s"))
    written = [{"scenario": "ipc", "backend": "pickle", "workload": "images-4", "metrics": {"ttft_s": ttft}}]
    old = msgspec.structs.replace(doc([]), records=results.decode(_schema_1(written)).records)
    new = doc([_ttft("pickle", "ipc", 0.2), _ttft("pickle", "shm", 0.05)])
    comparison = verdicts.compare(old, new)
    assert [(r.backend, r.verdict) for r in comparison.rows] == [("pickle", Verdict.NO_CHANGE)]
    assert [case.row for case in comparison.added] == ["pickle@shm"]
    data = msgspec.structs.replace(new, backends={"pickle": Backend(safe=False)})
    assert "pickle@shm (unsafe)" in terminal.render(summarize_run(data), verbose=True)


def test_reproduce_command_names_the_transport() -> None:
    row = verdicts.compare(doc([_ttft("pickle", "shm", 0.1)]), doc([_ttft("pickle", "shm", 0.2)])).rows[0]
    command = summary.reproduce_command(row, doc([]), doc([], git_commit="b" * 40))
    assert "--backends pickle --workloads images-4 --transport shm" in command


@pytest.mark.parametrize("value", ["udp", "shm,udp"])
def test_an_unknown_transport_is_a_usage_error(value: str, capsys: pytest.CaptureFixture, tmp_path) -> None:
    assert main(["run", "--scenarios", "nothing", "--transport", value, "--out", str(tmp_path)]) == 2
    assert "--transport" in capsys.readouterr().err


def test_reproduce_command_names_every_dimension_the_case_sets() -> None:
    """A cached case (or a fan-out one) is measured again as it was: its own flags, not the
    default run's (the gate's reproduce line once dropped --cache)."""
    case = Case("memory", "pickle", "images-8:repeat=0.5", transport="ipc", cache="lru")
    base = doc([results.record(case, metrics={"copies": summarize([1.0], "ratio")})])
    head = doc([results.record(case, metrics={"copies": summarize([2.0], "ratio")})], git_commit="b" * 40)
    (row,) = [r for r in verdicts.compare(base, head).rows if r.metric == "copies"]
    command = summary.reproduce_command(row, base, head)
    assert command.endswith("--workloads images-8:repeat=0.5 --cache lru") and "--transport" not in command
    fanned = msgspec.structs.replace(case, scenario="fanout", transport="shm-ring", workers=2, cache=None)
    row = dataclasses.replace(row, case=fanned)
    assert summary.reproduce_command(row, base, head).endswith("--transport shm-ring --workers 2")
