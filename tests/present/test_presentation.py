"""Scenarios own their presentation: text and the report draw what a scenario declares
(``Scenario.figures``, ``Scenario.tables``) and know no scenario by name."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from suite_paths import ROOT

from serbench.analysis.summary import summarize_run
from serbench.model import results
from serbench.model.results import Case, Results
from serbench.model.stats import summarize
from serbench.model.views import MEDIAN, Figure, Table
from serbench.present import html as report
from serbench.present import terminal
from serbench.scenarios import SCENARIOS, Scenario

PRESENTATION = [*sorted((ROOT / "serbench" / "present").rglob("*.py")), ROOT / "serbench/analysis/summary.py"]


class Probe(Scenario):
    """A scenario the presentation has never heard of, declaring one figure and one table."""

    name = "probe"
    description = "a scenario declared in a test"
    figures = (Figure("bars", "Probe figure: decode time", (("decode_s", MEDIAN),)),)

    def tables(self, data: Results) -> list[Table]:
        rows = [[r.row, r.workload, f"{r.metrics['decode_s'].median:g}"] for r in data.of(self.name)]
        return [Table("probe's own verdict", ["backend", "workload", "decode"], rows, "a note")]


@pytest.fixture
def probe(monkeypatch: pytest.MonkeyPatch) -> Results:
    monkeypatch.setitem(SCENARIOS, "probe", Probe())
    case = Case("probe", "pickle", "text-sonnet")
    return Results(records=[results.record(case, metrics={"decode_s": summarize([0.5] * 5, "s")})])


def test_the_terminal_shows_a_scenarios_own_tables(probe: Results) -> None:
    shown = terminal.render(summarize_run(probe), verbose=True)
    assert "probe: probe's own verdict" in shown
    assert re.search(r"pickle\s+text-sonnet\s+0\.5", shown)


def test_the_report_draws_a_scenarios_declared_figures_and_tables(probe: Results, tmp_path: Path) -> None:
    page = report.write_report(summarize_run(probe), tmp_path).read_text()
    assert "Probe figure: decode time" in page and "<img" in page
    assert "Probe&#x27;s own verdict" in page or "Probe's own verdict" in page
    assert "a note" in page


@pytest.mark.parametrize("path", PRESENTATION, ids=lambda p: p.name)
def test_presentation_knows_no_scenario_by_name(path: Path) -> None:
    source = path.read_text()
    for name in SCENARIOS:  # as a string: compared, looked up, filtered or keyed by
        used = re.search(rf"""["']{name}["']""", source)
        assert not used, f"{path.name} names scenario {name!r}: {used.group(0)}"
    assert not re.search(r"from serbench\.scenarios\.\w+ import", source), path.name


def test_the_presenters_contract_forbids_every_analysis_module_but_the_summary() -> None:
    """A module added to serbench/analysis is forbidden to the presenters until it is the summary."""
    config = (ROOT / "pyproject.toml").read_text()
    block = config[config.index('source_modules = ["serbench.present"]') :].split("]", 2)[1]
    forbidden = set(re.findall(r'"(serbench\.analysis\.\w+)"', block))
    modules = {f"serbench.analysis.{p.stem}" for p in (ROOT / "serbench" / "analysis").glob("*.py")}
    assert forbidden == modules - {"serbench.analysis.__init__", "serbench.analysis.summary"}
