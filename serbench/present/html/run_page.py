"""The report page of one run: environment, noise, backends, a section per scenario, failed cases.

Sections follow the records: a scenario's section appears when the file holds
records of it, with the figures and tables the scenario declares
(``Scenario.figures``, ``Scenario.tables``: ``serbench.model.views``), figures by
metric name, so a metric missing from a file only drops its panel. Every case of the file lands
in a table row (``data-case``), failed ones with their error, so nothing
measured is hidden behind a figure. What a metric is called and how it is
plotted is ``serbench.model.metrics``'; the decision, rankings, noise and the scenario's
own tables are the run's summary (``serbench.analysis.summary``), which the terminal prints too.

Everything here reads the typed model: ``results.Results`` and its
``Record``s, a record's scenario ``Info`` only after checking its kind
(``MemoryInfo.timeline``, ``IpcInfo.sweep``, ``StreamInfo.step_s``). Rows,
swatches and figure lines are ``page.line``s: a backend over shm, or along
any other dimension of ``results.Case``, is a row and a line of its own.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import msgspec

from serbench.analysis.summary import RunSummary, ScenarioNoise, ScenarioTables
from serbench.model.metrics import metric
from serbench.model.results import (
    Accelerator,
    FanoutInfo,
    IpcInfo,
    MemoryInfo,
    Record,
    Results,
    StreamInfo,
)
from serbench.model.stats import MIN_DISTRIBUTION
from serbench.model.units import format_value
from serbench.model.views import P99, Column, Figure
from serbench.present.html.page import (
    DASH,
    MEDIAN,
    TIMES,
    Look,
    case_attr,
    case_cell,
    e,
    figure,
    incomplete,
    line,
    page,
    section,
    table,
    unique,
    write_page,
)
from serbench.present.terminal import SETTLED_WORDS
from serbench.probes import system
from serbench.scenarios import SCENARIOS

# Half-width of a median's CI over the median: at most this is "quiet", at most the second "moderate".
NOISE_LEVELS = ((0.02, "quiet"), (0.10, "moderate"))


def _scenarios(data: Results) -> list[str]:
    """The scenarios of ``data``'s records: the known ones in registry order, then the rest."""
    found = data.scenarios()
    return [s for s in SCENARIOS if s in found] + [s for s in found if s not in SCENARIOS]


# ---------------------------------------------------------------- scenario sections


def metric_table(records: Sequence[Record], name: str, stat: str, look: Look) -> str:
    """One metric statistic as a row (``page.line``) x workload grid, like the figure above it.

    Every case of ``records`` gets its cell (``data-case``), failed ones say so.
    """
    by_cell = {(line(r), r.workload): r for r in records}
    workloads = unique(r.workload for r in records)
    rows = []
    for row in look.lines(records):
        cells = "".join(case_cell(by_cell.get((row, w)), name, stat) for w in workloads)
        rows.append(f"<tr><th>{look.backend(row)}</th>{cells}</tr>")
    counts = [r.metrics[name].n for r in _ok(records) if name in r.metrics]
    repeated = any(n > 1 for n in counts)
    what = "median [95% CI of the median]" if repeated else "one value per case"
    caption = f"{metric(name).label}: {what if stat == MEDIAN else stat}"
    if repeated and counts:
        low, high = min(counts), max(counts)
        caption += f"; n = {low}" + (f"{DASH}{high}" if high > low else "") + " per case"
        if low < MIN_DISTRIBUTION:
            caption += f"; (n=K): fewer than {MIN_DISTRIBUTION} samples, a value without CI or p99"
    return table(["backend", *map(e, workloads)], rows, "numbers", caption)


def _ok(records: Iterable[Record]) -> list[Record]:
    return [r for r in records if r.ok]


def _metric_names(records: Iterable[Record]) -> list[str]:
    return unique(name for r in _ok(records) for name in r.metrics)


def _panel(records: Sequence[Record], name: str, stat: str):
    # Here, not at the top: plots imports matplotlib, which importing the report must not pay.
    from serbench.present.html.plots import Panel

    ok = {(line(r), r.workload): r.metrics[name] for r in _ok(records) if name in r.metrics}
    failed = frozenset((line(r), r.workload) for r in records if not r.ok)
    unit = next(iter(ok.values())).unit
    facts = metric(name)
    return Panel(facts.label, unit, stat, ok, failed, log=facts.log_axis)


