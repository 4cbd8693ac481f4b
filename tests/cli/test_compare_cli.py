"""``serbench compare``: exit codes, --force, thresholds, Markdown and exports (synthetic files)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from builders import doc, metric, rec, samples, schema_1_and_2

from serbench import cli as commands
from serbench.model import results
from serbench.model.metrics import compared
from serbench.model.stats import Measurement


def write(path: Path, data: results.Results) -> str:
    results.save(path, data)
    return str(path)


def files(tmp_path: Path, head_factor: float = 1.0, **head_env: object) -> tuple[str, str]:
    """BASE.json and HEAD.json for one case, head's encode slowed by ``head_factor``."""

    def side(seed: int, factor: float) -> dict[str, Measurement]:
        return {
            "encode_s": metric(samples(seed, factor)),
            "payload_gb_per_s": metric(samples(seed, 1 / factor), "GB/s"),
            "wire_bytes": metric([1712], "bytes"),
        }

    base = write(tmp_path / "base.json", doc([rec(side(1, 1.0), "msgspec-frombuffer", "text-sonnet")]))
    head_doc = doc([rec(side(2, head_factor), "msgspec-frombuffer", "text-sonnet")], **head_env)
    return base, write(tmp_path / "head.json", head_doc)


def test_no_regression_exits_0(tmp_path, capsys) -> None:
    assert commands.main(["compare", *files(tmp_path)]) == 0
    assert "no regression in 3 comparison(s)" in capsys.readouterr().out


def test_a_regression_exits_1_with_table_markdown_and_reproduce_command(tmp_path, capsys) -> None:
    md = tmp_path / "summary.md"
    head_commit = files(tmp_path, 1.25, git_commit="b" * 40)
    assert commands.main(["compare", *head_commit, "--markdown", str(md), "--strict"]) == 1
    out = capsys.readouterr().out
    first_row = out.splitlines()[2]
    assert first_row.startswith("REGRESSION")
    assert "encode_s" in first_row or "payload_gb_per_s" in first_row  # slowed 1.25: the worst rows
    assert "serbench gate --base aaaaaaaaaaaa --scenarios micro --backends msgspec-frombuffer" in out
    text = md.read_text()
    assert text.startswith("## ❌ serbench: 2 regression(s) in 1 case(s)")
    assert "| REGRESSION | micro msgspec-frombuffer × text-sonnet | encode_s |" in text


def test_a_threshold_above_the_slowdown_lets_it_pass(tmp_path) -> None:
    base, head = files(tmp_path, 1.25)
    assert commands.main(["compare", base, head, "--max-regression", "50%", "--strict"]) == 0
    tighter = ["--max-regression", "50%", "--metric-threshold", "encode_s=5%", "--strict"]
    assert commands.main(["compare", base, head, *tighter]) == 1


def test_plain_runs_are_indicative_exit_0_and_changes_only_hides_the_rest(tmp_path, capsys) -> None:
    assert commands.main(["compare", *files(tmp_path, 1.25), "--changes-only"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[2].startswith("slower (indicative)")
    assert "1 row(s) without change not shown" in out  # wire_bytes
    assert "wire_bytes" not in out.split("not shown")[0]
    assert "no regression in 3 comparison(s); 2 indicative change(s)" in out
    assert commands.main(["compare", *files(tmp_path, 1.25), "--strict"]) == 1
    # Both runs of one commit: a gate of it against itself would say nothing; a run again does.
    assert "  serbench run --scenarios micro --backends msgspec-frombuffer" in capsys.readouterr().out


def test_incomparable_environments_exit_2_unless_forced(tmp_path, capsys) -> None:
    base, head = files(tmp_path, cpu="Intel Xeon", cpu_count=64)
    assert commands.main(["compare", base, head]) == 2
    err = capsys.readouterr().err
    assert "cpu: 'AMD EPYC' vs 'Intel Xeon'" in err and "cpu_count: 2 vs 64" in err and "--force" in err
    assert commands.main(["compare", base, head, "--force"]) == 0
    assert "environment differs (--force): cpu" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "not valid JSON"),
        (json.dumps({"schema": "serbench-results/0"}), "schema 'serbench-results/0'"),
        (json.dumps({"hello": 1}), "not a serbench results file"),
    ],
)
def test_unusable_input_exits_2(tmp_path, capsys, content: str, message: str) -> None:
    base, _ = files(tmp_path)
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    assert commands.main(["compare", base, str(bad)]) == 2
    assert message in capsys.readouterr().err


def test_a_missing_file_and_a_bad_threshold_exit_2(tmp_path) -> None:
    base, head = files(tmp_path)
    assert commands.main(["compare", base, str(tmp_path / "nope.json")]) == 2
    assert commands.main(["compare", base, head, "--max-regression", "lots"]) == 2
    assert commands.main(["compare", base, head, "--metric-threshold", "encode_s"]) == 2


def test_export_bencher(tmp_path) -> None:
    out = tmp_path / "bmf.json"
    assert commands.main(["compare", *files(tmp_path), "--export", str(out)]) == 0
    bmf = json.loads(out.read_text())
    measure = bmf["micro/msgspec-frombuffer/text-sonnet"]["encode_s"]
    assert measure["lower_value"] <= measure["value"] <= measure["upper_value"]
    assert set(bmf["micro/msgspec-frombuffer/text-sonnet"]) == {"encode_s", "payload_gb_per_s", "wire_bytes"}


def test_export_github_action_benchmark_keeps_smaller_is_better_only(tmp_path) -> None:
    out = tmp_path / "gab.json"
    args = ["--export", str(out), "--export-format", "github-action-benchmark"]
    assert commands.main(["compare", *files(tmp_path), *args]) == 0
    entries = json.loads(out.read_text())
    assert [e["name"] for e in entries] == [
        "micro/msgspec-frombuffer/text-sonnet encode_s",
        "micro/msgspec-frombuffer/text-sonnet wire_bytes",
    ]
    assert entries[1] | {"extra": ""} == {"name": entries[1]["name"], "unit": "bytes", "value": 1712.0,
                                          "range": "1712..1712", "extra": ""}  # fmt: skip


def test_compare_reads_a_schema_1_file_against_itself_and_as_schema_2(tmp_path, capsys) -> None:
    """The previous serbench's file against itself and against its schema-2 copy: every case
    in common (shm ones as ``@shm`` rows), no change, exit 0 even with --strict."""
    old, new = schema_1_and_2(tmp_path)
    data = results.load(old)
    expected = sum(len(list(filter(compared, r.metrics))) for r in data.of())
    failed = [r for r in data.records if not r.ok]
    assert expected and failed
    for base, head in ((old, old), (old, new)):
        assert commands.main(["compare", str(base), str(head), "--strict"]) == 0
        out = capsys.readouterr().out
        assert f"no regression in {expected} comparison(s); " in out  # and inconclusive ones
        assert "added:" not in out and "removed:" not in out and "environment differs" not in out
        lines = out.splitlines()
        for shm in ("ipc pickle@shm × images-4", "memory msgspec-frombuffer:threshold=inf@shm × outputs-8"):
            assert any(line.startswith(("no change", "inconclusive")) and shm in line for line in lines)
        for case in failed:
            assert f"failed in head: {case.scenario} {case.row} {case.workload}: {case.error}" in out
