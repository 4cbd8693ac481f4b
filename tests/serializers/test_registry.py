"""Spec strings and the backend registry: built-ins, options, entry points, dotted paths."""

from __future__ import annotations

import math
import sys
import textwrap
from pathlib import Path

import pytest

from serbench.model.specs import Spec, SpecError, format_spec, parse_spec
from serbench.serializers import BUILTINS, available_serializers, get_serializer, is_safe


def test_parse_spec_forms() -> None:
    assert parse_spec("pickle") == Spec("pickle", {})
    assert parse_spec("msgspec-frombuffer:threshold=inf") == Spec("msgspec-frombuffer", {"threshold": "inf"})
    assert parse_spec("pkg.mod:factory") == Spec("pkg.mod:factory", {})
    assert parse_spec("pkg.mod:factory:a=1,b=2") == Spec("pkg.mod:factory", {"a": "1", "b": "2"})
    assert parse_spec("images-8:profile=llava,dtype=bfloat16").options == {
        "profile": "llava",
        "dtype": "bfloat16",
    }
    assert format_spec(parse_spec("x:b=2,a=1")) == "x:a=1,b=2"


@pytest.mark.parametrize("bad", ["", "pickle:a=1,b", "pkg.mod:not-an-identifier"])
def test_malformed_specs_are_clear_errors(bad: str) -> None:
    with pytest.raises(SpecError):
        parse_spec(bad)


def test_the_six_builtins_with_their_safety() -> None:
    assert list(BUILTINS) == [
        "pickle",
        "pickle-oob",
        "cloudpickle",
        "numpy-intermediate",
        "msgspec-frombuffer",
        "flat-mmk",
    ]
    assert [get_serializer(n).name for n in BUILTINS] == list(BUILTINS)  # the registry's key is its name
    assert {n for n in BUILTINS if is_safe(get_serializer(n))} == {
        "numpy-intermediate",
        "msgspec-frombuffer",
        "flat-mmk",
    }


def test_threshold_option() -> None:
    assert get_serializer("msgspec-frombuffer").threshold == 256
    assert math.isinf(get_serializer("flat-mmk:threshold=inf").threshold)
    assert get_serializer("pickle-oob:threshold=1024").threshold == 1024


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("nope", "backends: pickle, pickle-oob"),
        ("pickle:threshold=1", "has no option 'threshold'"),
        ("msgspec-frombuffer:threshold=-5", "threshold must be"),
        ("msgspec-frombuffer:threshold=lots", "could not convert"),
        ("no_such_module_xyz:factory", "cannot load backend"),
    ],
)
def test_unknown_names_and_bad_options_list_what_exists(spec: str, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        get_serializer(spec)


def test_entry_point_plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A distribution that registers a factory under ``serbench.serializers`` is found by name."""
    (tmp_path / "myplug.py").write_text(
        textwrap.dedent("""
        from serbench.serializers.msgspec_frombuffer import MsgspecFrombufferSerializer
        def factory(threshold="256"):
            s = MsgspecFrombufferSerializer(threshold)
            s.name = "myplug"
            return s
    """)
    )
    dist = tmp_path / "myplug-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: myplug\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[serbench.serializers]\nmyplug = myplug:factory\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "myplug" in available_serializers()
    backend = get_serializer("myplug:threshold=inf")
    assert backend.name == "myplug" and math.isinf(backend.threshold)
    sys.modules.pop("myplug", None)


def test_a_dotted_spec_finds_a_module_in_the_current_folder_only_when_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As ``python -m`` would, but the folder joins ``sys.path`` only for a module nothing else
    has: an import that misses reads the listing of every folder there (docs/instructions.md)."""
    (tmp_path / "localplug.py").write_text(
        "from serbench.serializers.pickle_backend import PickleSerializer as factory\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    get_serializer("pickle")
    assert str(tmp_path) not in sys.path
    assert get_serializer("localplug:factory").name == "pickle"
    assert sys.path[-1] == str(tmp_path)  # after the installed packages: it shadows none
    sys.modules.pop("localplug", None)
