"""The report page of one run: environment, noise, backends, a section per scenario, failed cases.

Sections follow the records: a scenario's section appears when the file holds
records of it, and figures are declared by metric name (``SECTIONS``), so a
metric missing from a file only drops its panel. Every case of the file lands
in a table row (``data-case``), failed ones with their error, so nothing
measured is hidden behind a figure. What a metric is called and how it is
plotted is ``serbench.metrics``'; how noisy a run was is ``compare.spreads``,
the rule compare and the gate use (docs/architecture.md, Report).
"""

from __future__ import annotations

import shlex
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from serbench import compare
from serbench.metrics import metric
from serbench.report.page import (
    DASH,
    MEDIAN,
    P99,
    TIMES,
    Look,
    case_attr,
    case_cell,
    e,
    figure,
    incomplete,
    page,
    section,
    table,
    unique,
    write_page,
)
from serbench.scenarios import SCENARIOS
from serbench.scenarios.stream import fitting_batches
from serbench.stats import MIN_DISTRIBUTION
from serbench.units import format_value

Column = tuple[str, str]  # (metric name, statistic)


@dataclass(frozen=True)
class FigureSpec:
    """One figure of a scenario section and the table beneath it.

    ``kind``: "bars" (grouped by workload), "cdf" (raw samples of the first
    column's metric, one axes per workload) or "images" (lines against
    images per request; bars when the file has fewer than two image counts),
    "batch" (lines against the batch of ``outputs-B`` workloads, the step
    budget dashed) and "size" (log-log lines against the bytes of ``tensor-N``
    workloads, the 256 B and 64 KiB thresholds marked): both left out when
    the file has fewer than two such workloads; "sweep" (the ipc rate sweep in
    ``info["sweep"]``, drawn when a case has one); or "timeline" (the memory
    scenario's psutil timeline in ``info``, drawn when the file has one; the
    columns of these two only say which metric must exist).
    """

    kind: str
    title: str
    columns: tuple[Column, ...]
    table: bool = True  # the columns as tables beneath the figure


# Which figures a scenario's section shows: page layout, not metric knowledge.
SECTIONS: dict[str, tuple[FigureSpec, ...]] = {
    "micro": (
        FigureSpec(
            "bars", "Encode and decode time of one request", (("encode_s", MEDIAN), ("decode_s", MEDIAN))
        ),
        FigureSpec("bars", "Bytes and frames on the wire", (("wire_bytes", MEDIAN), ("frames", MEDIAN))),
        FigureSpec(
            "batch",
            "One engine step's encode and decode against batch (outputs-B)",
            (("encode_s", MEDIAN), ("decode_s", MEDIAN), ("decode_cpu_s", MEDIAN)),
            table=False,
        ),
        FigureSpec(
            "size",
            "Latency against tensor size (tensor-N): 256 B inline threshold, 64 KiB zmq copy threshold",
            (("encode_s", MEDIAN), ("decode_s", MEDIAN), ("roundtrip_s", MEDIAN), ("oob_frames", MEDIAN)),
            table=False,
        ),
    ),
    "ipc": (
        FigureSpec("cdf", "Time to first token, per request", (("ttft_s", MEDIAN), ("ttft_s", P99))),
        FigureSpec("cdf", "Inter-token latency, per output", (("itl_s", MEDIAN), ("itl_s", P99))),
        FigureSpec(
            "images",
            "TTFT and ITL against images per request: median and p99",
            (("ttft_s", MEDIAN), ("ttft_s", P99), ("itl_s", MEDIAN), ("itl_s", P99)),
        ),
        FigureSpec(
            "bars",
            "TTFT's parts, per request: ingress (encode → engine decoded), queue, first step; egress",
            (("ingress_s", MEDIAN), ("ingress_s", P99), ("queue_s", MEDIAN), ("egress_s", MEDIAN)),
        ),
        FigureSpec("bars", "Throughput", (("req_per_s", MEDIAN), ("payload_gb_per_s", MEDIAN))),
        FigureSpec(
            "batch",
            "The output path: the frontend's decode per step and egress against batch (step budget dashed)",
            (("step_decode_s", MEDIAN), ("step_decode_s", P99), ("egress_s", MEDIAN), ("egress_s", P99)),
        ),
        FigureSpec(
            "size",
            "Ingress against tensor size (tensor-N): p50 and p99, thresholds marked",
            (("ingress_s", MEDIAN), ("ingress_s", P99)),
            table=False,
        ),
        FigureSpec(
            "sweep",
            "Against offered load (--rate sweep): TTFT, ingress, admitted rate and goodput",
            (("ttft_s", MEDIAN),),
            table=False,
        ),
    ),
    "memory": (
        FigureSpec(
            "images",
            "Peak RSS above baseline against images per request",
            (("peak_rss_engine_bytes", MEDIAN), ("peak_rss_frontend_bytes", MEDIAN)),
        ),
        FigureSpec(
            "images",
            "Copies of the payload at peak (extra peak bytes / payload bytes)",
            (("copies", MEDIAN), ("copies_frontend", MEDIAN)),
        ),
        FigureSpec(
            "timeline",
            "RSS above baseline during one request of the largest workload",
            (("peak_rss_engine_bytes", MEDIAN),),
            table=False,
        ),
    ),
}

