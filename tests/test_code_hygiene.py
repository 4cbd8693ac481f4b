"""The house rules for serbench's code that a linter does not check (issue 64, item 4).

A module docstring says what the module is for in at most 20 lines; a comment block says why
in at most 4; neither quotes a measured figure, which goes stale: the trials live under
docs/measurements/, and a constant's comment links there. And no two modules import each
other, however far round. Each test lists every offender as ``path:line``, so whoever owns
the file can find it; the checks parse (ast, tokenize, grimp) and import nothing of serbench's.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

import grimp
from suite_paths import ROOT

PACKAGE = ROOT / "serbench"
MODULE_DOCSTRING_LINES = 20
COMMENT_BLOCK_LINES = 4

_NUMBER = r"(?<![\w.,])\d{1,3}(?:,\d{3})+(?:\.\d+)?|(?<![\w.,])\d+(?:\.\d+)?"
_UNIT = (
    r"GB/s|MB/s|GiB/s|MiB/s|ns|µs|us|ms|s|secs?|seconds?|mins?|minutes?|%|"
    r"GiB|MiB|KiB|GB|MB|kB|KB|B|bytes"
)
# A number with a unit (a range of them too), a speed ratio such as "2.6×", or a count "7 of 20".
FIGURE = re.compile(
    rf"(?:{_NUMBER})(?:\s*[-–]\s*\d+(?:\.\d+)?)?\s?(?:{_UNIT})(?![\w/])"
    rf"|(?:{_NUMBER})[×x](?![\w×])"
    r"|(?<![\w.])\d+ of \d+\b"
)
# Figures that define something rather than report a measurement, wherever they appear.
# Written without spaces: "10 %" and "10%" are one entry.
DEFINITIONS = {
    "256B",  # the backends' default inline threshold
    "64KiB",  # pyzmq's zmq.COPY_THRESHOLD
    "4KiB",  # a page
    "128KiB",  # glibc's default mmap threshold ...
    "32MiB",  # ... and the most it rises to (mallopt(3))
    "16KiB",  # pymalloc's pool ...
    "16bytes",  # ... and its size-class step
    "95%",  # an interval's confidence
    "80%",  # a test's power
    "1%",  # the practical ties and tolerances serbench.model.metrics defines
    "2%",
    "5%",
    "10%",
    "9.6MB",  # payload sizes the built-in workloads define: a gemma image in float32,
    "38.5MB",  # images-4 ...
    "308MB",  # ... and images-32
}
# Inline code (``...``) shows what code writes, e.g. a format's output; it is not a claim.
_INLINE_CODE = re.compile(r"``.*?``", re.DOTALL)


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _name(path: Path) -> str:
    return str(path.relative_to(ROOT))


def _docstrings(tree: ast.Module) -> Iterator[ast.Constant]:
    """The docstring nodes of the module and of every class and function in it."""
    for node in ast.walk(tree):
        documented = isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        if documented and ast.get_docstring(node, clean=False) is not None:
            yield node.body[0].value


def _comments(source: str) -> list[tokenize.TokenInfo]:
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    return [token for token in tokens if token.type == tokenize.COMMENT]


def _comment_blocks(source: str) -> Iterator[tuple[int, int]]:
    """(first line, line count) of each run of lines that hold a comment and nothing else."""
    lines = source.splitlines()
    own_line = [c.start[0] for c in _comments(source) if not lines[c.start[0] - 1][: c.start[1]].strip()]
    start = previous = None
    for line in own_line:
        if previous is None or line != previous + 1:
            if start is not None:
                yield start, previous - start + 1
            start = line
        previous = line
    if start is not None:
        yield start, previous - start + 1


def _figures(text: str, first_line: int) -> Iterator[tuple[int, str]]:
    """(line, figure) of each measured figure in ``text``, which starts on ``first_line``."""
    text = _INLINE_CODE.sub(lambda code: re.sub(r"[^\n]", " ", code.group(0)), text)
    for match in FIGURE.finditer(text):
        figure = match.group(0)
        if re.sub(r"\s", "", figure) not in DEFINITIONS:
            yield first_line + text.count("\n", 0, match.start()), figure


def _report(offenders: list[str], rule: str) -> str:
    return f"{len(offenders)} offenders of: {rule}\n" + "\n".join(offenders)


def test_module_docstrings_are_at_most_20_lines() -> None:
    offenders = []
    for path in _modules():
        docstring = ast.get_docstring(ast.parse(path.read_text()))
        if docstring is not None and len(docstring.splitlines()) > MODULE_DOCSTRING_LINES:
            offenders.append(f"{_name(path)}:1: module docstring of {len(docstring.splitlines())} lines")
    assert not offenders, _report(offenders, f"a module docstring has at most {MODULE_DOCSTRING_LINES} lines")


def test_comment_blocks_are_at_most_4_lines() -> None:
    offenders = [
        f"{_name(path)}:{start}: comment block of {count} lines"
        for path in _modules()
        for start, count in _comment_blocks(path.read_text())
        if count > COMMENT_BLOCK_LINES
    ]
    assert not offenders, _report(offenders, f"a comment block has at most {COMMENT_BLOCK_LINES} lines")


def test_no_comment_or_docstring_quotes_a_measured_figure() -> None:
    offenders = []
    for path in _modules():
        source = path.read_text()
        texts = [(c.start[0], c.string) for c in _comments(source)]
        texts += [(d.lineno, d.value) for d in _docstrings(ast.parse(source))]
        for first_line, text in texts:
            for line, figure in _figures(text, first_line):
                offenders.append((_name(path), line, figure))
    rule = "no comment or docstring quotes a measured figure (link its docs/measurements/ page)"
    listed = [f"{path}:{line}: {figure!r}" for path, line, figure in sorted(offenders)]
    assert not listed, _report(listed, rule)


def _cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    components = []
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        while work:
            module, imported = work[-1]
            following = next((m for m in imported if m not in index or m in stack), None)
            if following is not None and following not in index:
                index[following] = low[following] = len(index)
                stack.append(following)
                work.append((following, iter(sorted(graph.find_modules_directly_imported_by(following)))))
            elif following is not None:
                low[module] = min(low[module], index[following])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[module])
                if low[module] == index[module]:
                    component = stack[stack.index(module) :]
                    del stack[stack.index(module) :]
                    if len(component) > 1:
                        components.append(sorted(component))
    return components


def _one_cycle(graph: grimp.ImportGraph, component: list[str]) -> str:
    first = component[0]
    following = next(m for m in sorted(graph.find_modules_directly_imported_by(first)) if m in component)
    chain = graph.find_shortest_chain(importer=following, imported=first)
    return " -> ".join((first, *chain))


def test_no_modules_import_each_other() -> None:
    graph = grimp.build_graph("serbench", cache_dir=None)
    cycles = [_one_cycle(graph, component) for component in _cycles(graph)]
    assert not cycles, _report(cycles, "the import graph of serbench has no cycles")


def test_the_cycle_finder_finds_a_cycle_and_nothing_else() -> None:
    graph = grimp.ImportGraph()
    for importer, imported in [("a", "b"), ("b", "c"), ("c", "a"), ("c", "d"), ("e", "d")]:
        graph.add_import(importer=importer, imported=imported)
    assert _cycles(graph) == [["a", "b", "c"]]
    assert _one_cycle(graph, ["a", "b", "c"]) == "a -> b -> c -> a"


def test_the_figure_finder_tells_measurements_from_definitions() -> None:
    text = "took 38 s, 2.6× faster, 1.5-2.7 GB/s, 7 of 20 pairs, 38,542,438 bytes\nat 95 %, ``13.8 µs``"
    found = [figure for line, figure in _figures(text, 10) if line == 10]
    assert found == ["38 s", "2.6×", "1.5-2.7 GB/s", "7 of 20", "38,542,438 bytes"]
    assert len(list(_figures(text, 10))) == len(found)
    assert list(_figures("a 3x3 grid of 14 x 14 patches, 0x10, images-4 at 256 B", 1)) == []
