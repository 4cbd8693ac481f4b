"""Which functions a count regression grew: callgrind's per-case profiles, base against head.

A counting run keeps, per case, the dumps of the two windows that each count is
the difference of (``serbench.probes.instructions``): ``out/profiles/<case>/`` holds
``encode_instructions-N.callgrind`` and ``-2N.callgrind`` and the same for the
decode, in callgrind's own format, which ``callgrind_annotate`` and KCachegrind
read. Each function's instructions per call are, as the count itself, the
difference of its cost in the two windows divided by N: whatever the counting
costs (the client requests, the loop) cancels.

When a count row is flagged, ``explain`` reads base's and head's profiles of
that case and names the functions whose *self* instructions per call (their
own code, not what they call: "which function got slower") grew most, with
their share of the change in all functions' self costs (which add up to the
count), and says so where the interpreter's lookups alone grew (``lookups_only``).

The format is valgrind's "Callgrind Format Specification": ``fn=`` and its kin set
the function of the cost lines after them (names once as ``(id) name``, then
``(id)``); a ``calls=`` line makes the next cost line a call's inclusive cost, not
the caller's self cost (``self_costs`` reads the rest).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from serbench.analysis.verdicts import MetricComparison, Verdict
from serbench.model import metrics
from serbench.model.results import Case
from serbench.probes import instructions

SUFFIX = ".callgrind"
TOP = 5
# The instruction counts a counting run keeps windows of (micro's encode and decode, ipc's two sides).
COUNTED = tuple(name for name, m in metrics.METRICS.items() if m.counted)

# The interpreter's type and dict lookups: their cost per call depends on where names and types
# landed (the hash seed, the type method cache's slots), so an unrelated change that moves the
# interpreter's layout moves them (issue 66's false alarm grew find_name_in_mro alone).
INTERPRETER_LOOKUPS = frozenset(
    {
        "_PyType_Lookup",
        "find_name_in_mro",
        "_Py_dict_lookup",
        "_PyDict_GetItem_KnownHash",
        "_PyDict_LoadGlobal",
        "unicodekeys_lookup_unicode",
        "unicodekeys_lookup_generic",
        "dictkeys_generic_lookup",
        "dictkeys_stringlookup",
        "lookdict",
        "lookdict_unicode",
        "lookdict_unicode_nodummy",
        "lookdict_split",
    }
)
LOOKUPS_ONLY = "all of the growth is in the interpreter's lookups: its layout moved, not the code measured"

_COMPRESSED = re.compile(r"\((\d+)\)(?:\s+(.*))?$")
_NAMED = {"ob", "fl", "fi", "fe", "fn", "cob", "cfi", "cfl", "cfn"}
_RECURSION = re.compile(r"'\d+$")  # callgrind's recursion levels (--separate-recs): one function
_TABLE = {"cfi": "fl", "cfl": "fl", "fi": "fl", "fe": "fl", "cob": "ob", "cfn": "fn"}  # shared id spaces


def self_costs(path: Path, event: str = "Ir") -> dict[str, int]:
    """Each function's self cost of ``event`` in the callgrind profile at ``path``, keyed
    ``function (object)`` (the object's file name; just the function where none is given)."""
    events: list[str] = []
    positions = 1
    names: dict[str, dict[str, str]] = defaultdict(dict)  # kind (ob, fl, fn) → id → name
    current = {"ob": "", "fn": ""}
    costs: dict[str, int] = defaultdict(int)
    column = 0
    skip_next = False  # the cost line after calls= is the call's inclusive cost
    with path.open(errors="replace") as lines:
        for raw in lines:
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            head = line[0]
            if head.isdigit() or head in "+-*":
                if skip_next:
                    skip_next = False
                    continue
                fields = line.split()
                values = fields[positions:]
                if column < len(values):
                    costs[_key(current)] += int(values[column])
                continue
            key, sep, value = line.partition("=")
            if sep and key in _NAMED:
                kind = {"cfi": "fl", "cfl": "fl", "fi": "fl", "fe": "fl", "cob": "ob", "cfn": "fn"}.get(
                    key, key
                )
                name = _name(names[kind], value.strip())
                if key in current:
                    current[key] = name
                    if key == "ob":
                        current["fn"] = ""
                continue
            if sep and key == "calls":
                skip_next = True
                continue
            key, sep, value = line.partition(":")
            if sep and key == "events":
                events = value.split()
                if event not in events:
                    raise ValueError(f"{path}: no {event} among the events {events}")
                column = events.index(event)
            elif sep and key == "positions":
                positions = len(value.split())
    return dict(costs)


def _name(table: dict[str, str], value: str) -> str:
    """A compressed name: ``(id) name`` defines it, ``(id)`` refers to it; plain names pass."""
    match = _COMPRESSED.match(value)
    if not match:
        return value
    ident, name = match.groups()
    if name is not None:
        table[ident] = name
    return table.get(ident, f"({ident})")


def _key(current: dict[str, str]) -> str:
    fn, ob = _RECURSION.sub("", current["fn"]) or "???", current["ob"]  # mpack_decode'2 is mpack_decode
    return f"{fn} ({Path(ob).name})" if ob else fn


def per_call(folder: Path, metric: str) -> dict[str, float] | None:
    """Each function's self instructions per call of ``metric`` from the two windows kept in
    ``folder`` (``METRIC-CALLS.callgrind``): (2N window - N window) / N. None when the two
    are not there."""
    windows = {}
    for path in folder.glob(f"{metric}-*{SUFFIX}"):
        calls = path.name[len(metric) + 1 : -len(SUFFIX)]
        if calls.isdigit():
            windows[int(calls)] = path
    pairs = [n for n in windows if 2 * n in windows]
    if not pairs:
        return None
    n = min(pairs)
    short, long = self_costs(windows[n]), self_costs(windows[2 * n])
    return {fn: (long.get(fn, 0) - short.get(fn, 0)) / n for fn in short.keys() | long.keys()}


@dataclass(frozen=True)
class Growth:
    """One function's change in self instructions per call, head against base."""

    function: str
    base: float
    head: float
    share: float | None  # of the change in all functions together; None when that is 0

    @property
    def delta(self) -> float:
        return self.head - self.base


def attribute(base: dict[str, float], head: dict[str, float], top: int = TOP) -> tuple[float, list[Growth]]:
    """The change in all functions' self costs together, and the ``top`` functions that grew
    most (largest increase first; only those that grew)."""
    functions = base.keys() | head.keys()
    total = sum(head.get(f, 0.0) for f in functions) - sum(base.get(f, 0.0) for f in functions)
    grown = [
        Growth(
            f,
            base.get(f, 0.0),
            head.get(f, 0.0),
            (head.get(f, 0.0) - base.get(f, 0.0)) / total if total else None,
        )
        for f in functions
    ]
    grown = sorted((g for g in grown if g.delta > 0), key=lambda g: (-g.delta, g.function))
    return total, grown[:top]


def lookups_only(base: dict[str, float], head: dict[str, float]) -> bool:
    """Whether the interpreter's lookups (``INTERPRETER_LOOKUPS``) grew by at least the whole
    change, every other function together not growing at all."""
    functions = base.keys() | head.keys()
    total = sum(head.get(f, 0.0) - base.get(f, 0.0) for f in functions)
    lookups = [f for f in functions if f.partition(" (")[0] in INTERPRETER_LOOKUPS]
    grown = sum(head.get(f, 0.0) - base.get(f, 0.0) for f in lookups)
    return total > 0 and grown >= total


@dataclass(frozen=True)
class Explanation:
    """What ``explain_rows`` found for one flagged count row: its lines, and whether the
    interpreter's lookups account for the whole growth (``lookups_only``)."""

    case: Case
    metric: str
    lines: list[str]
    lookups_only: bool = False


def explain_rows(flagged: Iterable[tuple[Case, str]], base_out: Path, head_out: Path) -> list[Explanation]:
    """For each flagged count row ``(case, metric)``, the functions that grew most between the
    profiles kept under ``base_out`` and ``head_out`` (counting runs' output folders), and
    whether it was the interpreter's lookups alone; a line saying why not where a side has none."""
    found = []
    for case, metric in flagged:
        if metric not in COUNTED:
            continue
        folders = [instructions.profile_folder(out, case) for out in (base_out, head_out)]
        sides = [per_call(folder, metric) for folder in folders]
        lines = [f"what grew in {case.label} {metric} (self instructions per call, head - base):"]
        missing = [label for label, side in zip(("base", "head"), sides, strict=True) if side is None]
        if missing:
            lines.append(
                f"  no profiles of {' or '.join(missing)} in {' and '.join(str(f) for f in folders)} "
                "(a revision from before profiles were kept?)"
            )
            found.append(Explanation(case, metric, lines))
            continue
        total, grown = attribute(sides[0], sides[1])
        lines += [_growth_line(g) for g in grown] or ["  no function grew"]
        lines.append(
            f"  all functions: {total:+,.0f}; profiles: {folders[0]} and {folders[1]} (callgrind_annotate)"
        )
        only = lookups_only(sides[0], sides[1])
        found.append(Explanation(case, metric, lines + ([f"  {LOOKUPS_ONLY}"] if only else []), only))
    return found


def explain(flagged: Iterable[tuple[Case, str]], base_out: Path, head_out: Path) -> list[str]:
    """``explain_rows``'s lines, one after the other."""
    return [line for found in explain_rows(flagged, base_out, head_out) for line in found.lines]


def _growth_line(growth: Growth) -> str:
    share = "" if growth.share is None else f" ({growth.share:.0%} of the change)"
    return f"  {growth.delta:+,.0f}{share}  {growth.function}  ({growth.base:,.0f} -> {growth.head:,.0f})"


def flagged_counts(rows: Sequence[MetricComparison]) -> list[tuple[Case, str]]:
    """``(case, metric)`` of every count row (``COUNTED``)
    among ``rows`` (``verdicts.MetricComparison``s) that is a regression."""
    return [(r.case, r.metric) for r in rows if r.metric in COUNTED and r.verdict == Verdict.REGRESSION]