# Half-width of a median's CI over the median: at most this is "quiet", at most the second "moderate".
NOISE_LEVELS = ((0.02, "quiet"), (0.10, "moderate"))


def _scenarios(data: dict) -> list[str]:
    """The scenarios of ``data``'s records: the declared ones in ``SECTIONS`` order, then the rest."""
    found = unique(r["scenario"] for r in data["records"])
    return [s for s in SECTIONS if s in found] + [s for s in found if s not in SECTIONS]


# ---------------------------------------------------------------- scenario sections


def metric_table(records: Sequence[dict], name: str, stat: str, look: Look) -> str:
    """One metric statistic as a backend x workload grid, like the figure above it.

    Every case of ``records`` gets its cell (``data-case``), failed ones say so.
    """
    by_cell = {(r["backend"], r["workload"]): r for r in records}
    workloads = unique(r["workload"] for r in records)
    rows = []
    for backend in look.backends(records):
        cells = "".join(case_cell(by_cell.get((backend, w)), name, stat) for w in workloads)
        rows.append(f"<tr><th>{look.backend(backend)}</th>{cells}</tr>")
    counts = [len(r["metrics"][name]["values"]) for r in _ok(records) if name in r["metrics"]]
    repeated = any(n > 1 for n in counts)
    what = "median [95% CI of the median]" if repeated else "one value per case"
    caption = f"{metric(name).label}: {what if stat == MEDIAN else stat}"
    if repeated and counts:
        low, high = min(counts), max(counts)
        caption += f"; n = {low}" + (f"{DASH}{high}" if high > low else "") + " per case"
        if low < MIN_DISTRIBUTION:
            caption += f"; (n=K): fewer than {MIN_DISTRIBUTION} samples, a value without CI or p99"
    return table(["backend", *map(e, workloads)], rows, "numbers", caption)


def _ok(records: Iterable[dict]) -> list[dict]:
    return [r for r in records if not r.get("error")]


def _metric_names(records: Iterable[dict]) -> list[str]:
    return unique(name for r in _ok(records) for name in r["metrics"])


def _panel(records: Sequence[dict], name: str, stat: str):
    # Here, not at the top: plots imports matplotlib, which importing the report must not pay.
    from serbench.report.plots import Panel

    ok = {(r["backend"], r["workload"]): r["metrics"][name] for r in _ok(records) if name in r["metrics"]}
    failed = frozenset((r["backend"], r["workload"]) for r in records if r.get("error"))
    unit = next(iter(ok.values()))["unit"]
    facts = metric(name)
    return Panel(facts.label, unit, stat, ok, failed, log=facts.log_axis)


