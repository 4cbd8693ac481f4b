"""The package's metadata states ranges; the exact pins this project's machines need live in
constraints.txt, which every install step of the project uses (make, CI, asv).

That ``pip install -e .`` keeps a torch the user already has (≥ the minimum) was
checked with pip itself (docs/asv.md, "Environments"); here the metadata that
makes it so is checked.
"""

from __future__ import annotations

import re
import subprocess
import sys
import zipfile
from pathlib import Path

import tomllib
from asv.util import load_json
from packaging.requirements import Requirement
from packaging.version import Version
from suite_paths import ROOT


def _requirements() -> dict[str, Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return {(r := Requirement(line)).name: r for line in project["dependencies"]}


def _constraints() -> dict[str, Requirement]:
    lines = (ROOT / "constraints.txt").read_text().splitlines()
    return {(r := Requirement(line)).name: r for line in lines if line.strip() and not line.startswith("#")}


def test_metadata_states_a_torch_range_that_keeps_a_newer_torch() -> None:
    torch = _requirements()["torch"]
    assert not any(spec.operator in ("==", "===", "~=") for spec in torch.specifier), torch
    for installed in ("2.13.0", "2.13.0+cpu", "2.14.1", "2.15.0"):
        assert torch.specifier.contains(installed), installed
    assert not torch.specifier.contains("2.0.0")  # below what is tested


def test_constraints_pin_torch_inside_the_metadata_range() -> None:
    (pin,) = _constraints()["torch"].specifier
    assert pin.operator == "=="
    assert _requirements()["torch"].specifier.contains(Version(pin.version))


def test_every_install_step_of_the_project_uses_the_constraints() -> None:
    makefile = (ROOT / "Makefile").read_text()
    installs = [line for line in makefile.splitlines() if "pip install" in line]
    assert installs and all("-c constraints.txt" in line for line in installs), installs
    assert "INSTALL := $(UV) pip install" in makefile  # the one install command the recipes use
    assert "\t@$(INSTALL) -e '.[test]'" in makefile  # quiet: make run's screen holds the answer
    assert "make test" in (ROOT / ".ci" / "run").read_text()
    assert "-c constraints.txt" in (ROOT / ".github" / "workflows" / "perf-gate.yml").read_text()
    config = load_json(str(ROOT / "asv.conf.json"), js_comments=True)
    assert any("-c {conf_dir}/constraints.txt" in cmd for cmd in config["install_command"])


def test_asv_config_names_no_path_of_this_machine() -> None:
    text = (ROOT / "asv.conf.json").read_text()
    assert not re.search(r"file://|/opt/|/home/|/root/|/work/", text)
    assert "PIP_INDEX_URL" not in text


def test_the_wheel_installs_one_namespace_and_ships_no_test_dependency(tmp_path: Path) -> None:
    """``pip install serbench`` puts ``serbench`` into site-packages and nothing beside it:
    no top-level ``serializers``, ``workloads`` or ``specs`` to collide with another project's."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            tmp_path,
            ROOT,
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("serbench-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")} == {"serbench"}
    for package in ("serializers", "workloads", "testing", "plugins/vllm"):  # what a plugin imports
        assert f"serbench/{package}/__init__.py" in names
    shipped = [zipfile.ZipFile(wheel).read(n).decode() for n in names if n.endswith(".py")]
    assert not any(re.search(r"^\s*(import|from) hypothesis\b", text, re.M) for text in shipped)