def _timeline(records: Sequence[Record], look: Look) -> bytes | None:
    """Each line's timeline of the workload with the most images (None: no timelines)."""
    # Here, not at the top: plots imports matplotlib, which importing the report must not pay.
    from serbench.present.html import plots

    ok = [r for r in _ok(records) if isinstance(r.info, MemoryInfo) and r.info.timeline]
    if not ok:
        return None
    workload = max((r.workload for r in ok), key=lambda w: (plots.image_count(w) or 0, w))
    timelines = {line(r): r.info.timeline for r in ok if r.workload == workload}
    return plots.timelines(workload, timelines, look.styles(look.lines(ok)))


def _sweep(records: Sequence[Record], look: Look) -> bytes | None:
    """The rate sweeps of ``records`` (None: no case swept)."""
    # Here, not at the top: plots imports matplotlib, which importing the report must not pay.
    from serbench.present.html import plots

    sweeps = {
        (line(r), r.workload): r.info.sweep
        for r in _ok(records)
        if isinstance(r.info, IpcInfo) and r.info.sweep is not None
    }
    if not sweeps:
        return None
    workloads = unique(w for _, w in sweeps)
    return plots.rate_sweep(sweeps, look.styles(look.lines(_ok(records))), workloads)


def _workers(columns: Sequence[Column], records: Sequence[Record]) -> bytes:
    """Lines against ``Case.workers``, one per backend and transport (its colour ``line_colour``'s),
    a dotted mark where workers + core outnumber the CPUs (``FanoutInfo.cpu_count``)."""
    # Here, not at the top: plots imports matplotlib, which importing the report must not pay.
    from serbench.present.html import plots

    ok = [r for r in _ok(records) if r.workers]
    keyed = {id(r): msgspec.structs.replace(line(r), workers=None) for r in ok}
    lines = {k: plots.line_style(k, k.row) for k in unique(keyed.values())}
    panels = []
    for name, stat in columns:
        cells = {
            (keyed[id(r)], f"workers={r.workers} {r.workload}"): r.metrics[name]
            for r in ok
            if name in r.metrics
        }
        if cells:
            facts = metric(name)
            panels.append(
                plots.Panel(facts.label, next(iter(cells.values())).unit, stat, cells, log=facts.log_axis)
            )
    cpus = min((r.info.cpu_count for r in ok if isinstance(r.info, FanoutInfo)), default=0)
    axis = plots.WORKERS
    if cpus and any(r.workers + 1 > cpus for r in ok):
        axis = replace(axis, marks=((cpus - 0.5, "more workers than CPUs →"),))
    return plots.against(panels, lines, axis)


def _draw(spec: Figure, columns: Sequence[Column], records: Sequence[Record], look: Look) -> bytes | None:
    # Here, not at the top: plots imports matplotlib, which importing the report must not pay.
    from serbench.present.html import plots

    if spec.kind == "timeline":
        return _timeline(records, look)
    if spec.kind == "sweep":
        return _sweep(records, look)
    if spec.kind == "workers" and len({r.workers for r in _ok(records) if r.workers}) >= 2:
        return _workers(columns, records)  # fewer worker counts: bars, below
    panels = [_panel(records, name, stat) for name, stat in columns]
    lines = look.styles(look.lines(records))
    workloads = unique(r.workload for r in records)
    if spec.kind == "cdf":
        return plots.cdf(panels[0], lines, workloads)
    if spec.kind == "hits":  # against the measured hit ratio (docs/cache.md)
        ratios = {
            (line(r), r.workload): r.metrics["hit_ratio"].median
            for r in _ok(records)
            if "hit_ratio" in r.metrics
        }
        return (
            plots.against_values(panels, lines, ratios, "cache hit ratio (measured)")
            if len(ratios) > 1
            else None
        )
    x_axis = {"images": plots.IMAGES, "batch": plots.BATCH, "size": plots.SIZE}.get(spec.kind)
    step_s = {r.info.step_s for r in _ok(records) if isinstance(r.info, StreamInfo)}
    if spec.kind == "batch" and len(step_s) == 1:  # the step budget the ipc cases ran under
        x_axis = replace(x_axis, budget=step_s.pop())
    if x_axis is not None and len({x_axis.value(w) for w in workloads} - {None}) >= 2:
        return plots.against(panels, lines, x_axis)
    if spec.kind in ("batch", "size"):
        return None  # fewer than two points: the bars and tables already show them
    return plots.bars(panels, lines, workloads)


def _specs(scenario: str, records: Sequence[Record]) -> tuple[Figure, ...]:
    """The figures a scenario declares; a bar chart per metric for one this serbench does not know."""
    if scenario in SCENARIOS:
        return SCENARIOS[scenario].figures
    return tuple(Figure("bars", metric(n).label, ((n, MEDIAN),)) for n in _metric_names(records))


