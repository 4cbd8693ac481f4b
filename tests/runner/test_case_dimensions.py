"""A case dimension is one ``Case`` field plus the scenario that varies it (issue 29).

``workers`` is the field the fan-out scenario will vary. Here a scenario made
in the test declares it, and nothing else changes: the command line grows the
flag, the plan makes one case per value, the results file keeps it as a field,
compare keys by it and the tables give each value a row of its own.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from serbench import cli as commands
from serbench.analysis import verdicts
from serbench.analysis.summary import summarize_run
from serbench.cli import options
from serbench.model import results
from serbench.model.errors import UsageError
from serbench.model.results import Case, Results
from serbench.model.stats import summarize
from serbench.present import terminal
from serbench.runner.matrix import Plan
from serbench.scenarios import SCENARIOS, Dimension, Outcome, Scenario
from serbench.scenarios.base import positive_int

WORKERS = Dimension("workers", "--workers", positive_int, (1,), "worker processes per engine")


class FanOut(Scenario):
    name = "fanout-probe"
    description = "declares the workers dimension"
    dimensions = (WORKERS,)

    def run(self, case: Case, profile: object) -> Outcome:
        return Outcome({"decode_s": summarize([1e-3 * case.workers] * 5, "s")})


@pytest.fixture(autouse=True)
def fan_out(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(SCENARIOS, FanOut.name, FanOut())


def _results(factor: float = 1.0) -> Results:
    plan = Plan(["pickle"], ["text-sonnet"], [FanOut.name], {"workers": (1, 2)})
    records = [
        results.record(c, metrics={"decode_s": summarize([factor * 1e-3 * c.workers] * 5, "s")})
        for c in plan.cases()
    ]
    return Results(records=records)


def test_the_command_line_grows_the_flag_and_parses_it_once() -> None:
    args = commands.build_parser().parse_args(["run", "--scenarios", FanOut.name, "--workers", "1,2,4"])
    assert options.plan(args).dimensions == {"workers": (1, 2, 4)}
    with pytest.raises(UsageError, match="--workers"):
        options.plan(commands.build_parser().parse_args(["run", "--workers", "0"]))


def test_the_plan_makes_one_case_per_value_and_the_file_keeps_it(tmp_path: Path) -> None:
    doc = _results()
    assert [c.workers for c in doc.records] == [1, 2]
    assert [r.row for r in doc.records] == ["pickle workers=1", "pickle workers=2"]
    results.save(tmp_path / "r.json", doc)
    assert results.load(tmp_path / "r.json") == doc
    assert '"workers": 2' in (tmp_path / "r.json").read_text()


def test_compare_keys_by_it_and_the_tables_give_each_value_a_row() -> None:
    comparison = verdicts.compare(_results(), _results(factor=2.0), strict=True)
    assert {r.case.workers for r in comparison.rows} == {1, 2} and not comparison.added
    shown = terminal.render(summarize_run(_results()), verbose=True)
    assert "pickle workers=1" in shown and "pickle workers=2" in shown


class Broadcast(Scenario):
    """A second scenario that varies ``transport`` with values of its own (as a fan-out one does)."""

    name = "broadcast-probe"
    description = "declares transports of its own"
    dimensions = (Dimension("transport", "--transport", str, ("ring",), "broadcast links", ("ring", "pub")),)


def test_a_field_several_scenarios_vary_is_one_flag_and_each_takes_its_own_values(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(SCENARIOS, Broadcast.name, Broadcast())
    args = commands.build_parser().parse_args(["run", "--transport", "shm,ring"])
    plan = options.plan(args)
    assert plan.dimensions == {"transport": ("shm", "ring")}
    cases = SCENARIOS["ipc"].cases(["pickle"], ["text-sonnet"], plan.dimensions)
    assert [c.transport for c in cases] == ["shm"]
    assert [c.transport for c in Broadcast().cases(["pickle"], ["text-sonnet"], plan.dimensions)] == ["ring"]
    assert SCENARIOS["micro"].cases(["pickle"], ["text-sonnet"], plan.dimensions)[0].transport is None
    with pytest.raises(UsageError, match="udp"):
        options.plan(commands.build_parser().parse_args(["run", "--transport", "udp"]))