def _timeline(records: Sequence[dict], look: Look) -> bytes | None:
    """Each backend's timeline of the workload with the most images (None: no timelines)."""
    # Here, not at the top: plots imports matplotlib, which importing the report must not pay.
    from serbench.report import plots

    ok = [r for r in _ok(records) if r.get("info", {}).get("timeline")]
    if not ok:
        return None
    workload = max((r["workload"] for r in ok), key=lambda w: (plots.image_count(w) or 0, w))
    timelines = {r["backend"]: r["info"]["timeline"] for r in ok if r["workload"] == workload}
    return plots.timelines(workload, timelines, look.backends(ok), look.colours)


def _sweep(records: Sequence[dict], look: Look) -> bytes | None:
    """The rate sweeps of ``records`` (None: no case swept)."""
    # Here, not at the top: plots imports matplotlib, which importing the report must not pay.
    from serbench.report import plots

    swept = [r for r in _ok(records) if "sweep" in r.get("info", {})]
    sweeps = {(r["backend"], r["workload"]): r["info"]["sweep"] for r in swept}
    if not sweeps:
        return None
    workloads = unique(w for _, w in sweeps)
    return plots.rate_sweep(sweeps, look.backends(_ok(records)), workloads, look.colours)


def _draw(spec: FigureSpec, columns: Sequence[Column], records: Sequence[dict], look: Look) -> bytes | None:
    # Here, not at the top: plots imports matplotlib, which importing the report must not pay.
    from serbench.report import plots

    if spec.kind == "timeline":
        return _timeline(records, look)
    if spec.kind == "sweep":
        return _sweep(records, look)
    panels = [_panel(records, name, stat) for name, stat in columns]
    backends = look.backends(records)
    workloads = unique(r["workload"] for r in records)
    if spec.kind == "cdf":
        return plots.cdf(panels[0], backends, workloads, look.colours)
    x_axis = {"images": plots.IMAGES, "batch": plots.BATCH, "size": plots.SIZE}.get(spec.kind)
    step_s = {r["info"].get("step_s") for r in _ok(records) if "step_s" in r.get("info", {})}
    if spec.kind == "batch" and len(step_s) == 1:  # the step budget the ipc cases ran under
        x_axis = replace(x_axis, budget=step_s.pop())
    if x_axis is not None and len({x_axis.value(w) for w in workloads} - {None}) >= 2:
        return plots.against(panels, backends, look.colours, x_axis)
    if spec.kind in ("batch", "size"):
        return None  # fewer than two points: the bars and tables already show them
    return plots.bars(panels, backends, workloads, look.colours)


def _specs(scenario: str, records: Sequence[dict]) -> tuple[FigureSpec, ...]:
    """The declared figures of a scenario; a bar chart per metric for one not declared."""
    if scenario in SECTIONS:
        return SECTIONS[scenario]
    return tuple(FigureSpec("bars", metric(n).label, ((n, MEDIAN),)) for n in _metric_names(records))


def _fitting_html(records: Sequence[dict], look: Look) -> str:
    """The output path's verdict: per backend and family, the largest batch whose decode fits the step."""
    fitting = fitting_batches(records)
    if not fitting:
        return ""
    rows = [
        f"<tr><th>{look.backend(backend)}</th><td>{e(family)}</td><td>{cell['fits'] or 'none'}</td>"
        f"<td>{cell['over'] or 'none measured'}</td></tr>"
        for (backend, family), cell in fitting.items()
    ]
    caption = "the largest measured batch whose median decode CPU per step fits the step"
    headers = ["backend", "workload", "fits the step at", "first batch over it"]
    return "<h3>Largest batch whose decode fits the step</h3>" + table(headers, rows, "numbers", caption)


def scenario_section(scenario: str, records: Sequence[dict], look: Look) -> str:
    """Figures with their tables, then a table of the metrics no figure shows."""
    present = _metric_names(records)
    parts = [f"<p>{e(SCENARIOS[scenario].description)}</p>" if scenario in SCENARIOS else ""]
    shown: set[str] = set()
    for spec in _specs(scenario, records):
        columns = [c for c in spec.columns if c[0] in present]
        png = _draw(spec, columns, records, look) if columns else None
        if png is None:
            continue
        parts += [f"<h3>{e(spec.title)}</h3>", figure(png, spec.title)]
        if spec.table:
            shown.update(name for name, _ in columns)
            parts += [metric_table(records, name, stat, look) for name, stat in columns]
    rest = [name for name in present if name not in shown]
    if rest:
        parts += ["<h3>Other metrics</h3>", *(metric_table(records, name, MEDIAN, look) for name in rest)]
    parts.append(_fitting_html(records, look))
    if not present:
        parts += ["<p class='banner bad'>Every case of this scenario failed: see the failed cases.</p>"]
    return section(f"scenario-{scenario}", scenario, "".join(parts))


