"""Attribution of a count regression: callgrind's format read, per-call self costs from the two
windows, the functions that grew most named with their share of the change."""

from __future__ import annotations

from pathlib import Path

import pytest

from serbench.analysis import attribution
from serbench.model.results import Case
from serbench.probes import instructions

CASE = Case("micro", "msgspec-frombuffer", "text-sonnet")
HEADER = "# callgrind format\nversion: 1\ncreator: callgrind-3.19.0\npositions: line\nevents: Ir\n\n"


def profile(decode: int, helper: int, malloc: int, loop: int = 50) -> str:
    """A dump in callgrind's compressed format: ``decode`` calls ``helper`` (whose inclusive cost
    follows the calls= line and is not decode's self cost), names given once, relative
    positions, a second object for malloc."""
    return (
        HEADER
        + "ob=(1) /usr/bin/python3.11\nfl=(1) eval.c\nfn=(1) loop\n"
        + f"10 {loop}\n"
        + "ob=(2) /x/_core.so\nfl=(2) decode.c\nfn=(2) mpack_decode\n"
        + f"5 {decode - 7}\n+2 7\n"
        + "cfn=(3) helper\ncalls=3 40\n"
        + f"* {helper + 999_999}\n"  # inclusive: never self cost
        + "fn=(3)\n"
        + f"40 {helper - 1}\n"
        + "fn=(5) helper'2\n"  # a recursion level (--separate-recs): the same function
        + "41 1\n"
        + "ob=(3) /lib/libc.so.6\nfl=(3) malloc.c\nfn=(4) _int_malloc\n"
        + f"-3 {malloc}\n"
        + f"\ntotals: {loop + decode + helper + malloc}\n"
    )


def write_side(out: Path, windows: dict[int, str], metric: str = "decode_instructions") -> Path:
    folder = instructions.profile_folder(out, CASE)
    folder.mkdir(parents=True)
    for calls, body in windows.items():
        (folder / f"{metric}-{calls}.callgrind").write_text(body)
    return folder


def test_self_costs_read_compressed_names_objects_and_skip_inclusive_call_costs(tmp_path: Path) -> None:
    path = tmp_path / "p.callgrind"
    path.write_text(profile(decode=1000, helper=300, malloc=40))
    costs = attribution.self_costs(path)
    assert costs == {
        "loop (python3.11)": 50,
        "mpack_decode (_core.so)": 1000,
        "helper (_core.so)": 300,
        "_int_malloc (libc.so.6)": 40,
    }
    assert sum(costs.values()) == 1390  # the totals line: self costs add up to the whole


def test_per_call_costs_are_the_difference_of_the_two_windows(tmp_path: Path) -> None:
    folder = write_side(tmp_path, {100: profile(1000, 300, 40), 200: profile(2000, 600, 80)})
    costs = attribution.per_call(folder, "decode_instructions")
    assert costs["mpack_decode (_core.so)"] == pytest.approx(10.0)
    assert costs["loop (python3.11)"] == 0  # the same in both windows: cancels, as in the count
    assert attribution.per_call(folder, "encode_instructions") is None


def test_the_function_that_grew_most_is_named_first_with_its_share(tmp_path: Path) -> None:
    base = write_side(tmp_path / "base", {100: profile(1000, 300, 40), 200: profile(2000, 600, 80)})
    head = write_side(tmp_path / "head", {100: profile(1000, 300, 40), 200: profile(2900, 650, 80)})
    total, grown = attribution.attribute(
        attribution.per_call(base, "decode_instructions"), attribution.per_call(head, "decode_instructions")
    )
    assert total == pytest.approx(9.5)
    assert [g.function for g in grown] == ["mpack_decode (_core.so)", "helper (_core.so)"]
    assert grown[0].delta == pytest.approx(9.0)
    assert grown[0].share == pytest.approx(9.0 / 9.5)
    lines = attribution.explain([(CASE, "decode_instructions")], tmp_path / "base", tmp_path / "head")
    assert "mpack_decode (_core.so)" in lines[1] and "95%" in lines[1]
    assert "helper (_core.so)" in lines[2]


def test_at_most_five_functions_only_those_that_grew() -> None:
    base = {f"f{i}": 100.0 for i in range(8)}
    head = {f"f{i}": 100.0 + i for i in range(8)} | {"f0": 50.0}
    _, grown = attribution.attribute(base, head)
    assert [g.function for g in grown] == ["f7", "f6", "f5", "f4", "f3"]


def test_a_side_without_profiles_is_said_and_other_metrics_are_not_explained(tmp_path: Path) -> None:
    write_side(tmp_path / "head", {100: profile(1000, 300, 40), 200: profile(2000, 600, 80)})
    lines = attribution.explain(
        [(CASE, "decode_instructions"), (CASE, "decode_s")], tmp_path / "base", tmp_path / "head"
    )
    assert len(lines) == 2
    assert "no profiles of base" in lines[1]


def test_growth_wholly_in_the_interpreters_lookups_is_said_so(tmp_path: Path) -> None:
    """issue 66's false alarm: every added instruction in the type lookup, nothing else grown."""
    base = {"find_name_in_mro (python3.11)": 0.0, "encode (_core.so)": 900.0, "loop (python3.11)": 50.0}
    layout = base | {"find_name_in_mro (python3.11)": 575.0, "unicodekeys_lookup_unicode (python3.11)": 30.0}
    assert attribution.lookups_only(base, layout)
    assert attribution.lookups_only(base, layout | {"loop (python3.11)": 40.0})  # the rest shrank
    assert not attribution.lookups_only(base, layout | {"encode (_core.so)": 1000.0})  # real work too
    assert not attribution.lookups_only(base, base)  # nothing grew
    write_side(tmp_path / "base", {100: profile(1000, 300, 40), 200: profile(2000, 600, 80)})
    write_side(tmp_path / "head", {100: profile(1000, 300, 40), 200: profile(2900, 650, 80)})
    (found,) = attribution.explain_rows([(CASE, "decode_instructions")], tmp_path / "base", tmp_path / "head")
    assert not found.lookups_only and attribution.LOOKUPS_ONLY not in "\n".join(found.lines)