def _tables_html(tables: ScenarioTables) -> str:
    """The tables only the scenario can compute (``Scenario.tables``)."""
    return "".join(
        f"<h3>{e(t.title[:1].upper() + t.title[1:])}</h3>"
        + table(list(map(e, t.headers)), [_row_html(row) for row in t.rows], "numbers", t.note)
        for t in tables.own
    )


def _row_html(cells: Sequence[str]) -> str:
    first, *rest = cells
    return f"<tr><th>{e(first)}</th>" + "".join(f"<td>{e(c)}</td>" for c in rest) + "</tr>"


def scenario_section(tables: ScenarioTables, data: Results, look: Look) -> str:
    """Figures with their tables, a table of the metrics no figure shows, the scenario's own tables."""
    scenario = tables.scenario
    records = [r for r in data.records if r.scenario == scenario]
    present = _metric_names(records)
    parts = [f"<p>{e(SCENARIOS[scenario].description)}</p>" if scenario in SCENARIOS else ""]
    tabled: set[Column] = set()  # a (metric, statistic) gets one table, under its first figure
    for spec in _specs(scenario, records):
        columns = [c for c in spec.columns if c[0] in present]
        png = _draw(spec, columns, records, look) if columns else None
        if png is None:
            continue
        parts += [f"<h3>{e(spec.title)}</h3>", figure(png, spec.title)]
        if spec.table:
            fresh = [c for c in columns if c not in tabled]
            parts += [metric_table(records, name, stat, look) for name, stat in fresh]
            tabled.update(columns)
    shown = {name for name, _ in tabled}
    # a statistic of a metric whose p99 is tabled (ttft_p99_s of ttft_s) would be that table again
    rest = [name for name in present if name not in shown and (metric(name).statistic_of, P99) not in tabled]
    if rest:
        parts += ["<h3>Other metrics</h3>", *(metric_table(records, name, MEDIAN, look) for name in rest)]
    parts.append(_tables_html(tables))
    if not present:
        parts += ["<p class='banner bad'>Every case of this scenario failed: see the failed cases.</p>"]
    return section(f"scenario-{scenario}", scenario, "".join(parts))


# ---------------------------------------------------------------- run-level sections


@dataclass(frozen=True)
class Run:
    """A results document with where it came from, what the page calls it, and how noisy it was."""

    label: str
    source: str
    data: Results
    noise: list[ScenarioNoise]


def _host_link(link: dict[str, str] | None) -> str:
    """A device's PCIe link as ``environment.host_link`` recorded it: max, and what it runs at now."""
    if not link or "max" not in link:
        return "unknown"
    return f"{link['max']} (now {link.get('current', '?')})"


def accelerator_rows(accelerator: Accelerator | None) -> dict[str, str]:
    """The accelerator and its host link, as the environment section shows them."""
    if accelerator is None:
        return {"accelerator": "not recorded", "host link": "—"}
    if accelerator.error:
        return {"accelerator": accelerator.error, "host link": "—"}
    if not accelerator.devices:
        build = f"CUDA {accelerator.torch_cuda}" if accelerator.torch_cuda else "a CPU-only build"
        return {"accelerator": f"none (torch is {build}; no CUDA device visible)", "host link": "—"}
    names = [
        f"{d.name}, {format_value(d.memory_bytes, 'bytes')}, compute {d.capability}"
        for d in accelerator.devices
    ]
    links = [_host_link(d.host_link) for d in accelerator.devices]
    cuda = f"CUDA {accelerator.torch_cuda}"
    return {"accelerator": f"{'; '.join(names)} ({cuda})", "host link": "; ".join(links)}


def _known(value: object, missing: str = "?") -> str:
    return missing if value is None else str(value)


def _environment_rows(run: Run) -> dict[str, str]:
    data = run.data
    env = data.environment
    return {
        "results": run.source,
        "complete": "yes" if data.complete else "NO — interrupted, cases are missing",
        "started → finished": f"{data.started} → {data.finished or 'not finished'}",
        "profile": data.profile,
        "command line": shlex.join(env.command),
        "git commit": str(env.git_commit),
        "python": f"{_known(env.implementation, '')} {_known(env.python, '')}",
        "libraries": ", ".join(f"{k} {v}" for k, v in env.libraries.items()),
        "platform": _known(env.platform, ""),
        "cpu": f"{_known(env.cpu)}, {_known(env.cpu_count)} CPUs",
        "RAM": format_value(env.memory_bytes, "bytes") if env.memory_bytes else "?",
        **accelerator_rows(env.accelerator),
        "allocator settings": " ".join(f"{k}={v}" for k, v in env.allocator_env.items()) or "(defaults)",
        "system check": (
            "not recorded" if env.system is None else "; ".join(system.warnings(env.system)) or "no warning"
        ),
    }


