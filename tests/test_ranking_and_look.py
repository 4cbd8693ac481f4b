"""The ranking against a baseline, the exported summary tables, stable colours and legends that fit,
the system check and where a run records it (synthetic documents; no timings)."""

from __future__ import annotations

import colorsys
import csv
import io
import json
import math

import matplotlib.colors
import pytest
from test_compare import doc, metric, rec, samples

from serbench import commands, compare, environment, results, system, text
from serbench.report import plots, run_page
from serbench.results import Backend, Results


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


def test_ranking_is_speedup_over_the_baseline_with_its_geometric_mean() -> None:
    ranked = compare.ranking(ranked_doc(), "micro", "pickle")
    assert [r.backend for r in ranked] == ["fast", "pickle", "slow"]
    fast = ranked[0]
    assert fast.speedups == pytest.approx({"w1": 4.0, "w2": 2.0})
    assert fast.geomean == pytest.approx(math.sqrt(8.0))
    assert (ranked[2].n, ranked[2].geomean) == (1, pytest.approx(0.5))  # one workload measured
    assert compare.ranking(ranked_doc(), "micro", "absent") == []


def test_summary_tables_export_as_markdown_csv_and_json(capsys, tmp_path) -> None:
    data = ranked_doc()
    md = text.export_summary(data, "md", "fast")
    assert "### micro: ranking by encode + decode, speed-up (×) against fast" in md
    assert "| slow (safety undeclared) |" in md and "| pickle (unsafe) |" in md
    rows = list(csv.reader(io.StringIO(text.export_summary(data, "csv"))))
    ranking = [r for r in rows if r[0].startswith("micro: ranking")]
    assert [r[2] for r in ranking] == ["fast", "pickle", "slow"]
    assert float(ranking[0][-2]) == pytest.approx(math.sqrt(8.0), rel=0.01)  # geomean, a plain number
    tables = json.loads(text.export_summary(data, "json"))
    assert {"title", "headers", "rows"} == set(tables[0])
    path = tmp_path / "results.json"
    results.save(path, data)
    assert commands.main(["report", str(path), "--format", "md", "--baseline", "fast"]) == 0
    assert capsys.readouterr().out == md


def test_report_page_ranks_and_marks_undeclared_safety() -> None:
    page = run_page.render(ranked_doc(), "x.json", baseline="pickle")
    assert "Ranking against pickle" in page and "geometric mean" in page
    assert ">undeclared</span>" in page


def _hue(hex_colour: str) -> tuple[float, float, float]:
    return colorsys.rgb_to_hls(*matplotlib.colors.to_rgb(hex_colour))


def test_a_backend_keeps_its_colour_in_every_report_and_variants_share_its_hue() -> None:
    alone = plots.palette(["flat-mmk"])["flat-mmk"]
    crowded = plots.palette(["mine", "pickle", "cloudpickle", "flat-mmk", "x.y:z"])
    assert crowded["flat-mmk"] == alone
    assert len(set(crowded.values())) == len(crowded)
    variant = plots.backend_colour("flat-mmk:threshold=inf")
    assert variant != alone
    (h1, l1, _), (h2, l2, _) = _hue(alone), _hue(variant)
    assert h1 == pytest.approx(h2, abs=0.02) and l2 > l1  # same hue, lighter
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
