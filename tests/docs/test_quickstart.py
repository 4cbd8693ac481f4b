"""The quickstart's commands, run as written but on a tiny matrix (one backend, one workload,
the micro scenario), in order: a page a new user follows first must work as it says. The
commands that read a results file also run, fast, on a stored one (`make check`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from manual_checks import command_lines, command_words
from suite_paths import FIXTURES, ROOT

QUICKSTART = ROOT / "docs" / "quickstart.md"
TINY = ["--backends", "msgspec-frombuffer", "--workloads", "text-sonnet", "--scenarios", "micro"]
MATRIX_FLAGS = {"--backends", "--workloads", "--scenarios", "--out"}
RESULTS_NAMES = ("reports/latest/results.json", "BASE/results.json", "HEAD/results.json")


def tiny(words: list[str], out: Path) -> list[str]:
    """A ``serbench …`` command's arguments with a run's matrix and folder replaced by the tiny
    one, and the results files it names by the tiny run's."""
    if words[1] != "run":
        return [str(out / "results.json") if word in RESULTS_NAMES else word for word in words[1:]]
    kept, skip = [], False
    for word in words[2:]:
        if not skip and word not in MATRIX_FLAGS:
            kept.append(word)
        skip = not skip and word in MATRIX_FLAGS
    return ["run", *kept, *TINY, "--out", str(out), "--force"]


def quickstart_commands(out: Path) -> list[list[str]]:
    """Every ``serbench`` command in the quickstart's code blocks, made tiny, each once."""
    text = QUICKSTART.read_text()
    made = [tiny(command_words(line), out) for line in command_lines(text)]
    return list(dict.fromkeys(map(tuple, made)))  # type: ignore[arg-type]


def run_all(commands: list[tuple[str, ...]], cwd: Path) -> None:
    """Each command as a user runs it (the example backend importable); each must exit 0."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "docs" / "examples")}
    for arguments in commands:
        done = subprocess.run(
            [sys.executable, "-m", "serbench", *arguments],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=240,
        )
        assert done.returncode == 0, (
            f"serbench {' '.join(arguments)}: exit {done.returncode}\n{done.stderr[-2000:]}"
        )


@pytest.mark.slow
def test_quickstart_commands_run(tmp_path: Path) -> None:
    commands = quickstart_commands(tmp_path / "run")
    assert any(c[0] == "run" for c in commands) and any(c[0] == "compare" for c in commands)
    (tmp_path / "run").mkdir()
    run_all(commands, tmp_path)


def test_quickstart_readers_run_on_a_stored_file(tmp_path: Path) -> None:
    """The quickstart's text-only readers of a results file (``report --format``, ``compare``)
    and ``system``, on a file an older serbench wrote: no run, no page drawn."""
    stored = tmp_path / "run"
    stored.mkdir()
    (stored / "results.json").write_bytes((FIXTURES / "results-schema-1.json").read_bytes())
    readers = [c for c in quickstart_commands(stored) if c[0] in ("compare", "system") or "--format" in c]
    assert {c[0] for c in readers} == {"compare", "report", "system"}, readers
    run_all(readers, tmp_path)
