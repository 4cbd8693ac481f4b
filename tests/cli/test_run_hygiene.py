"""What a user meets around a run: the output folder, file modes, progress, --help, --version."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from serbench import __version__
from serbench import cli as commands
from serbench.model import results
from serbench.present.html import write_page


def _serbench(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "serbench", *args], cwd=cwd, capture_output=True, text=True, timeout=300
    )


@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_results_and_report_are_readable_by_others(tmp_path: Path, umask_022: None) -> None:
    results.save(tmp_path / "results.json", results.Results(records=[]))
    page = write_page("<html></html>", tmp_path)
    assert _mode(tmp_path / "results.json") == 0o644
    assert _mode(page) == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == ["index.html", "results.json"]  # no temp files


def test_a_non_empty_out_folder_is_refused_without_force(tmp_path: Path) -> None:
    (tmp_path / "results.json").write_text("earlier run")
    with pytest.raises(results.ResultsError, match=r"not empty .*--force"):
        results.output_folder(str(tmp_path), must_be_empty=True)
    assert (tmp_path / "results.json").read_text() == "earlier run"
    assert results.output_folder(str(tmp_path), must_be_empty=False) == tmp_path
    assert results.output_folder(str(tmp_path / "new"), must_be_empty=True).is_dir()


def test_run_into_a_used_folder_exits_2_and_keeps_it(tmp_path: Path, capsys) -> None:
    (tmp_path / "results.json").write_text("earlier run")
    args = ["run", "--scenarios", "micro", "--workloads", "text-sonnet", "--out", str(tmp_path)]
    code = commands.main(args)
    assert code == 2
    assert "--force" in capsys.readouterr().err
    assert (tmp_path / "results.json").read_text() == "earlier run"


def test_forced_run_ends_its_progress_done_with_0644_files(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    proc = _serbench(
        "run", "--scenarios", "micro", "--backends", "msgspec-frombuffer", "--workloads", "text-sonnet",
        "--out", str(tmp_path), "--force", cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]  # stderr is a pipe: plain lines, no bar
    assert re.fullmatch(r"\[(\d+)/\1\] done", last), last  # every visit (micro's rounds) made
    assert "\r" not in proc.stderr
    assert (tmp_path / "notes.txt").read_text() == "mine"
    umask = os.umask(0)
    os.umask(umask)
    for name in ("results.json", "index.html"):
        assert _mode(tmp_path / name) == 0o666 & ~umask, name


def test_help_is_for_users_and_names_the_memory_variants(capsys) -> None:
    with pytest.raises(SystemExit):
        commands.main(["run", "--help"])
    out = capsys.readouterr().out
    assert "serbench.runner.matrix" not in out and "JSON request" not in out  # no internals
    assert "threshold=inf" in out  # what memory adds beside the backends asked for
    with pytest.raises(SystemExit):
        commands.main(["--version"])
    assert capsys.readouterr().out.strip() == f"serbench {__version__}"


def test_a_bad_threshold_is_named_before_the_files_are_read(tmp_path: Path, capsys) -> None:
    code = commands.main(["compare", "missing-a.json", "missing-b.json", "--max-regression", "abc"])
    assert code == 2
    assert "--max-regression" in capsys.readouterr().err
