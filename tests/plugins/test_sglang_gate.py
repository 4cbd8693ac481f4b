"""``serbench gate`` between two SGLang versions (``--base-path`` / ``--head-path``, docs/gate.md): two
copies of the installed SGLang, head's decoder slowed or not, as ``test_gate_packages`` does it for
vLLM. Each gate starts a measurer per side and round, each importing SGLang: slow.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from conftest import NEEDS_SGLANG

from serbench import cli as commands
from serbench.model import results

pytestmark = [NEEDS_SGLANG, pytest.mark.slow]

WORKLOAD = "text-sonnet:layout=sglang-native"
CODEC = ("srt", "managers", "io_struct.py")  # SGLang's msgpack_encode / msgpack_decode
# Head's decode done this many times: far past the tolerance below, which the shared encode of an
# unmodified pair stays under on a loaded machine (docs/measurements/2026-12-07-vllm-gate-test.md).
SLOWDOWN = 32
TOLERANCE = "400%"


def _sglang_copy(folder: Path, slowed: bool) -> Path:
    """``folder`` holding the installed SGLang as a checkout holds it (``folder/sglang``): links to
    its files but ``srt/managers/io_struct.py``, a real copy — with ``slowed``, one whose
    ``msgpack_decode`` does its work ``SLOWDOWN`` times. No ``__pycache__`` links: the copy's
    bytecode stays its own."""
    installed = Path(importlib.util.find_spec("sglang").origin).parent
    source, copy = installed, folder / "sglang"
    for part in CODEC:
        copy.mkdir(parents=True)
        for entry in source.iterdir():
            if entry.name not in {part, "__pycache__"}:
                (copy / entry.name).symlink_to(entry)
        source, copy = source / part, copy / part
    text = source.read_text()
    if slowed:
        text += (
            "\n\n_decode_once = msgpack_decode\n\n\n"
            "def msgpack_decode(data):\n"
            f"    for _ in range({SLOWDOWN - 1}):\n"
            "        _decode_once(data)\n"
            "    return _decode_once(data)\n"
        )
    copy.write_text(text)
    return folder


@pytest.mark.parametrize("slowed", [False, True], ids=["unmodified", "decode-slowed"])
def test_gate_of_two_sglang_copies(monkeypatch, tmp_path: Path, capsys, slowed: bool) -> None:
    """Head's decoder slowed: the sglang backend's decode on SGLang's own request is flagged and
    named (exit 1), its encode and frames, which both copies share, are not. An unmodified pair
    exits 0. Micro only, two rounds. Each side's results name the SGLang it ran."""
    base = _sglang_copy(tmp_path / "base", slowed=False)
    head = _sglang_copy(tmp_path / "head", slowed=slowed)
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out"
    args = ["gate", "--base-path", str(base), "--head-path", str(head), "--backends", "sglang"]
    args += ["--workloads", WORKLOAD, "--scenarios", "micro", "--rounds", "2", "--measure", "time"]
    code = commands.main([*args, "--max-regression", TOLERANCE, "--out", str(out)])
    printed = capsys.readouterr().out
    rows = {
        name: line
        for line in printed.splitlines()
        for name in ("encode_s", "decode_s", "frames")
        if f" {name} " in line and f"sglang × {WORKLOAD}" in line
    }
    assert rows.keys() == {"encode_s", "decode_s", "frames"}, printed
    assert code == int(slowed), printed
    assert rows["decode_s"].startswith("REGRESSION") is slowed
    assert not rows["encode_s"].startswith("REGRESSION")
    assert rows["frames"].startswith("no change")
    sides = [results.load(out / f"{side}.json").environment.libraries["sglang"] for side in ("base", "head")]
    assert sides == [f"from {base}", f"from {head}"]