# ---------------------------------------------------------------- run-level sections


@dataclass(frozen=True)
class Run:
    """A results document with where it came from and what the page calls it."""

    label: str
    source: str
    data: dict


def accelerator_rows(accelerator: dict | None) -> dict[str, str]:
    """The accelerator and its host link, as the environment section shows them."""
    if not accelerator:
        return {"accelerator": "not recorded", "host link": "—"}
    if accelerator.get("error"):
        return {"accelerator": accelerator["error"], "host link": "—"}
    devices = accelerator.get("devices") or []
    if not devices:
        build = f"CUDA {accelerator['torch_cuda']}" if accelerator.get("torch_cuda") else "a CPU-only build"
        return {"accelerator": f"none (torch is {build}; no CUDA device visible)", "host link": "—"}
    names = [
        f"{d['name']}, {format_value(d['memory_bytes'], 'bytes')}, compute {d['capability']}" for d in devices
    ]
    links = [
        f"{d['host_link']['max']} (now {d['host_link']['current']})" if d.get("host_link") else "unknown"
        for d in devices
    ]
    cuda = f"CUDA {accelerator.get('torch_cuda')}"
    return {"accelerator": f"{'; '.join(names)} ({cuda})", "host link": "; ".join(links)}


def _environment_rows(run: Run) -> dict[str, str]:
    data = run.data
    env = data["environment"]
    libraries = env.get("libraries") or {}
    memory = env.get("memory_bytes")
    return {
        "results": run.source,
        "complete": "yes" if data["complete"] else "NO — interrupted, cases are missing",
        "started → finished": f"{data.get('started', '?')} → {data.get('finished') or 'not finished'}",
        "profile": str(data.get("profile", "")),
        "command line": shlex.join(env.get("command") or []),
        "git commit": str(env.get("git_commit")),
        "python": f"{env.get('implementation', '')} {env.get('python', '')}",
        "libraries": ", ".join(f"{k} {v}" for k, v in libraries.items()),
        "platform": str(env.get("platform", "")),
        "cpu": f"{env.get('cpu', '?')}, {env.get('cpu_count', '?')} CPUs",
        "memory": format_value(memory, "bytes") if memory else "?",
        **accelerator_rows(env.get("accelerator")),
        "allocator settings": " ".join(f"{k}={v}" for k, v in (env.get("allocator_env") or {}).items())
        or "(defaults)",
    }


def environment_section(runs: Sequence[Run]) -> str:
    """What produced the numbers: one column per file; rows that differ between files are marked."""
    tables = [_environment_rows(run) for run in runs]
    rows = []
    for key in tables[0]:
        values = [t[key] for t in tables]
        differs = len(set(values)) > 1 and key not in ("results", "started → finished")
        cls = ' class="differs"' if differs or any(v.startswith("NO") for v in values) else ""
        rows.append(f"<tr{cls}><th>{e(key)}</th>{''.join(f'<td>{e(v)}</td>' for v in values)}</tr>")
    headers = ["", *(e(run.label) for run in runs)]
    return section("environment", "Environment", table(headers, rows, "env"))


@dataclass(frozen=True)
class Noise:
    """How well one scenario of a run pinned its medians: half-width of each median's CI over the median."""

    scenario: str
    spreads: dict[tuple[str, str, str], float]  # (backend, workload, metric) → relative spread

    @property
    def typical(self) -> float:
        return statistics.median(self.spreads.values())

    @property
    def worst(self) -> tuple[tuple[str, str, str], float]:
        return max(self.spreads.items(), key=lambda kv: kv[1])


