"""The docs read as a manual (issue 33): generated reference pages current, no lab notebook
outside docs/measurements/, links that resolve, code fences that close, a short README.

A commit hash or a ``/tmp/`` path records how one figure was obtained on one day; such
records are dated pages of docs/measurements/, and the manual links to them.
"""

from __future__ import annotations

import re
from pathlib import Path

import by_path
import pytest
from suite_paths import ROOT, manual_files

README = ROOT / "README.md"
DOCS = ROOT / "docs"
MEASUREMENTS = DOCS / "measurements"
README_MAX_LINES = 200

# 7 to 40 hex digits standing alone, with at least one digit and one letter (so that neither
# "decade" nor "1234567" counts); URLs are removed first (an issue's or a commit's link may name one)
HASH = re.compile(r"(?<![\w./-])(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}(?![\w-])")
URL = re.compile(r"https?://\S+")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^ {0,3}(```|~~~)")  # opens a code block, with an info string or not
CLOSE = re.compile(r"^ {0,3}(```+|~~~+)\s*$")  # closes one: the fence alone (CommonMark)


def fenced(lines: list[str]) -> tuple[list[bool], int | None]:
    """Per line, whether it is part of a fenced code block (fences included), and the line
    number of a block still open at the end (None: all closed). A line of backticks followed
    by text does not close a block ("``` Until ..." once left one open)."""
    inside, marks, opened = False, [], None
    for number, line in enumerate(lines, 1):
        toggles = CLOSE.match(line) if inside else FENCE.match(line)
        marks.append(inside or bool(toggles))
        if toggles:
            inside = not inside
            opened = number if inside else None
    return marks, opened


def markdown_files() -> list[Path]:
    return [p for p in manual_files() if p.suffix == ".md"]


def outside_code(text: str) -> str:
    """``text`` without its fenced code blocks (a link-like string in code is not a link)."""
    lines = text.splitlines()
    marks, _ = fenced(lines)
    return "\n".join(line for line, code in zip(lines, marks, strict=True) if not code)


def load_generator():
    return by_path.load("scripts/gen_reference.py", "gen_reference")


def test_reference_pages_are_current(tmp_path: Path) -> None:
    generator = load_generator()
    generator.write(tmp_path)
    stale = [
        name
        for name in generator.PAGES
        if not (DOCS / "reference" / name).exists()
        or (DOCS / "reference" / name).read_text() != (tmp_path / name).read_text()
    ]
    assert not stale, f"docs/reference/ is stale ({', '.join(stale)}): run `python scripts/gen_reference.py`"


def test_reference_pages_cover_every_command_metric_and_exit_code() -> None:
    """What the generator writes names everything it is generated from (a generator that
    silently skipped a command or a metric would pass the staleness test)."""
    from serbench.cli import build_parser
    from serbench.model import errors, metrics

    cli = (DOCS / "reference" / "cli.md").read_text()
    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    for name, command_parser in sub.choices.items():
        assert f"## `serbench {name}`" in cli
        for action in command_parser._actions:
            for flag in action.option_strings:
                assert f"`{flag}" in cli or f" {flag}" in cli, flag
    for code in (errors.EXIT_OK, errors.EXIT_REGRESSION, errors.EXIT_USAGE, errors.EXIT_TERMINATED):
        assert f"\n| {code} |" in cli
    listed = (DOCS / "reference" / "metrics.md").read_text()
    assert all(f"| `{name}` |" in listed for name in metrics.METRICS)


# docs/measurements/ is where dated records with hashes and paths belong; images are no text.
MANUAL = [p for p in manual_files() if MEASUREMENTS not in p.parents and p.suffix != ".png"]


@pytest.mark.parametrize("path", MANUAL, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_commit_hash_or_tmp_path_outside_measurements(path: Path) -> None:
    text = path.read_text()
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        bare = URL.sub("", line)
        found += [f"{number}: commit hash {h}" for h in HASH.findall(bare)]
        found += [f"{number}: /tmp/ path" for _ in range(bare.count("/tmp/"))]
    assert not found, f"{path.relative_to(ROOT)}: move these to a dated page of docs/measurements/: {found}"


def test_hash_pattern() -> None:
    """What counts as a commit hash, and what does not."""
    assert HASH.findall("at 4d7d85f, then (df98fba) and `0eda111`.") == ["4d7d85f", "df98fba", "0eda111"]
    assert not HASH.findall("decade 1234567 facade e2e 2026-12-01 abc1234x file_4d7d85f 10e10")


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(path: Path) -> None:
    broken = []
    for target in LINK.findall(outside_code(path.read_text())):
        if re.match(r"^[a-z]+:", target) or target.startswith("#"):
            continue  # a URL, mailto:, or an anchor on the same page
        if not (path.parent / target.split("#", 1)[0]).exists():
            broken.append(target)
    assert not broken, f"{path.relative_to(ROOT)} links to missing files: {broken}"


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_code_fences_close(path: Path) -> None:
    _, opened = fenced(path.read_text().splitlines())
    assert opened is None, f"{path.relative_to(ROOT)}: the code block opened at line {opened} never closes"


def test_readme_is_short() -> None:
    lines = len(README.read_text().splitlines())
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; at most {README_MAX_LINES}"


def test_readme_first_screen_answers() -> None:
    """The first 40 lines hold the two set-up commands, how long a default run takes, and the
    answer per workload shape (issue 64): a reader need not scroll to learn what serbench says."""
    first = "\n".join(README.read_text().splitlines()[:40])
    for needed in ("make run", "make test", "minutes", "text", "few images", "many images", "unsafe"):
        assert needed in first, f"README.md's first 40 lines lack {needed!r}"
