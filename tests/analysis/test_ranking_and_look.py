"""The ranking against a baseline, the exported summary tables, stable colours and legends that fit,
the system check and where a run records it (synthetic documents; no timings)."""

from __future__ import annotations

import math

import pytest
from builders import doc, memory_info, metric, rec, samples

from serbench import cli as commands
from serbench.analysis import ranking
from serbench.analysis.summary import summarize_run
from serbench.model import results
from serbench.model.results import Backend, Results
from serbench.present import markdown, terminal
from serbench.present.html import plots, run_page
from serbench.probes import environment, system


def ranked_doc() -> Results:
    """pickle at 1x, fast at 1/4 and 1/2 on two workloads, slow at 2x on one."""
    records = []
    for backend, factors in {"pickle": (1, 1), "fast": (0.25, 0.5), "slow": (2.0, None)}.items():
        for workload, factor in zip(("w1", "w2"), factors, strict=True):
            if factor is not None:
                records.append(rec({"roundtrip_s": metric(samples(1, factor))}, backend, workload))
    data = doc(records)
    data.backends = {
        "pickle": Backend(name="pickle", safe=False),
        "fast": Backend(name="fast", safe=True),
        "slow": Backend(name="slow", safe=None),
    }
    return data


def test_ranking_is_speedup_over_the_baseline_with_its_geometric_mean_and_interval() -> None:
    ranked = ranking.ranking(ranked_doc(), "micro", "pickle")
    assert [r.backend for r in ranked] == ["fast", "pickle", "slow"]
    assert [r.place for r in ranked] == ["1", "2", "3"]  # told apart: no tie
    fast = ranked[0]
    assert fast.factors == pytest.approx({"w1": 4.0, "w2": 2.0}, rel=0.02)
    assert fast.geomean.ratio == pytest.approx(math.sqrt(8.0), rel=0.02)
    assert fast.geomean.low < fast.geomean.ratio < fast.geomean.high
    assert (ranked[2].n, ranked[2].geomean.ratio) == (1, pytest.approx(0.5, rel=0.02))  # one workload
    assert ranking.ranking(ranked_doc(), "micro", "absent") == []


def test_rows_within_noise_share_a_rank() -> None:
    factors = {"pickle": 1.0, "a": 0.5, "b": 0.501, "c": 0.8, "d": 0.801}
    data = doc(
        [rec({"roundtrip_s": metric(samples(seed, f))}, b) for seed, (b, f) in enumerate(factors.items())]
    )
    ranked = ranking.ranking(data, "micro", "pickle")
    assert [(r.backend, r.place) for r in ranked] == [
        ("a", "1="), ("b", "1="), ("c", "3="), ("d", "3="), ("pickle", "5"),
    ]  # fmt: skip
    table = next(terminal.ranking_table(r) for r in summarize_run(data).rankings if r.scenario == "micro")
    assert [row[0] for row in table.rows] == ["1=", "1=", "3=", "3=", "5"]
    assert table.headers[-3:] == ["geomean", "95% CI", "n"] and table.rows[0][-2].startswith("[")


def memory_doc() -> Results:
    """Engine payload copies of pickle, a zero-copy backend, its threshold=inf variant, on text
    (no payload, where the zero-copy backend happens to look worse) and two image workloads."""
    peaks = {
        "pickle": (4e5, 1.2e8, 9.2e8),
        "zero": (5e5, 3.9e7, 3.1e8),
        "zero:threshold=inf": (5e5, 7.7e7, 6.2e8),
    }
    records = []
    for backend, values in peaks.items():
        for workload, peak in zip(("text-sonnet", "images-4", "images-32"), values, strict=True):
            info = memory_info(0 if workload == "text-sonnet" else int(peak / 3))
            case = results.Case("memory", backend, workload, "ipc")
            measured = {"copies": metric([peak / 1e8], "ratio")}
            records.append(results.record(case, metrics=measured, info=info))
    return doc(records)


def test_the_memory_ranking_speaks_of_memory_leaves_text_out_and_ranks_variants_apart() -> None:
    data = memory_doc()
    ranked = ranking.ranking(data, "memory", "pickle")
    assert [(r.backend, r.place) for r in ranked] == [
        ("zero", "1"),
        ("pickle", "2"),
        ("zero:threshold=inf", "v1"),
    ]
    zero = ranked[0]
    assert zero.factors["text-sonnet"] == pytest.approx(1.25)  # shown ...
    assert zero.n == 2 and zero.geomean.ratio == pytest.approx(math.sqrt(3.9e7 / 1.2e8 * 3.1e8 / 9.2e8))
    (table,) = [terminal.ranking_table(r) for r in summarize_run(data).rankings]
    assert (
        table.title
        == "memory: ranking by engine copies (extra peak / payload), × peak memory vs pickle, lower is better"
    )
    assert "speed-up" not in table.title and "text-sonnet: no tensor payload, left out" in table.note
    assert "vN: variants" in table.note


