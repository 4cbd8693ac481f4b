"""A gate run in a clone over an appended commit, and the backends its tests commit: for the gate's
tests and those of the caches it must judge."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from suite_paths import ROOT

from serbench import cli as commands


def git(repo: Path, *args: str) -> str:
    command = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args]
    return subprocess.run(command, cwd=repo, capture_output=True, text=True, check=True).stdout.strip()


def clone_working_tree(clone: Path) -> None:
    """A clone of this repository whose last commit is this working tree as it is (tracked and
    untracked files, ignored ones left out): the code under test, committed or not, on both
    sides of a gate run there."""
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    listed = git(ROOT, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
    for name in filter(None, listed.split("\0")):
        source, target = ROOT / name, clone / name
        if source.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
        elif not source.exists():
            target.unlink(missing_ok=True)  # deleted in the working tree
    git(clone, "add", "-A")
    git(clone, "commit", "-qm", "the working tree", "--allow-empty")


def gate_over_an_appended_commit(
    tmp_path: Path, monkeypatch, capsys, module: str, text: str, options: list[str]
) -> tuple[int, str, list[str]]:
    """``serbench gate --base HEAD~1 OPTIONS`` in a clone of this working tree whose head commit
    appends ``text`` to ``module`` (a fault a test injects, or a blank line): its exit code, what
    it printed, and the rows it flagged."""
    clone = tmp_path / "clone"
    clone_working_tree(clone)
    path = clone / module
    path.write_text(path.read_text() + (text or "\n"))
    git(clone, "commit", "-qam", "head")
    monkeypatch.chdir(clone)
    code = commands.main(["gate", "--base", "HEAD~1", "--out", str(tmp_path / "out"), *options])
    printed = capsys.readouterr().out
    return code, printed, [line for line in printed.splitlines() if line.startswith("REGRESSION")]


def assert_the_gate_judges_the_fault(
    tmp_path: Path,
    monkeypatch,
    capsys,
    module: str,
    fault: str,
    options: list[str],
    metrics: tuple[str, ...],
    case: str,
) -> None:
    """``gate_over_an_appended_commit`` with ``fault`` appended to ``module``: a fault makes the
    gate exit 1 with a row of one of ``metrics`` flagged and ``case`` named; no fault ("") makes it
    exit 0 with no row flagged."""
    code, printed, flagged = gate_over_an_appended_commit(
        tmp_path, monkeypatch, capsys, module, fault, options
    )
    if fault:
        assert code == 1, printed
        assert any(name in line for line in flagged for name in metrics), printed
        assert case in printed
    else:
        assert code == 0 and flagged == [], printed


BASE_BACKEND = """
from serbench.serializers import get_serializer


def make():
    return get_serializer("msgspec-frombuffer")
"""


# Head's version sends one extra empty frame where its process has GATE_PADDED set: a
# machine-independent regression (frames +1, wire bytes unchanged) that the gate must flag
# whatever the timing noise (tests/gate/test_gate_packages.py sets it in one side's interpreter only).
PADDED = "GATE_PADDED"


HEAD_BACKEND = """
import os

from serbench.serializers import get_serializer, unsupported_cases


class Padded:
    name = "padded"
    safe = True

    def __init__(self):
        self.inner = get_serializer("msgspec-frombuffer")
        self.unsupported = unsupported_cases(self.inner)
        self.pad = [b""] if os.environ.get("GATE_PADDED") else []

    def encode(self, obj):
        return [*self.inner.encode(obj), *self.pad]

    def decode(self, frames, type_):
        return self.inner.decode(list(frames)[: len(frames) - len(self.pad)], type_)


def make():
    return Padded()
"""