def noise(data: dict) -> list[Noise]:
    """Per scenario, in page order, the spreads ``compare.spreads`` counts (the rule compare and
    the gate use: sampled metrics with at least ``stats.MIN_DISTRIBUTION`` samples); a scenario
    with none is left out."""
    per_scenario = compare.spreads(data)
    return [Noise(s, per_scenario[s]) for s in _scenarios(data) if s in per_scenario]


def noise_level(spread: float) -> str:
    return next((name for limit, name in NOISE_LEVELS if spread <= limit), "noisy")


def noise_html(data: dict) -> str:
    """A one-line verdict per scenario: typical and worst ± of the medians."""
    rows = []
    for n in noise(data):
        level = noise_level(n.typical)
        (backend, workload, name), spread = n.worst
        worst = f"{backend} {TIMES} {workload}: {metric(name).label}"
        rows.append(
            f"<tr><td>{e(n.scenario)}</td><td><span class='badge {level}'>{level}</span></td>"
            f"<td>±{n.typical:.1%}</td><td>±{spread:.1%} <small>{e(worst)}</small></td>"
            f"<td>{len(n.spreads)}</td></tr>"
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
    body = "".join(
        (f"<h3>{e(run.label)}</h3>" if len(runs) > 1 else "") + noise_html(run.data) for run in runs
    )
    return section("noise", "How noisy " + ("were these runs" if len(runs) > 1 else "was this run"), body)


def _details(items: dict) -> str:
    if not items:
        return "0"
    lines = "".join(f"<li><code>{e(str(k))}</code>: {e(str(v))}</li>" for k, v in items.items())
    return f"<details><summary>{len(items)}</summary><ul>{lines}</ul></details>"


def backends_section(data: dict, look: Look) -> str:
    """Safety and conformance per backend, as checked before timing it."""
    rows = []
    for spec, info in data["backends"].items():
        conformance = info.get("conformance") or {}
        safe = (
            "yes"
            if info.get("safe", True)
            else "<span class='badge bad'>NO</span> executes code from its input"
        )
        failed = conformance.get("failed") or {}
        rows.append(
            f"<tr><td>{look.backend(spec)}</td><td>{safe}</td><td>{conformance.get('passed', '?')}</td>"
            f"<td>{_details(conformance.get('unsupported') or {})}</td>"
            f"<td class='{'failed' if failed else ''}'>{_details(failed)}</td>"
            f"<td>{e(info.get('description', ''))}</td></tr>"
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


def failed_section(data: dict, look: Look) -> str:
    """Every failed case with its error, in full."""
    failed = [r for r in data["records"] if r.get("error")]
    if not failed:
        return section("failed", "Failed cases", "<p>None: every case ran.</p>")
    rows = [
        f'<tr data-case="{case_attr(r)}"><td>{e(r["scenario"])}</td><td>{look.backend(r["backend"])}</td>'
        f"<td>{e(r['workload'])}</td><td><pre>{e(str(r['error']))}</pre></td></tr>"
        for r in failed
    ]
    return section(
        "failed", f"Failed cases ({len(failed)})", table(["scenario", "backend", "workload", "error"], rows)
    )


# ---------------------------------------------------------------- the page


def render(data: dict, source: str = "") -> str:
    """The report page of one results document."""
    look = Look.of(data)
    runs = [Run("this run", source, data)]
    sections = [
        incomplete(data, "This run"),
        environment_section(runs),
        noise_section(runs),
        backends_section(data, look),
        *(
            scenario_section(s, [r for r in data["records"] if r["scenario"] == s], look)
            for s in _scenarios(data)
        ),
        failed_section(data, look),
    ]
    when = data.get("started", "")
    return page("serbench report", f"{len(data['records'])} cases, run started {e(when)}", sections)


def write_report(data: dict, out_dir: Path, source: str = "") -> Path:
    """Render ``data`` to ``out_dir/index.html``: what ``serbench run`` leaves beside results.json."""
    return write_page(render(data, source or str(out_dir / "results.json")), out_dir)
