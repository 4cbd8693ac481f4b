"""serbench gate on another package's change: each side's interpreter and path (``--base-path``,
``--head-python``, ...), one serbench on both; and which code a results file names
(``serbench.runtime.provenance``)."""

from __future__ import annotations

import importlib
import shutil
import sys
import tempfile
from pathlib import Path

import pytest
from gating import BASE_BACKEND, HEAD_BACKEND, PADDED, git

from serbench import cli as commands
from serbench.gate import measure as gate
from serbench.gate.revision import Runtime
from serbench.model import results
from serbench.model.errors import GateError
from serbench.model.profiles import PROFILES
from serbench.plugins.vllm import adapter
from serbench.runner.matrix import Plan
from serbench.runtime import provenance


def _package(folder: Path, name: str, text: str = "") -> Path:
    (folder / name).mkdir(parents=True)
    (folder / name / "__init__.py").write_text(text)
    return folder


def test_an_installed_library_is_named_by_its_version() -> None:
    import msgspec

    assert provenance.version("msgspec") == msgspec.__version__
    assert provenance.version("pyzmq", "zmq") == importlib.metadata.version("pyzmq")
    assert provenance.version("no-such-distribution") is None


def test_code_ahead_on_the_path_is_named_by_its_folder_and_commit(monkeypatch, tmp_path: Path) -> None:
    checkout, plain = _package(tmp_path / "checkout", "gatepkg_a"), _package(tmp_path / "plain", "gatepkg_b")
    git(checkout, "init", "-q")
    git(checkout, "add", "-A")
    git(checkout, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    commit = git(checkout, "rev-parse", "HEAD")
    for folder in (checkout, plain):
        monkeypatch.syspath_prepend(str(folder))
    importlib.invalidate_caches()
    assert provenance.version("gatepkg_a") == f"from {checkout} @ {commit[:12]}"
    assert provenance.version("gatepkg_b") == f"from {plain}"
    # a folder ahead of an installed distribution's (import-linter: installed, not imported here) is
    # not that distribution, whose version would name code that does not run; a link to it is the
    # same code. Not pip: setuptools' import hook watches for pip and warns when a test process has
    # imported distutils before (which xdist's scheduling decides).
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "importlinter").symlink_to(Path(importlib.util.find_spec("importlinter").origin).parent)
    monkeypatch.syspath_prepend(str(shadow))
    importlib.invalidate_caches()
    assert provenance.version("import-linter", "importlinter") == importlib.metadata.version("import-linter")
    (shadow / "importlinter").unlink()
    _package(shadow, "importlinter")
    importlib.invalidate_caches()
    assert provenance.version("import-linter", "importlinter") == f"from {shadow}"


def test_without_base_the_sides_must_differ(monkeypatch, tmp_path: Path, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    assert commands.main(["gate", "--out", str(tmp_path / "out")]) == 2
    assert "nothing to compare" in capsys.readouterr().err
    assert commands.main(["gate", "--base-path", str(tmp_path / "missing")]) == 2
    assert "--base-path" in capsys.readouterr().err
    assert commands.main(["gate", "--head-python", str(tmp_path)]) == 2
    assert "not an executable file" in capsys.readouterr().err


def test_a_measurer_that_cannot_start_under_its_interpreter_is_a_gate_error(monkeypatch, tmp_path) -> None:
    """One serbench on both sides: a measurer without a hello did not start (here: its interpreter
    cannot import serbench's dependencies), never "a revision from before the measurer"."""
    broken = tmp_path / "python"
    broken.write_text(f'#!/bin/sh\nexec {sys.executable} -c "import no_such_module" "$@"\n')
    broken.chmod(0o755)
    plan = Plan(["pickle"], ["text-sonnet"], ["micro"])
    runtimes = (Runtime(), Runtime(str(broken)))
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))
    with pytest.raises(GateError, match=r"head: serbench's measuring process stopped: .*no_such_module"):
        gate.measure(None, None, plan, PROFILES["quick"], 1, tmp_path, lambda _: None, runtimes=runtimes)
    assert not list(temporary.iterdir())  # the folder linking this serbench is gone


