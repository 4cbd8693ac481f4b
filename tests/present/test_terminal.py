"""The answer on one screen: a default run prints one headline table per scenario and the
decision, last; --verbose and ``serbench report --format text`` print every table."""

from __future__ import annotations

import msgspec
import numpy as np
import pytest
from builders import doc, memory_info

from serbench import cli as commands
from serbench.analysis.summary import RunSummary, summarize_run
from serbench.model import results
from serbench.model.results import Backend, Case, Record, Results
from serbench.model.stats import Measurement, summarize
from serbench.present import terminal
from serbench.present.html import run_page
from serbench.serializers import BUILTINS

WORKLOADS = {"text-sonnet": 0, "images-4": 38_000_000, "images-32": 300_000_000}
UNSAFE = ("pickle", "pickle-oob", "cloudpickle")
# What the default run prints before the summary: the results line and a blank line.
PATHS = 2
SCREEN = 60


def _timed(rng: np.random.Generator, pairs: dict[str, float]) -> dict[str, Measurement]:
    return {
        name: summarize(list(center * rng.lognormal(0.0, 0.03, 30)), "s") for name, center in pairs.items()
    }


def _records(backend: str, index: int, rng: np.random.Generator) -> list[Record]:
    """One backend's micro, ipc and memory cases on the default workloads: the unsafe ones
    fastest in micro, slower in ipc and copying more with a payload, as pickle does."""
    out = []
    unsafe = backend in UNSAFE
    for workload, payload in WORKLOADS.items():
        size = 1 + payload / 1e7
        speed = size * (1 + index / 10)
        slower = 1 + (2 * unsafe if payload else index / 10)
        micro = _timed(rng, {"encode_s": 1e-5 * speed, "decode_s": 1e-5 * speed, "roundtrip_s": 2e-5 * speed})
        ipc = _timed(
            rng, {"ttft_s": 1e-2 * size * slower, "ttft_p99_s": 2e-2 * size, "ingress_s": 1e-3 * size}
        )
        copies = 1 + unsafe + index / 20
        memory = {
            "copies": summarize([copies] * 3, "ratio"),
            "copies_frontend": summarize([1.0] * 3, "ratio"),
            "peak_rss_engine_bytes": summarize([payload * copies + 1e6] * 3, "bytes"),
        }
        out += [
            results.record(Case("micro", backend, workload), metrics=micro),
            results.record(Case("ipc", backend, workload, "ipc"), metrics=ipc),
            results.record(
                Case("memory", backend, workload, "ipc"), metrics=memory, info=memory_info(payload)
            ),
        ]
    return out


@pytest.fixture(scope="module")
def default_matrix() -> Results:
    """The default matrix's shape: the built-in backends × text-sonnet, images-4, images-32 ×
    micro, ipc, memory; pickle unsafe, the others safe."""
    rng = np.random.default_rng(64)
    records = [r for i, backend in enumerate(BUILTINS) for r in _records(backend, i, rng)]
    safety = {backend: Backend(safe=backend not in UNSAFE) for backend in BUILTINS}
    return Results(complete=True, backends=safety, records=records)


@pytest.fixture(scope="module")
def summary(default_matrix: Results) -> RunSummary:
    return summarize_run(default_matrix)


def test_the_default_output_fits_a_screen_and_ends_with_the_decision(summary: RunSummary) -> None:
    shown = terminal.render(summary)
    assert len(shown.splitlines()) + PATHS <= SCREEN, shown
    assert shown.endswith(terminal.decision_block(summary))
    assert shown.index("DECISION") > max(shown.index(f"{s}: ") for s in ("micro", "ipc", "memory"))


def test_the_default_output_holds_only_the_headline_tables(summary: RunSummary) -> None:
    shown = terminal.render(summary)
    titles = [line for line in shown.splitlines() if line.startswith(("micro: ", "ipc: ", "memory: "))]
    assert titles == [
        "micro: encode + decode (µs, median)",
        "ipc: TTFT (ms, median)",
        "memory: engine copies (extra peak / payload) (median)",
    ]
    assert "ranking" not in shown and "TTFT p99" not in shown and "decode time" not in shown


def test_verbose_prints_every_table(summary: RunSummary) -> None:
    shown = terminal.render(summary, verbose=True)
    every = [t for s in summary.scenarios for t in [s.headline, *s.metrics] if t is not None]
    assert len(every) > 3
    for t in every:
        assert t.title in shown
    assert all(r.title in shown for r in summary.rankings) and summary.rankings
    assert shown.endswith(terminal.decision_block(summary, verbose=True))


def test_report_as_text_prints_every_table(default_matrix: Results, tmp_path, capsys) -> None:
    path = tmp_path / "results.json"
    results.save(path, default_matrix)
    assert commands.main(["report", str(path), "--format", "text"]) == 0
    printed = capsys.readouterr().out
    assert printed.rstrip("\n") == terminal.render(summarize_run(default_matrix), verbose=True)
    assert "TTFT p99" in printed and "ranking by TTFT" in printed


def test_the_legend_is_one_line(summary: RunSummary) -> None:
    block = terminal.decision_block(summary).splitlines()
    assert block[0] == terminal.DECISION_LEGEND and len(block[0]) <= terminal.DECISION_WIDTH
    assert not block[1].startswith(" ")  # the first shape follows at once


def test_the_run_says_where_its_time_went_in_one_line_and_on_its_page() -> None:
    """Per scenario, the visits its cases took (a case measured whole: one) and their seconds,
    in one line above the decision and in the page's time section."""
    records = [
        msgspec.structs.replace(
            results.record(Case(scenario, backend, "images-4")), rounds=rounds, duration_s=seconds
        )
        for scenario, backend, rounds, seconds in (
            ("micro", "pickle", 3, 1.5),
            ("micro", "flat-mmk", None, 0.5),
            ("memory", "pickle", None, 4.0),
        )
    ]
    summary = summarize_run(Results(complete=True, records=records))
    assert [(t.scenario, t.visits, t.seconds) for t in summary.time] == [
        ("micro", 4, 2.0),
        ("memory", 1, 4.0),
    ]
    line = "time: micro 4 visits in 2 s, memory 1 visits in 4 s"
    assert terminal.time_line(summary.time) == line
    shown = terminal.render(summary).splitlines()
    assert sum(row.startswith("time: ") for row in shown) == 1 and line in shown
    page = run_page.render(summary)
    assert "Where the time went" in page and "<td>micro</td><td>4</td><td>2</td>" in page


def test_the_default_output_shows_the_time_line_right_above_the_decision(summary: RunSummary) -> None:
    shown = terminal.render(summary)
    assert f"{terminal.time_line(summary.time)}\n{terminal.decision_block(summary)}" in shown


def test_unsupported_cases_are_one_line_per_reason_apart_from_the_failed() -> None:
    """A reason a backend or a layout gives is often a whole column: one line names it once, with
    the backends and their case counts; a failure keeps its own line."""
    why = "layout=x is another library's types"
    records = [
        results.record(Case("micro", backend, workload), error=f"unsupported: {why}", unsupported=why)
        for backend in ("a", "b")
        for workload in ("w1", "w2")
    ]
    records.append(results.record(Case("micro", "c", "w1"), error="boom"))
    summary = summarize_run(doc(records))
    assert [r.backend for r in summary.failed] == ["c"]
    assert summary.unsupported == {why: ["a (2)", "b (2)"]}
    text = terminal.render(summary)
    assert f"unsupported (cases not run):\n  a (2), b (2): {why}" in text
    assert "failed cases:\n  micro c × w1: boom" in text and text.count(why) == 1
