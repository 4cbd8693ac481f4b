"""Each case counted under two interpreter layouts (``serbench.gate.counting.count_layouts``): the
environments that set them, the folders they write, the counts merged a value per layout."""

from __future__ import annotations

from pathlib import Path

import pytest
from builders import doc, metric, rec
from suite_paths import ROOT

from serbench.gate import counting
from serbench.gate.revision import Revision
from serbench.model.profiles import PROFILES
from serbench.probes import instructions
from serbench.runner.matrix import Plan


def test_the_layouts_differ_in_hash_seed_environment_size_and_heap_margin() -> None:
    first, second = (dict(layout.variables()) for layout in counting.LAYOUTS)
    assert first[instructions.HASH_SEED_VARIABLE] != second[instructions.HASH_SEED_VARIABLE]
    assert len(first[counting.PADDING_VARIABLE]) != len(second[counting.PADDING_VARIABLE])
    assert first[instructions.TOP_PAD_VARIABLE] != second[instructions.TOP_PAD_VARIABLE]
    assert first[instructions.HASH_SEED_VARIABLE] == instructions.HASH_SEED  # the first is the old one
    assert first[instructions.TOP_PAD_VARIABLE] == ""  # glibc's own margin


def test_the_counting_environment_takes_the_layouts_hash_seed(monkeypatch) -> None:
    monkeypatch.delenv(instructions.HASH_SEED_VARIABLE, raising=False)
    assert instructions.counting_environment()["PYTHONHASHSEED"] == instructions.HASH_SEED
    monkeypatch.setenv(instructions.HASH_SEED_VARIABLE, "7")
    assert instructions.counting_environment()["PYTHONHASHSEED"] == "7"


def test_the_counting_environment_sets_the_layouts_heap_margin_after_the_fixed_threshold(monkeypatch) -> None:
    monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
    monkeypatch.setenv(instructions.TOP_PAD_VARIABLE, "")
    assert instructions.counting_environment()["GLIBC_TUNABLES"] == instructions.FIXED_MALLOC
    monkeypatch.setenv(instructions.TOP_PAD_VARIABLE, "0")
    tunables = instructions.counting_environment()["GLIBC_TUNABLES"]
    assert tunables == f"{instructions.FIXED_MALLOC}:glibc.malloc.top_pad=0"


def test_every_case_is_counted_under_each_layout_and_the_counts_merged(monkeypatch, tmp_path: Path) -> None:
    calls = []

    def count(revisions, out, log, suffix):
        calls.append(([dict(r.environment) for r in revisions], suffix))
        value = 100.0 + len(calls)
        return [doc([rec({"decode_instructions": metric([value], "count")})]) for _ in revisions]

    monkeypatch.setattr(counting, "count", count)
    plan = Plan(["pickle"], ["text-sonnet"], ["micro"])
    sides = [Revision(label, ROOT, plan, PROFILES["quick"]) for label in ("base", "head")]
    merged = counting.count_layouts(sides, tmp_path, print)
    assert [suffix for _, suffix in calls] == ["", "-layout-2"]
    for (environments, _), layout in zip(calls, counting.LAYOUTS, strict=True):
        assert environments == [dict(layout.variables())] * 2
    for side in merged:
        (record,) = side.records
        assert record.metrics["decode_instructions"].values == [101.0, 102.0]
    monkeypatch.setattr(counting, "count", lambda revisions, out, log, suffix: None)
    assert counting.count_layouts(sides, tmp_path, print) is None


@pytest.mark.parametrize("extra", [(), (("A", "1"),)])
def test_a_revision_starts_its_processes_with_its_environment(tmp_path: Path, extra) -> None:
    plan = Plan(["pickle"], ["text-sonnet"], ["micro"])
    side = Revision("head", ROOT, plan, PROFILES["quick"], environment=(*extra, ("SERBENCH_T", "x" * 3)))
    proc = side.start(["-c", "import os; print(os.environ['SERBENCH_T'], os.environ.get('A'))"], stdout=-1)
    out, _ = proc.communicate(timeout=60)
    assert out.decode().split() == ["xxx", "1" if extra else "None"]
