"""The unsafe mark is earned: pickle-based decoders run code from their input, the safe ones refuse it.

One crafted payload — a pickle whose ``__reduce__`` calls ``exec`` — is sent
as the frames of a request. Each unsafe backend runs it (the marker file
appears); each safe backend raises ``DecodeError`` and the marker never does.
``serbench list``, the terminal summary and the HTML report mark exactly the
unsafe backends.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from serbench import cli as commands
from serbench.analysis.summary import summarize_run
from serbench.model.results import Backend, Case, Environment, Results, ResultsFile, record
from serbench.model.stats import Measurement
from serbench.present import html as report
from serbench.present import terminal
from serbench.serializers import BUILTINS, DecodeError, get_serializer, is_safe
from serbench.workloads.messages import EngineCoreRequest

UNSAFE = ["pickle", "pickle-oob", "cloudpickle"]
SAFE = ["numpy-intermediate", "msgspec-frombuffer", "flat-mmk", "flat-mmk:threshold=inf"]
UNSAFE_MARK = "NO (runs code from input)"


class _RunsCode:
    """Unpickles into a call of ``exec``: what a hostile peer puts on the socket."""

    def __init__(self, marker: Path) -> None:
        self.source = f"import pathlib; pathlib.Path({str(marker)!r}).write_text('code ran')"

    def __reduce__(self) -> tuple:
        return exec, (self.source,)


def payload(marker: Path) -> list[bytes]:
    """The frames of the attack: one pickle frame, as the pickle backends send a message."""
    return [pickle.dumps(_RunsCode(marker), protocol=5)]


def test_the_backend_lists_agree_with_the_registry() -> None:
    assert sorted(UNSAFE + SAFE[:3]) == sorted(BUILTINS)
    assert [is_safe(get_serializer(name)) for name in UNSAFE + SAFE] == [False] * 3 + [True] * 4


@pytest.mark.parametrize("spec", UNSAFE)
def test_unsafe_backend_runs_code_from_its_input(tmp_path: Path, spec: str) -> None:
    marker = tmp_path / "marker"
    get_serializer(spec).decode(payload(marker), EngineCoreRequest)
    assert marker.read_text() == "code ran"


@pytest.mark.parametrize("spec", SAFE)
def test_safe_backend_refuses_the_same_bytes(tmp_path: Path, spec: str) -> None:
    marker = tmp_path / "marker"
    for type_ in (EngineCoreRequest, object):
        with pytest.raises(DecodeError, match=r"\S"):
            get_serializer(spec).decode(payload(marker), type_)
    assert not marker.exists()


def test_serbench_list_marks_exactly_the_unsafe_backends(capsys: pytest.CaptureFixture[str]) -> None:
    assert commands.main(["list"]) == 0
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines() if line.strip()}
    for name in BUILTINS:
        assert (UNSAFE_MARK in rows[name]) == (name in UNSAFE), rows[name]


def results_document(folder: Path, specs: list[str]) -> Results:
    """A results document with one micro record per backend, safety as each declares."""
    metric = Measurement(unit="s", values=[1e-3], median=1e-3, ci_low=1e-3, ci_high=1e-3)
    metrics = dict.fromkeys(("encode_s", "decode_s", "roundtrip_s"), metric)
    backends = {s: Backend(safe=s in SAFE) for s in specs}
    run = ResultsFile(folder / "results.json", Environment(), "quick", backends)
    for spec in specs:
        run.add(record(Case("micro", spec, "text-sonnet"), metrics=metrics))
    return run.results


# Each view of a results document, and how it marks an unsafe backend next to its name.
VIEWS = {
    "summary": (lambda data: terminal.render(summarize_run(data), verbose=True), "{} (unsafe)"),
    "report": (lambda data: report.render(summarize_run(data)), '{} <span class="badge bad"'),
}


@pytest.mark.parametrize("view", sorted(VIEWS))
def test_summary_and_report_mark_exactly_the_unsafe_backends(tmp_path: Path, view: str) -> None:
    render, mark = VIEWS[view]
    text = render(results_document(tmp_path, UNSAFE + SAFE))
    for spec in UNSAFE + SAFE:
        assert spec in text
        assert (mark.format(spec) in text) == (spec in UNSAFE), spec