def test_summary_tables_export_as_markdown(capsys, tmp_path) -> None:
    """Markdown for a pull request; the numbers a program reads are export's (test_exports)."""
    data = ranked_doc()
    md = markdown.run_markdown(summarize_run(data, "fast"))
    assert "### micro: ranking by encode + decode, speed-up (×) against fast, higher is better" in md
    assert "| slow (safety undeclared) |" in md and "| pickle (unsafe) |" in md
    assert "| 2 | pickle | 0.25 | 0.5 | 0.354 | [0.35, 0.36] | 2 |" in md
    path = tmp_path / "results.json"
    results.save(path, data)
    assert commands.main(["report", str(path), "--format", "md", "--baseline", "fast"]) == 0
    assert capsys.readouterr().out == md


def test_a_summary_table_keeps_the_scale_its_middle_values_read_in() -> None:
    """TTFT from 8 ms (text) to 1.04 s (in-band pickle at images-32) reads in ms, whole past
    1000: one slow case does not turn the table into seconds."""
    ttft = {("pickle", "text"): 0.0079, ("pickle", "images"): 1.04, ("fast", "text"): 0.0081}
    ttft |= {("fast", "images"): 0.272, ("slow", "text"): 0.0088, ("slow", "images"): 0.29}
    records = [
        rec({"ttft_s": metric([value] * 5)}, backend, workload, scenario="ipc", transport="ipc")
        for (backend, workload), value in ttft.items()
    ]
    (table,) = [t for t in terminal.tables(summarize_run(doc(records))) if t.title.startswith("ipc: TTFT (")]
    assert table.title == "ipc: TTFT (ms, median)"
    assert table.rows[0][1:] == ["7.9", "1,040"]
    assert table.rows[1][1:] == ["8.1", "272"]


def test_report_page_ranks_and_marks_undeclared_safety() -> None:
    page = run_page.render(summarize_run(ranked_doc(), "pickle"), "x.json")
    assert "Ranking against pickle" in page and "geometric mean" in page
    assert ">undeclared</span>" in page


def test_a_backend_keeps_its_colour_in_every_report_and_variants_share_it() -> None:
    alone = plots.palette(["flat-mmk"])["flat-mmk"]
    crowded = plots.palette(["mine", "pickle", "cloudpickle", "flat-mmk", "x.y:z"])
    assert crowded["flat-mmk"] == alone
    assert len(set(crowded.values())) == len(crowded)
    assert plots.backend_colour("flat-mmk:threshold=inf") == alone  # line_style dashes / hatches it
    assert plots.backend_colour("mypkg.myser:factory") == plots.backend_colour("mypkg.myser:factory")


def test_legend_columns_fit_the_figure() -> None:
    labels = ["pickle", "pickle-oob", "msgspec-frombuffer:threshold=inf", "flat-mmk:threshold=inf"] * 2
    columns = plots.legend_columns(labels, plots.WIDTH_IN)
    longest = max(map(len, labels))
    assert columns * (plots.LEGEND_ENTRY_IN + plots.LEGEND_CHAR_IN * longest) <= plots.WIDTH_IN
    assert plots.legend_columns(["a", "b"]) == 2


def test_system_checks_warn_only_on_settings_that_are_known_to_be_bad(monkeypatch) -> None:
    monkeypatch.setattr(system.os, "getloadavg", lambda: (64.0, 0.0, 0.0))
    checks = {c.name: c for c in system.check()}
    assert checks["load average (1 min)"].ok is False
    # as a results file stores them: the environment's ``system``, written and read back
    run = Results(environment=results.Environment(system=list(checks.values())), records=[])
    stored = results.decode(results.encode(run)).environment.system
    warned = system.warnings(stored)
    assert any(w.startswith("load average (1 min): 64.00") for w in warned)
    assert len(warned) == sum(c.ok is False for c in checks.values())  # unknown is not a warning
    assert {c.name for c in environment.collect([]).system} == set(checks)
