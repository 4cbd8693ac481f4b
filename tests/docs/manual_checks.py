"""The manual's claims about the code, read with Sybil and checked against the code.

Sybil finds the regions of a page — fenced code blocks and inline code spans — and hands each
to an evaluator here. A ``serbench …`` line is parsed by the real argparse parser (not run); a
backticked flag must be some command's; a metric name must be in ``metrics.METRICS``; a dotted
name that names serbench code (``serbench.x.y``, or a short form such as ``compare.ranking``
or ``Results.load``) must import; a repository path must exist. What is prose stays unchecked:
that is for a reader.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import functools
import importlib
import importlib.metadata
import importlib.util
import io
import re
import shlex
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

from suite_paths import ROOT, manual_files
from sybil import Document, Example, Region, Sybil
from sybil.parsers.markdown.lexers import RawFencedCodeBlockLexer

import serbench
from serbench.cli import build_parser
from serbench.model.metrics import METRICS

BENCHMARKS = ROOT / "benchmarks"
SHELL_LANGUAGES = {"", "bash", "sh", "shell", "console"}  # a diagram or an output is ```text
REPOSITORY_FOLDERS = ("serbench/", "tests/", "scripts/", "docs/", "benchmarks/")
FILE_SUFFIXES = {
    "json",
    "html",
    "md",
    "py",
    "txt",
    "toml",
    "cfg",
    "yml",
    "yaml",
    "csv",
    "png",
    "sh",
    "so",
    "log",
}
METRIC_SUFFIXES = ("_s", "_bytes", "_instructions", "_copies")
FENCED = RawFencedCodeBlockLexer(
    info_pattern=re.compile(r"(?P<language>[^\n]*)$\n", re.MULTILINE),
    mapping={"language": "language", "source": "source"},
)
INLINE = re.compile(r"(?<!`)(`+)(?!`)((?:(?!\n\n).)+?)(?<!`)\1(?!`)", re.DOTALL)
DOTTED = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+(?:\(\))?")
IDENTIFIER = re.compile(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)+")
FROM_IMPORT = re.compile(r"\bfrom (serbench(?:\.\w+)*) import (\([^)]*\)|[\w, ]+)")
PLAIN_IMPORT = re.compile(r"\bimport (serbench(?:\.\w+)*)")
# A command line ends where the shell takes over: a pipe, a redirection, a second command.
SHELL_BREAKS = {"|", "||", "&&", ";", "&", ">", ">>", "<", "2>", "2>&1"}


def manual_pages() -> list[Path]:
    """README.md and docs/**/*.md that git tracks or would track, but the dated records
    (docs/measurements/) and the generated reference (docs/reference/, exact by its own test)."""
    skipped = ("docs/measurements/", "docs/reference/")
    return [
        path
        for path in manual_files()
        if path.suffix == ".md" and not str(path.relative_to(ROOT)).startswith(skipped)
    ]


def command_lines(source: str) -> Iterator[str]:
    """The ``serbench …`` lines of a shell block (continuations joined, a ``$ `` prompt dropped)."""
    for line in source.replace("\\\n", " ").splitlines():
        line = line.strip().removeprefix("$ ")
        if line.startswith("serbench "):
            yield line


def command_words(line: str) -> list[str]:
    """``line``'s words up to the shell's first pipe, redirection or comment."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    words = []
    for word in lexer:
        if word in SHELL_BREAKS:
            break
        if word != "...":  # "and so on", not an argument
            words.append(word)
    return words


def parse_failure(line: str) -> str | None:
    """argparse's complaint about ``line`` (a ``serbench …`` command), None if it parses."""
    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors), contextlib.redirect_stdout(io.StringIO()):
            build_parser().parse_args(command_words(line)[1:])
    except SystemExit as exc:
        if exc.code:
            return f"`{line}`: {errors.getvalue().strip().splitlines()[-1]}"
    return None


