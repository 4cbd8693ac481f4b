"""``serbench conformance``: the README's own-serializer example, verbatim, from an empty folder.

The example (``docs/examples/mypkg/myser.py``, the README's code block) is
copied into an empty temporary folder and the README's command runs there as
a user's shell would run it: the installed ``serbench`` script, nothing of
serbench's tests on the path.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from suite_paths import ROOT

from serbench import cli as commands

EXAMPLE = ROOT / "docs" / "examples" / "mypkg"
SERBENCH = Path(sys.executable).with_name("serbench")  # the console script of this environment
README_COMMAND = ["conformance", "mypkg.myser:factory"]


def test_readme_example_passes_from_an_empty_folder(tmp_path: Path) -> None:
    shutil.copytree(EXAMPLE, tmp_path / "mypkg")
    done = subprocess.run(
        [str(SERBENCH), *README_COMMAND], cwd=tmp_path, capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, done.stdout + done.stderr
    row = next(line for line in done.stdout.splitlines() if line.startswith("mine "))
    assert "mypkg.myser:factory" in row and "undeclared" in row  # its own name; no claim it never made
    assert "NO (runs code from input)" not in done.stdout
    assert [p.name for p in tmp_path.iterdir()] == ["mypkg"]  # nothing written beside the package


def test_a_failing_backend_exits_1_with_its_first_mismatch(capsys) -> None:
    code = commands.main(["conformance", "msgspec-frombuffer", "misbehaving_backends:flatten_view"])
    out = capsys.readouterr().out
    assert code == 1
    assert "strided-1d:" in out and "view" in out  # the case and its mismatch
    assert out.splitlines()[2].startswith("msgspec-frombuffer")  # the good one passes, listed first
    assert out.splitlines()[2][-2:] == " 0"  # ... with no failure


def test_a_bad_spec_exits_2_before_checking(capsys) -> None:
    assert commands.main(["conformance", "no_such_module_x:factory"]) == 2
    assert "cannot load backend" in capsys.readouterr().err