def test_gate_of_two_package_folders_and_interpreters_outside_any_repository(
    monkeypatch, tmp_path: Path, capsys
) -> None:
    """No git anywhere: both sides run this serbench, base with one folder first on its path,
    head with another and its own interpreter; head's padded frame is flagged."""
    base, head = tmp_path / "base", tmp_path / "head"
    for folder, source in ((base, BASE_BACKEND), (head, HEAD_BACKEND)):
        folder.mkdir()
        (folder / "gate_pkg_backend.py").write_text(source)
    python = tmp_path / "padded-python"
    python.write_text(f'#!/bin/sh\n{PADDED}=1 exec {sys.executable} "$@"\n')  # head pads (test_gate)
    python.chmod(0o755)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    out = tmp_path / "out"
    args = ["gate", "--base-path", "base", "--head-path", "head", "--head-python", str(python)]
    args += ["--backends", "gate_pkg_backend:make", "--workloads", "text-sonnet", "--rounds", "2"]
    code = commands.main([*args, "--measure", "time", "--out", str(out)])
    captured = capsys.readouterr()
    assert code == 1, captured.err[-2000:]
    frames = next(line for line in captured.out.splitlines() if " frames " in line)
    assert frames.startswith("REGRESSION") and "gate_pkg_backend:make × text-sonnet" in frames
    assert f"head runs {python}, with {head} first on its path" in captured.err
    reproduce = (
        f"serbench gate --base-path {base} --head-path {head} --head-python {python} --scenarios micro"
    )
    assert reproduce in captured.out
    sides = [results.load(out / f"{side}.json").environment for side in ("base", "head")]
    assert sides[0].git_commit == sides[1].git_commit  # one serbench
    assert sides[0].libraries["serbench"] == sides[1].libraries["serbench"]


def _link_tree(source: Path, target: Path, skip: set[str]) -> None:
    """``target`` holding a link to every entry of ``source`` but those named in ``skip``."""
    target.mkdir(parents=True)
    for entry in source.iterdir():
        if entry.name not in skip:
            (target / entry.name).symlink_to(entry)


def _vllm_copy(folder: Path, slowed: bool) -> Path:
    """``folder`` holding a copy of the installed vLLM as a checkout holds it (``folder/vllm``):
    links to its files but ``v1/serial_utils.py``, a real copy — with ``slowed``, one whose
    decoder does its work 32 times (a slowdown no noise of a loaded runner hides). No
    ``__pycache__`` links: the copy's bytecode stays its own."""
    installed = Path(importlib.util.find_spec("vllm").origin).parent
    copy = folder / "vllm"
    _link_tree(installed, copy, {"v1", "__pycache__"})
    _link_tree(installed / "v1", copy / "v1", {"serial_utils.py", "__pycache__"})
    codec = copy / "v1" / "serial_utils.py"
    shutil.copy(installed / "v1" / "serial_utils.py", codec)
    if slowed:
        with codec.open("a") as source:
            source.write(
                "\n\n_decode_once = MsgpackDecoder.decode\n\n\n"
                "def _decode_32_times(self, bufs):\n"
                "    for _ in range(31):\n"
                "        _decode_once(self, bufs)\n"
                "    return _decode_once(self, bufs)\n\n\n"
                "MsgpackDecoder.decode = _decode_32_times\n"
            )
    return folder


@pytest.mark.skipif(adapter.version() is None, reason="vLLM is not installed (make install-vllm)")
def test_gate_of_two_vllm_checkouts(monkeypatch, tmp_path: Path, capsys) -> None:
    """Two vLLM checkouts, head's decoder slowed: the vllm backend's decode on vLLM's own
    request is flagged and named (exit 1); its encode, which both checkouts share, and the
    frames are not — the same gate's unchanged rows are its A/A control (the gate's own tests
    cover an unmodified pair's exit 0). Two rounds, a measurer per side each. The shared encode
    is one short call whose reading follows the process it ran in, so the decode is slowed far
    past the tolerance, and the tolerance is wide enough that the encode stays below it
    (docs/measurements/2026-12-07-vllm-gate-test.md). Each side's results name the vLLM it ran."""
    base = _vllm_copy(tmp_path / "base", slowed=False)
    head = _vllm_copy(tmp_path / "head", slowed=True)
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out"
    args = ["gate", "--base-path", str(base), "--head-path", str(head), "--backends", "vllm"]
    args += ["--workloads", "images-4:layout=vllm-native", "--rounds", "2", "--measure", "time"]
    code = commands.main([*args, "--max-regression", "400%", "--out", str(out)])
    printed = capsys.readouterr().out
    rows = {
        name: line
        for line in printed.splitlines()
        for name in ("encode_s", "decode_s", "frames")
        if f" {name} " in line and "vllm × images-4" in line
    }
    assert code == 1, printed
    assert rows["decode_s"].startswith("REGRESSION")
    assert not rows["encode_s"].startswith("REGRESSION")
    assert rows["frames"].startswith("no change")
    sides = [results.load(out / f"{side}.json").environment.libraries["vllm"] for side in ("base", "head")]
    assert sides == [f"from {base}", f"from {head}"]
