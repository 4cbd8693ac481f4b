"""The transport in a case's identity: rows ``backend@transport`` everywhere; old files still match."""

from __future__ import annotations

import pytest
from test_compare import doc

from serbench import compare, text
from serbench.commands import main
from serbench.results import record, split_backend, with_transport
from serbench.runner import Plan
from serbench.stats import summarize


def test_the_default_transport_is_unmarked_and_labels_round_trip() -> None:
    assert with_transport("pickle") == "pickle"
    assert split_backend("msgspec-frombuffer:threshold=inf@shm") == (
        "msgspec-frombuffer:threshold=inf",
        "shm",
    )
    assert split_backend("pkg.mod:factory:k=v") == ("pkg.mod:factory:k=v", None)


def test_plan_multiplies_only_the_scenarios_that_link_two_processes() -> None:
    plan = Plan(["pickle", "msgspec-frombuffer"], ["images-4"], ["micro", "ipc", "memory"], ("ipc", "shm"))
    by_scenario: dict[str, list[str]] = {}
    for case in plan.cases():
        by_scenario.setdefault(case.scenario, []).append(case.backend)
    assert by_scenario["micro"] == ["pickle", "msgspec-frombuffer"]
    assert by_scenario["ipc"] == ["pickle", "pickle@shm", "msgspec-frombuffer", "msgspec-frombuffer@shm"]
    assert "msgspec-frombuffer:threshold=inf@shm" in by_scenario["memory"]
    shm_case = next(c for c in plan.cases() if c.backend == "pickle@shm")
    assert (shm_case.spec, shm_case.transport) == ("pickle", "shm")


def _ttft(backend: str, seconds: float) -> dict:
    return record("ipc", backend, "images-4", {"ttft_s": summarize([seconds] * 9, "s")})


def test_compare_keeps_transports_apart_and_an_old_file_matches_the_default() -> None:
    old = doc([_ttft("pickle", 0.2)])  # written before transports were a dimension
    new = doc([_ttft("pickle", 0.2), _ttft("pickle@shm", 0.05)])
    comparison = compare.compare(old, new)
    assert [(r.backend, r.verdict) for r in comparison.rows] == [("pickle", compare.NO_CHANGE)]
    assert [key[1] for key in comparison.added] == ["pickle@shm"]
    data = {**new, "backends": {"pickle": {"safe": False}}}
    assert "pickle@shm (unsafe)" in text.render(data)


def test_reproduce_command_names_the_transport() -> None:
    row = compare.compare(doc([_ttft("pickle@shm", 0.1)]), doc([_ttft("pickle@shm", 0.2)])).rows[0]
    command = text.reproduce_command(row, doc([]), doc([], git_commit="b" * 40))
    assert "--backends pickle --workloads images-4 --transport shm" in command


@pytest.mark.parametrize("value", ["udp", "shm,udp"])
def test_an_unknown_transport_is_a_usage_error(value: str, capsys: pytest.CaptureFixture, tmp_path) -> None:
    assert main(["run", "--scenarios", "nothing", "--transport", value, "--out", str(tmp_path)]) == 2
    assert "--transport" in capsys.readouterr().err