def environment_section(runs: Sequence[Run]) -> str:
    """What produced the numbers: one column per file; rows that differ between files are marked."""
    tables = [_environment_rows(run) for run in runs]
    rows = []
    for key in tables[0]:
        values = [t[key] for t in tables]
        differs = len(set(values)) > 1 and key not in ("results", "started → finished")
        warned = key == "system check" and any(v not in ("no warning", "not recorded") for v in values)
        cls = ' class="differs"' if differs or warned or any(v.startswith("NO") for v in values) else ""
        rows.append(f"<tr{cls}><th>{e(key)}</th>{''.join(f'<td>{e(v)}</td>' for v in values)}</tr>")
    headers = ["", *(e(run.label) for run in runs)]
    return section("environment", "Environment", table(headers, rows, "env"))


def noise_level(spread: float) -> str:
    return next((name for limit, name in NOISE_LEVELS if spread <= limit), "noisy")


def noise_html(run: Run) -> str:
    """A one-line verdict per scenario: typical and worst ± of the medians."""
    rows = []
    for n in run.noise:
        level = noise_level(n.typical)
        case = n.worst_case
        worst = f"{run.data.row_label(case)} {TIMES} {case.workload}: {metric(n.worst_metric).label}"
        rows.append(
            f"<tr><td>{e(n.scenario)}</td><td><span class='badge {level}'>{level}</span></td>"
            f"<td>±{n.typical:.1%}</td><td>±{n.worst:.1%} <small>{e(worst)}</small></td>"
            f"<td>{n.metrics}</td></tr>"
        )
    if not rows:
        return "<p>No metric with repeated samples: nothing to say about noise.</p>"
    intro = (
        "<p>Half-width of the 95% confidence interval of each median, relative to the median. "
        "A difference between two backends smaller than about twice the typical value is within "
        "this run's noise.</p>"
    )
    headers = ["scenario", "level", "typical (median)", "worst", "metrics"]
    return intro + table(headers, rows)


def noise_section(runs: Sequence[Run]) -> str:
    body = "".join((f"<h3>{e(run.label)}</h3>" if len(runs) > 1 else "") + noise_html(run) for run in runs)
    return section("noise", "How noisy " + ("were these runs" if len(runs) > 1 else "was this run"), body)


def _details(items: dict[str, str]) -> str:
    if not items:
        return "0"
    lines = "".join(f"<li><code>{e(str(k))}</code>: {e(str(v))}</li>" for k, v in items.items())
    return f"<details><summary>{len(items)}</summary><ul>{lines}</ul></details>"


def backends_section(data: Results, look: Look) -> str:
    """Safety and conformance per backend, as checked before timing it."""
    rows = []
    for spec, backend in data.backends.items():
        conformance = backend.conformance
        safe = {
            True: "yes",
            False: "<span class='badge bad'>NO</span> executes code from its input",
            None: "<span class='badge bad'>undeclared</span> treated as unsafe",
        }[backend.safe]
        passed = "?" if conformance.error else conformance.passed
        rows.append(
            f"<tr><td>{look.backend(spec)}</td><td>{safe}</td><td>{passed}</td>"
            f"<td>{_details(conformance.unsupported)}</td>"
            f"<td class='{'failed' if conformance.failed else ''}'>{_details(conformance.failed)}</td>"
            f"<td>{e(backend.description or '')}</td></tr>"
        )
    headers = [
        "backend",
        "safe for untrusted input",
        "conformance passed",
        "unsupported",
        "failed",
        "strategy",
    ]
    return section("backends", "Backends: safety and conformance", table(headers, rows))


def failed_section(data: Results, look: Look) -> str:
    """Every failed case with its error, in full."""
    failed = [r for r in data.records if not r.ok]
    if not failed:
        return section("failed", "Failed cases", "<p>None: every case ran.</p>")
    rows = [
        f'<tr data-case="{case_attr(r)}"><td>{e(r.scenario)}</td><td>{look.backend(r)}</td>'
        f"<td>{e(r.workload)}</td><td><pre>{e(str(r.error))}</pre></td></tr>"
        for r in failed
    ]
    return section(
        "failed", f"Failed cases ({len(failed)})", table(["scenario", "backend", "workload", "error"], rows)
    )


# ---------------------------------------------------------------- the page


