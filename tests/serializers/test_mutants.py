"""The conformance suite is proven by mutants: every one of them fails it (mutation score 100 %).

Each mutant in ``tests/backends/mutants.py`` is a built-in backend with one
realistic bug. If one ever passes, a specimen is missing from the suite.
"""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from mutants import MUTANTS, mutant
from suite_paths import ROOT

from serbench.serializers import conformance


def test_there_are_at_least_twelve_mutants() -> None:
    assert len(MUTANTS) >= 12


@pytest.mark.parametrize("bug", list(MUTANTS))
def test_the_named_specimen_kills_the_mutant(bug: str) -> None:
    backend = mutant(bug)
    killer = MUTANTS[bug][1]
    specimen = next(s for s in conformance.specimens(backend.threshold) if s.id == killer)
    verdict = conformance.check_specimen(backend, specimen)
    assert verdict.status == "fail", f"{bug} survives {killer}"


def test_pytest_with_backend_fails_for_every_mutant(tmp_path: Path) -> None:
    """``pytest tests/serializers/test_conformance.py --backend MUTANT`` fails for each, at its
    killing specimen.

    One pytest run for all mutants, on the one test per mutant that must fail
    (the whole suite per mutant is the in-process test above, ×100 the time).
    """
    report = tmp_path / "junit.xml"
    specs = {bug: f"mutants:mutant:bug={bug}" for bug in MUTANTS}
    test = "tests/serializers/test_conformance.py::test_case_round_trips_or_is_truly_unsupported"
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={report}"]
    command += [f"{test}[{spec}-{MUTANTS[bug][1]}]" for bug, spec in specs.items()]
    command += [arg for spec in specs.values() for arg in ("--backend", spec)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    outcomes = {
        case.get("name"): case.find("failure") is not None for case in ET.parse(report).iter("testcase")
    }
    assert len(outcomes) == len(MUTANTS)
    assert [name for name, failed in outcomes.items() if not failed] == []