@functools.cache
def known_flags() -> frozenset[str]:
    """Every option string of ``serbench`` and of each of its commands."""
    parser = build_parser()
    flags = {flag for action in parser._actions for flag in action.option_strings}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for command in action.choices.values():
                flags |= {flag for a in command._actions for flag in a.option_strings}
    return frozenset(flags)


@functools.cache
def module_files() -> dict[str, Path]:
    """Every module of the serbench package and of the asv suites (benchmarks/) by its dotted
    name, found on disk: a name is imported only when a page names it (``__main__`` never:
    importing it would run the command line)."""
    package = Path(serbench.__file__).parent
    found = {}
    for root, prefix in ((package, "serbench"), (BENCHMARKS, "benchmarks")):
        for path in root.rglob("*.py"):
            parts = path.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            if "__main__" not in parts:
                found[".".join((prefix, *parts))] = path
    return found


def module(dotted: str) -> ModuleType | None:
    """``dotted`` imported (benchmarks' modules under ``asv_suites``); None if it fails to."""
    try:
        if dotted.split(".")[0] == "benchmarks":
            asv_suites()
            return importlib.import_module(dotted.replace("benchmarks", "asv_suites", 1))
        return importlib.import_module(dotted)
    except ImportError:
        return None


@functools.cache
def asv_suites() -> ModuleType:
    """benchmarks/ as a package by its path, under a name of its own (tests/benchmarks, the
    pytest-benchmark suite, shadows the name ``benchmarks``)."""
    spec = importlib.util.spec_from_file_location(
        "asv_suites", BENCHMARKS / "__init__.py", submodule_search_locations=[str(BENCHMARKS)]
    )
    assert spec is not None and spec.loader is not None
    package = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = package
    spec.loader.exec_module(package)
    return package


@functools.cache
def classes() -> dict[str, list[tuple[str, ast.ClassDef]]]:
    """The classes each module defines at its top level, by name, read from the source."""
    found: dict[str, list[tuple[str, ast.ClassDef]]] = {}
    for dotted, path in module_files().items():
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef):
                found.setdefault(node.name, []).append((dotted, node))
    return found


@functools.cache
def entry_point_groups() -> frozenset[str]:
    """The entry-point groups serbench reads plugins from (pyproject.toml names them)."""
    return frozenset(
        group for group in importlib.metadata.entry_points().groups if group.startswith("serbench.")
    )


@functools.cache
def struct_fields() -> frozenset[str]:
    """The annotated fields of serbench's classes (``duration_s``: a results field, not a metric)."""
    return frozenset(
        node.target.id
        for defined in classes().values()
        for _, cls in defined
        for node in cls.body
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
    )


def imported(dotted: str) -> Any:
    """The module ``dotted`` names, or the class ``module.Class`` names; None if neither imports."""
    if dotted in module_files():
        return module(dotted)
    owner, _, name = dotted.rpartition(".")
    return getattr(module(owner), name, None)


def resolves(value: Any, attributes: Iterable[str]) -> bool:
    for attribute in attributes:
        if not hasattr(value, attribute):
            return False
        value = getattr(value, attribute)
    return True


def dotted_failure(name: str) -> str | None:
    """Why ``name`` does not name serbench code; None if it does or names code elsewhere.
    A short form (``compare.ranking``) resolves in any module whose dotted name ends so."""
    parts = name.removesuffix("()").split(".")
    if parts[-1] in FILE_SUFFIXES or name in entry_point_groups():
        return None  # a file name (results.json), or where plugins register (serbench.layouts)
    named = [
        (dotted, parts[size:])
        for size in range(1, len(parts) + 1)
        for dotted in module_files()
        if dotted == ".".join(parts[:size]) or dotted.endswith("." + ".".join(parts[:size]))
    ]
    named += [(f"{dotted}.{parts[0]}", parts[1:]) for dotted, _ in classes().get(parts[0], [])]
    if not named:
        return None  # not serbench's: torch.frombuffer, os.fork
    if parts[0] != "serbench" and importlib.util.find_spec(parts[0]) is not None:
        return None  # a package of its own (vllm.v1.serial_utils), not serbench.plugins.vllm
    candidates = [(value, rest) for dotted, rest in named if (value := imported(dotted)) is not None]
    if any(resolves(value, rest) for value, rest in candidates):
        return None
    return f"`{name}` names no serbench module, class or attribute"