def ranking_section(summary: RunSummary, look: Look) -> str:
    """Per scenario, rows ranked by the geometric mean (with its interval) of their factor
    against the baseline across workloads in its headline metric: ties share a rank, variants
    come after; memory reads × the baseline, lower is better."""
    baseline = summary.baseline
    blocks = []
    for ranked in summary.rankings:
        rows = [
            f"<tr><td>{e(r.place)}</td><td>{look.backend(r.row)}</td>"
            + "".join(
                f"<td>{r.factors[w]:.3g}×</td>" if w in r.factors else "<td></td>" for w in ranked.workloads
            )
            + ("<td></td>" if r.geomean is None else f"<td><b>{r.geomean:.3g}×</b> {r.interval}</td>")
            + f"<td>{r.n}</td></tr>"
            for r in ranked.rows
        ]
        workloads = [e(w) for w in ranked.workloads]
        headers = ["rank", "backend", *workloads, "geometric mean [95% CI]", "n workloads"]
        blocks.append(f"<h3>{e(ranked.title)}</h3>{table(headers, rows, '', ' '.join(ranked.notes))}")
    if not blocks:
        return section(
            "ranking", "Ranking", f"<p>No ranking: {e(baseline)} was not measured in this run.</p>"
        )
    intro = (
        f"<p>Each backend against <b>{e(baseline)}</b> per workload, and the geometric mean across "
        "the workloads both measured, with its 95% interval. Rows whose ratio to the first of a "
        "rank has an interval reaching within the metric's practical tie of 1 share that rank "
        "(<i>N=</i>).</p>"
    )
    return section("ranking", f"Ranking against {e(baseline)}", intro + "".join(blocks))


def decision_section(summary: RunSummary, look: Look) -> str:
    """What to use, first on the page: per workload shape and scenario, the safe backends best
    within this run's noise, one line of why, the faster unsafe ones apart."""
    if not summary.choices:
        return ""
    rows = []
    for c in summary.choices:
        use = (
            e(c.missing)
            if c.missing
            else " = ".join(look.backend(row) for row in c.use) + (" <i>(tied)</i>" if c.tie else "")
        )
        if SETTLED_WORDS[c.settled]:
            use += f"<br><small>{e(SETTLED_WORDS[c.settled])}</small>"
        rows.append(
            f"<tr><th>{e(c.shape)}</th><td>{e(c.where)}</td><td>{use}</td>"
            f"<td><small>{e('; '.join([c.measured, *c.reasons]))}</small></td>"
            f"<td>{e(', '.join(c.unsafe))}</td></tr>"
        )
    intro = (
        "<p>Per workload shape and scenario, the safe backends that are best on the scenario's "
        "headline metric within this run's own noise: ×r [low, high] is the ratio to the first one "
        f"named, with its 95% interval, of {e(summary.ratio_of)}; tied {e(summary.tie_rule)}. "
        "Unsafe backends are never chosen; those faster beyond noise are listed apart.</p>"
    )
    headers = ["shape", "scenario", "use", "why", "faster but unsafe"]
    return section("decision", "Decision: what to use", intro + table(headers, rows))


def time_section(summary: RunSummary) -> str:
    """Where the run's time went: per scenario, the visits its cases took and their seconds."""
    if not summary.time:
        return ""
    rows = [
        f"<tr><td>{e(t.scenario)}</td><td>{t.visits}</td><td>{t.seconds:.0f}</td></tr>" for t in summary.time
    ]
    intro = (
        "<p>Per scenario, the visits its cases took (a process each; a case measured whole, one) "
        "and the seconds they spent. A default run stops visiting a case's backends once their "
        "comparisons are settled.</p>"
    )
    return section("time", "Where the time went", intro + table(["scenario", "visits", "seconds"], rows))


def render(summary: RunSummary, source: str = "") -> str:
    """The report page of one run's summary (its results are ``summary.results``)."""
    data = summary.results
    look = Look.of(data)
    runs = [Run("this run", source, data, summary.noise)]
    order = {s: i for i, s in enumerate(_scenarios(data))}
    tables = sorted(summary.scenarios, key=lambda t: order[t.scenario])
    sections = [
        incomplete(data, "This run"),
        decision_section(summary, look),
        environment_section(runs),
        noise_section(runs),
        time_section(summary),
        backends_section(data, look),
        ranking_section(summary, look),
        *(scenario_section(t, data, look) for t in tables),
        failed_section(data, look),
    ]
    return page("serbench report", f"{len(data.records)} cases, run started {e(data.started)}", sections)


def write_report(summary: RunSummary, out_dir: Path, source: str = "") -> Path:
    """Render ``summary`` to ``out_dir/index.html``: what ``serbench run`` leaves beside results.json."""
    return write_page(render(summary, source or str(out_dir / "results.json")), out_dir)
