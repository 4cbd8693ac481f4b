"""The unsafe mark is earned: pickle-based decoders run code from their input, the safe ones refuse it.

One crafted payload — a pickle whose ``__reduce__`` calls ``exec`` — is sent
as the frames of a request. Each unsafe backend runs it (the marker file
appears); each safe backend raises ``DecodeError`` and the marker never does.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from serbench import cli, summary
from serializers import BUILTINS, DecodeError, get_serializer, is_safe
from workloads.messages import EngineCoreRequest

UNSAFE = ["pickle", "pickle-oob", "cloudpickle"]
SAFE = ["numpy-intermediate", "msgspec-frombuffer", "flat-mmk", "flat-mmk:threshold=inf"]
UNSAFE_MARK = "NO (runs code from input)"


class _RunsCode:
    """Unpickles into a call of ``exec``: what a hostile peer puts on the socket."""

    def __init__(self, marker: Path) -> None:
        self.source = f"import pathlib; pathlib.Path({str(marker)!r}).write_text('code ran')"

    def __reduce__(self) -> tuple:
        return exec, (self.source,)


def payload(marker: Path) -> list[bytes]:
    """The frames of the attack: one pickle frame, as the pickle backends send a message."""
    return [pickle.dumps(_RunsCode(marker), protocol=5)]


def test_the_backend_lists_agree_with_the_registry() -> None:
    assert sorted(UNSAFE + SAFE[:3]) == sorted(BUILTINS)
    assert [is_safe(get_serializer(name)) for name in UNSAFE + SAFE] == [False] * 3 + [True] * 4


@pytest.mark.parametrize("spec", UNSAFE)
def test_unsafe_backend_runs_code_from_its_input(tmp_path: Path, spec: str) -> None:
    marker = tmp_path / "marker"
    get_serializer(spec).decode(payload(marker), EngineCoreRequest)
    assert marker.read_text() == "code ran"


@pytest.mark.parametrize("spec", SAFE)
def test_safe_backend_refuses_the_same_bytes(tmp_path: Path, spec: str) -> None:
    marker = tmp_path / "marker"
    for type_ in (EngineCoreRequest, object):
        with pytest.raises(DecodeError, match=r"\S"):
            get_serializer(spec).decode(payload(marker), type_)
    assert not marker.exists()


def test_serbench_list_marks_exactly_the_unsafe_backends(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["list"]) == 0
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines() if line.strip()}
    for name in BUILTINS:
        assert (UNSAFE_MARK in rows[name]) == (name in UNSAFE), rows[name]


def test_terminal_summary_marks_exactly_the_unsafe_backends() -> None:
    metric = {"unit": "s", "values": [1e-3], "median": 1e-3, "ci_low": 1e-3, "ci_high": 1e-3}
    specs = UNSAFE + SAFE
    data = {
        "backends": {spec: {"safe": spec in SAFE} for spec in specs},
        "records": [
            {
                "scenario": "micro",
                "backend": spec,
                "workload": "text-sonnet",
                "metrics": dict.fromkeys(("encode_s", "decode_s", "roundtrip_s"), metric),
                "error": None,
            }
            for spec in specs
        ],
    }
    text = summary.render(data)
    for spec in specs:
        assert spec in text
        assert (f"{spec} (unsafe)" in text) == (spec in UNSAFE), spec
