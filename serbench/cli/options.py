"""Command-line pieces that several commands share: spec lists, tolerances, the plan, the case
dimensions' flags, scenario flags."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Collection, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from serbench.analysis.ranking import DEFAULT_BASELINE
from serbench.analysis.verdicts import parse_tolerance
from serbench.model.errors import UsageError
from serbench.model.metrics import METRICS, metric
from serbench.model.profiles import PROFILES, Profile
from serbench.present.export import FORMATS
from serbench.scenarios import SCENARIOS, Dimension, dimensions
from serbench.serializers import BUILTINS
from serbench.workloads import default_workloads, expand

if TYPE_CHECKING:
    from serbench.runner.matrix import Plan


def split_specs(text: str) -> list[str]:
    """Split a comma-separated list of specs, keeping options (``a:k=v,k2=v``) whole."""
    items: list[str] = []
    for part in (p.strip() for p in text.split(",")):
        if items and "=" in part and ":" not in part:
            items[-1] += "," + part
        elif part:
            items.append(part)
    return items


def _dest(dimension: Dimension) -> str:
    return f"dimension_{dimension.field}"


def add_dimension_options(parser: argparse.ArgumentParser) -> None:
    """A flag for every case dimension some scenario varies (``scenarios.dimensions()``), taking
    a comma-separated list of values: ``--transport ipc,shm`` runs each."""
    for dimension in dimensions().values():
        allowed = f"{', '.join(map(str, dimension.choices))}; " if dimension.choices else ""
        default = ",".join(map(str, dimension.default))
        parser.add_argument(
            dimension.flag,
            dest=_dest(dimension),
            metavar=dimension.field.upper(),
            help=f"{dimension.help} ({allowed}default {default})".replace("%", "%%"),
        )


def dimension_values(dimension: Dimension, text: str) -> tuple[Any, ...]:
    """A dimension flag's comma-separated list, each value read by the dimension's ``parse``
    (repeats dropped); UsageError in one line naming the values it takes."""
    values, refused = [], []
    for part in dict.fromkeys(p.strip() for p in text.split(",") if p.strip()):
        try:
            value = dimension.parse(part)
        except ValueError as exc:
            refused.append(f"{part} ({exc})" if dimension.choices is None else part)
            continue
        if dimension.choices is not None and value not in dimension.choices:
            refused.append(part)
        else:
            values.append(value)
    if refused or not values:
        takes = f"; {dimension.field}s: {', '.join(map(str, dimension.choices))}" if dimension.choices else ""
        raise UsageError(f"{dimension.flag}: unknown {', '.join(refused) or 'empty'}{takes}")
    return tuple(dict.fromkeys(values))


def chosen_dimensions(args: argparse.Namespace) -> dict[str, tuple[Any, ...]]:
    """The case dimensions given on the command line, by ``Case`` field, each value parsed —
    here only: the gate hands its workers the values. One not given is left out, and its
    scenarios take its default."""
    return {
        dimension.field: dimension_values(dimension, text)
        for dimension in dimensions().values()
        if (text := getattr(args, _dest(dimension), None)) is not None
    }


def plan(args: argparse.Namespace) -> Plan:
    """The plan the command line asks for: ``--backends``, ``--workloads`` (sweeps expanded),
    ``--scenarios`` (each the default when not given) and every dimension's values. Names
    are not looked up here (``worker.checked`` does); a malformed dimension value is a
    UsageError, before anything else."""
    # Here, not at the top: the runner imports torch, which the parsers that share these options
    # (every command's --help, compare, report) must not pay for.
    from serbench.runner.matrix import Plan

    chosen = chosen_dimensions(args)
    planned = Plan(
        backends=split_specs(args.backends) if args.backends else list(BUILTINS),
        workloads=[w for spec in split_specs(args.workloads) for w in expand(spec)]
        if args.workloads
        else default_workloads(),
        scenarios=split_specs(args.scenarios)
        if args.scenarios
        else [name for name, s in SCENARIOS.items() if getattr(s, "default", True)],  # fanout: when named
        dimensions=chosen,
    )
    check_scoped_options(args, planned)
    return planned


def check_scoped_options(args: argparse.Namespace, planned: Plan) -> None:
    """UsageError for an option given that applies to one value of a case dimension only
    (``Option.applies``) in a run whose cases of its scenario have another."""
    for scenario in SCENARIOS.values():
        if scenario.name not in planned.scenarios:
            continue
        for option in scenario.options:
            if option.applies is None or getattr(args, option.key, None) is None:
                continue
            name, value = option.applies
            cases = scenario.cases(planned.backends, planned.workloads, planned.dimensions)
            others = sorted({str(getattr(case, name)) for case in cases if getattr(case, name) != value})
            if others:
                flag = dimensions()[name].flag
                raise UsageError(
                    f"{option.flag} is for {flag} {value} only; this run's {scenario.name} cases also "
                    f"have {flag} {','.join(others)}"
                )


def add_max_regression(parser: argparse.ArgumentParser) -> None:
    """``--max-regression``: the tolerated slowdown (compare, gate, report of two files)."""
    parser.add_argument("--max-regression", default="10%", help="tolerated slowdown (default 10%%)")


def add_baseline(parser: argparse.ArgumentParser) -> None:
    """``--baseline``: the backend row the ranking's speed-ups are relative to (run, report),
    checked against the rows of the run (``baseline``)."""
    parser.add_argument(
        "--baseline",
        metavar="ROW",
        help=f"backend row the ranking's speed-ups are against, as tables show it (pickle, pickle@shm; "
        f"default {DEFAULT_BASELINE})",
    )


def baseline(args: argparse.Namespace, rows: Iterable[str]) -> str:
    """The ranking's baseline: ``--baseline`` if it is one of ``rows`` (``Case.row`` of the run's
    cases), else a UsageError naming them; the default when not given (a run without it has
    no ranking)."""
    if args.baseline is None:
        return DEFAULT_BASELINE
    known = list(dict.fromkeys(rows))
    if args.baseline not in known:
        raise UsageError(
            f"--baseline {args.baseline}: no such backend row in this run; rows: {', '.join(known)}"
        )
    return args.baseline


def add_comparison_options(parser: argparse.ArgumentParser) -> None:
    """Options of ``compare`` and ``gate``: tolerances, --force, outputs."""
    add_max_regression(parser)
    parser.add_argument(
        "--metric-threshold",
        action="append",
        default=[],
        metavar="METRIC=PCT",
        help="per-metric tolerated slowdown, e.g. ttft_s=5%% (repeatable)",
    )
    parser.add_argument("--force", action="store_true", help="compare runs from different environments")
    parser.add_argument(
        "--strict",
        action="store_true",
        help="fail (exit 1) on indicative changes too: slowdowns beyond tolerance between plain runs "
        "(one process a side), which run-to-run variation alone can produce",
    )
    parser.add_argument(
        "--require-decisive",
        action="store_true",
        help="exit 2 when any row is inconclusive (its `detects` above its tolerance: the run could not "
        "have seen a slowdown of that size); without it, one warning line",
    )
    parser.add_argument("--changes-only", action="store_true", help="print only the rows with a change")
    parser.add_argument(
        "--markdown", metavar="FILE", help="write a Markdown summary (e.g. $GITHUB_STEP_SUMMARY)"
    )
    parser.add_argument("--export", metavar="FILE", help="write head's results for another dashboard")
    parser.add_argument("--export-format", choices=sorted(FORMATS), default="bencher")


def max_regression(args: argparse.Namespace) -> float:
    """``--max-regression`` parsed; UsageError if malformed."""
    try:
        return parse_tolerance(args.max_regression)
    except ValueError as exc:
        raise UsageError(f"--max-regression: {exc}") from None


def tolerances(args: argparse.Namespace) -> tuple[float, dict[str, float]]:
    """``--max-regression`` and ``--metric-threshold`` parsed; UsageError if malformed."""
    overrides = {}
    for item in args.metric_threshold:
        name, eq, value = item.partition("=")
        try:
            if not eq or not name:
                raise ValueError(f"{item!r} is not METRIC=PCT")
            overrides[name.strip()] = parse_tolerance(value)
        except ValueError as exc:
            raise UsageError(f"--metric-threshold: {exc}") from None
    return max_regression(args), overrides


def check_metric_names(overrides: Iterable[str], also: Iterable[str] = ()) -> None:
    """UsageError naming a ``--metric-threshold`` metric that is not compared: one neither in
    ``metrics.METRICS`` nor among ``also`` (the metrics of the files being compared, which a
    newer serbench may have written), or a yardstick of the machine, which is never compared."""
    known = set(METRICS) | set(also)
    unknown = [name for name in overrides if name not in known]
    if unknown:
        named = ", ".join(sorted(n for n in known if not metric(n).yardstick))
        raise UsageError(f"--metric-threshold: unknown metric {', '.join(unknown)}; metrics: {named}")
    yardsticks = [name for name in overrides if metric(name).yardstick]
    if yardsticks:
        raise UsageError(
            f"--metric-threshold: {', '.join(yardsticks)} measures the machine and is never compared"
        )


def check_writable(path: str | None, flag: str) -> None:
    """UsageError, before anything is measured or compared, when ``path`` (an output file,
    given with ``flag``) cannot be written: a folder, in a folder that does not exist or is
    not writable, or a file that is not."""
    if path is None:
        return
    file = Path(path)
    folder = file.parent
    problem = None
    if file.is_dir():
        problem = "is a folder"
    elif not folder.is_dir():
        problem = f"no folder {folder}"
    elif not os.access(folder, os.W_OK | os.X_OK) or (file.exists() and not os.access(file, os.W_OK)):
        problem = "not writable"
    if problem:
        raise UsageError(f"{flag} {path}: {problem}")


def _argparse_type(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """``parse`` as an argparse type: its ValueError becomes argparse's own usage error."""

    def convert(text: str) -> Any:
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc) or f"bad value {text!r}") from None

    convert.__name__ = parse.__name__
    return convert