def span_failure(span: str) -> str | None:
    """What is wrong with one inline code span's claim about the code, None if nothing."""
    span = " ".join(span.split())
    if span.startswith("serbench "):
        return command_failure(span)
    if span.startswith("--"):
        flag = re.split(r"[\s=\[]", span, maxsplit=1)[0].rstrip(".,;:")
        return None if flag in known_flags() else f"`{span}`: no serbench command has {flag}"
    if IDENTIFIER.fullmatch(span) and (span in METRICS or span.endswith(METRIC_SUFFIXES)):
        if span in METRICS or span in struct_fields():
            return None
        return f"`{span}` is neither a metric of metrics.METRICS nor a field of a results Struct"
    if span.startswith(REPOSITORY_FOLDERS):
        return path_failure(span)
    if DOTTED.fullmatch(span):
        return dotted_failure(span)
    return None


def path_failure(span: str) -> str | None:
    """``span`` (``tests/x.py``, ``serbench/cli/``, ``tests/x.py::test``, ``docs/*.md``) is in
    the repository, or a reason."""
    path = re.split(r"::|:\d|\s", span, maxsplit=1)[0].rstrip("/.,")
    if "*" in path or "<" in path:
        found = any(ROOT.glob(re.sub(r"<[^>]*>", "*", path)))
    else:
        found = (ROOT / path).exists()
    return None if found else f"`{span}`: no such path in the repository"


def command_failure(span: str) -> str | None:
    """A command named in prose (`serbench compare`) must exist; one with arguments must parse."""
    words = span.split()
    if len(words) == 2 and not words[1].startswith("-"):
        return None if words[1] in commands() else f"`{span}`: no such command"
    return parse_failure(span)


@functools.cache
def commands() -> frozenset[str]:
    parser = build_parser()
    return frozenset(
        name for a in parser._actions if isinstance(a, argparse._SubParsersAction) for name in a.choices
    )


def check_block(example: Example) -> str | None:
    """Every ``serbench …`` line of a shell code block parses; every serbench name a Python block
    or a shell block's ``python -c`` imports exists."""
    source = str(example.parsed)
    failures = [f for name in imported_names(source) if (f := dotted_failure(name))]
    if example.region.lexemes["language"].strip() in SHELL_LANGUAGES:
        failures += [f for line in command_lines(source) if (f := parse_failure(line))]
    return "\n".join(failures) or None


def imported_names(source: str) -> Iterator[str]:
    """``serbench.x.y`` for every ``from serbench.x import y`` and ``import serbench.x``."""
    for module, names in FROM_IMPORT.findall(source):
        for name in names.replace("(", " ").replace(")", " ").split(","):
            if name.split():
                yield f"{module}.{name.split()[0]}"
    yield from PLAIN_IMPORT.findall(source)


def check_span(example: Example) -> str | None:
    return span_failure(example.parsed)


def code_blocks(document: Document) -> Iterator[Region]:
    for region in FENCED(document):
        region.parsed = region.lexemes["source"]
        region.evaluator = check_block
        yield region


def inline_spans(document: Document) -> Iterator[Region]:
    """Every inline code span outside the fenced blocks."""
    fences = [(r.start, r.end) for r in FENCED(document)]
    for match in INLINE.finditer(document.text):
        if not any(start <= match.start() < end for start, end in fences):
            yield Region(match.start(), match.end(), match.group(2).strip(), check_span)


SYBIL = Sybil(parsers=[code_blocks, inline_spans])


def failures(page: Path) -> list[str]:
    """Each wrong claim on ``page``, as ``line N: why``."""
    document = SYBIL.parse(page)
    found = []
    for example in document.examples():
        try:
            example.evaluate()
        except Exception as exc:  # SybilFailure: a line of where, then the evaluator's lines
            found += [f"line {example.line}: {why}" for why in str(exc).splitlines()[1:]]
    return found