def add_scenario_options(parser: argparse.ArgumentParser, taken: Collection[str] = ()) -> None:
    """Every scenario's declared options (``scenarios.base.Option``), a group per scenario;
    an option several scenarios share is added once, in the first one's group. ``taken``: flags
    the command gives a meaning of its own (the gate's ``--measure``), left out."""
    added: set[str] = set(taken)
    for scenario in SCENARIOS.values():
        new = [option for option in scenario.options if option.flag not in added]
        if not new:
            continue
        group = parser.add_argument_group(f"{scenario.name} scenario", scenario.description)
        for option in new:
            added.add(option.flag)
            group.add_argument(
                option.flag,
                dest=option.key,
                type=_argparse_type(option.parse),
                choices=option.choices,
                metavar=option.metavar or option.flag.lstrip("-").replace("-", "_").upper(),
                help=option.help,
            )


def profile(args: argparse.Namespace, taken: Collection[str] = ()) -> Profile:
    """The run profile (``--full`` or quick) with the scenario options that were given (but those
    whose flag is in ``taken``: the command's own, as for ``add_scenario_options``)."""
    given = {
        option.key: getattr(args, option.key)
        for scenario in SCENARIOS.values()
        for option in scenario.options
        if option.flag not in taken and getattr(args, option.key, None) is not None
    }
    return PROFILES["full" if getattr(args, "full", False) else "quick"].with_options(**given)
