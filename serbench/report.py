"""``serbench report``: one self-contained HTML page for a results file, or for two.

The page opens from disk with no server and no network: styles are inline and
figures are PNGs embedded as data URIs, so ``index.html`` can be mailed or
attached to a CI run on its own. Sections follow the records: a scenario's
section appears when the file holds records of it, and figures are declared
by metric name (``SECTIONS``), so a metric missing from a file only drops its
panel. Every case of the file lands in a table row (``data-case``), failed
ones with their error, so nothing measured is hidden behind a figure.

With two files (base, head) the page shows ``compare.compare``'s verdicts:
per metric the ratio head/base with its interval, regressions and
improvements marked; the statistics are compare's, not this module's.
"""

from __future__ import annotations

import argparse
import base64
import html
import os
import re
import shlex
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from serbench import compare, results, stats
from serbench.units import format_number, format_value, scale_for

MEDIAN, P99 = "median", "p99"
Column = tuple[str, str]  # (metric name, statistic)


@dataclass(frozen=True)
class FigureSpec:
    """One figure of a scenario section and the table beneath it.

    ``kind``: "bars" (grouped by workload), "cdf" (raw samples of the first
    column's metric, one axes per workload) or "images" (lines against
    images per request; bars when the file has fewer than two image counts)
    or "timeline" (the memory scenario's psutil timeline in ``info``, drawn
    when the file has one; its columns only say which metric must exist).
    """

    kind: str
    title: str
    columns: tuple[Column, ...]
    table: bool = True  # the columns as tables beneath the figure


SECTIONS: dict[str, tuple[FigureSpec, ...]] = {
    "micro": (
        FigureSpec(
            "bars", "Encode and decode time of one request", (("encode_s", MEDIAN), ("decode_s", MEDIAN))
        ),
        FigureSpec("bars", "Bytes and frames on the wire", (("wire_bytes", MEDIAN), ("frames", MEDIAN))),
    ),
    "ipc": (
        FigureSpec("cdf", "Time to first token, per request", (("ttft_s", MEDIAN), ("ttft_s", P99))),
        FigureSpec("cdf", "Inter-token latency, per output", (("itl_s", MEDIAN), ("itl_s", P99))),
        FigureSpec(
            "images",
            "TTFT and ITL against images per request: median and p99",
            (("ttft_s", MEDIAN), ("ttft_s", P99), ("itl_s", MEDIAN), ("itl_s", P99)),
        ),
        FigureSpec("bars", "Throughput", (("req_per_s", MEDIAN), ("payload_gb_per_s", MEDIAN))),
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

LABELS = {
    "encode_s": "encode time",
    "decode_s": "decode time",
    "roundtrip_s": "encode + decode",
    "copy_s": "one plain copy of the payload",
    "wire_bytes": "wire bytes",
    "frames": "frames",
    "ttft_s": "TTFT",
    "ttft_p99_s": "TTFT p99",
    "floor_rtt_s": "empty-message round trip (floor)",
    "unix_gb_per_s": "raw unix socket (reference)",
    "output_tokens_per_s": "output tokens",
    "itl_s": "ITL",
    "e2e_s": "end-to-end latency",
    "req_per_s": "requests",
    "payload_gb_per_s": "payload throughput",
    "peak_rss_engine_bytes": "engine peak RSS",
    "peak_rss_frontend_bytes": "frontend peak RSS",
    "copies": "engine copies",
    "copies_frontend": "frontend copies",
}
# Metrics read on a linear axis; every other one spans orders of magnitude across workloads.
LINEAR_METRICS = frozenset(
    {
        "frames",
        "output_tokens_per_s",
        "copies",
        "copies_frontend",
        "req_per_s",
        "peak_rss_engine_bytes",
        "peak_rss_frontend_bytes",
    }
)
# Half-width of a median's CI over the median: at most this is "quiet", at most the second "moderate".
NOISE_LEVELS = ((0.02, "quiet"), (0.10, "moderate"))
NOISE_MIN_SAMPLES = 3

e = html.escape
TIMES, DASH = "\u00d7", "\u2013"  # the case separator and the range dash shown on the page


def _unique(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))


def _case_attr(rec_or_case) -> str:
    case = results.case_key(rec_or_case) if isinstance(rec_or_case, dict) else rec_or_case
    return e("|".join(case))


@dataclass(frozen=True)
class Look:
    """What every section shares: the backends' colours and which ones are unsafe."""

    colours: dict[str, str]
    unsafe: frozenset[str]

    @classmethod
    def of(cls, *docs: dict) -> Look:
        from serbench import plots

        names = _unique(
            [r["backend"] for d in docs for r in d["records"]] + [b for d in docs for b in d["backends"]]
        )
        unsafe = {b for d in docs for b, info in d["backends"].items() if not info.get("safe", True)}
        return cls(plots.palette(names), frozenset(unsafe))

    def backends(self, records: Iterable[dict]) -> list[str]:
        present = {r["backend"] for r in records}
        return [b for b in self.colours if b in present]

    def backend(self, name: str) -> str:
        """A backend's name with its colour swatch and, if it runs code from its input, a mark."""
        swatch = f'<span class="swatch" style="background:{self.colours.get(name, "#999")}"></span>'
        mark = ' <span class="badge bad" title="executes code from its input">unsafe</span>'
        return f"<span class='backend'>{swatch}{e(name)}{mark if name in self.unsafe else ''}</span>"


# ---------------------------------------------------------------- numbers


def _metric_cell(metric: dict, name: str, stat: str, case: str) -> str:
    """A table cell: the value (and its CI) scaled for reading; the exact numbers in its tooltip."""
    from serbench.plots import stat_value

    value = stat_value(metric, stat)
    text = format_value(value, metric["unit"])
    exact = f"{stat} {value!r} {metric['unit']}, n={len(metric['values'])}"
    if stat == MEDIAN and metric["ci_low"] != metric["ci_high"]:
        factor, _ = scale_for(metric["unit"], value)
        low, high = format_number(metric["ci_low"] / factor), format_number(metric["ci_high"] / factor)
        text += f' <span class="ci">[{low} {DASH} {high}]</span>'
        exact += f", 95% CI {metric['ci_low']!r} to {metric['ci_high']!r}"
    return f'<td {case} data-metric="{e(name)}" data-stat="{stat}" title="{e(exact)}">{text}</td>'


# ---------------------------------------------------------------- html pieces


def _table(headers: Sequence[str], rows: Sequence[str], cls: str = "", caption: str = "") -> str:
    """Rows are ready ``<tr>`` strings; headers are HTML, the caption is text."""
    head = "".join(f"<th>{h}</th>" for h in headers)
    cap = f"<caption>{e(caption)}</caption>" if caption else ""
    return (
        f'<div class="scroll"><table class="{cls}">{cap}<thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table></div>"
    )


def _figure(png: bytes, title: str) -> str:
    data = base64.b64encode(png).decode("ascii")
    return f'<figure><img src="data:image/png;base64,{data}" alt="{e(title)}"></figure>'


def _section(anchor: str, title: str, body: str) -> str:
    return f'<section id="{e(anchor)}"><h2>{e(title)}</h2>{body}</section>'


def _case_cell(rec: dict | None, name: str, stat: str) -> str:
    if rec is None:
        return f'<td class="na">{DASH}</td>'
    case = f'data-case="{_case_attr(rec)}"'
    if rec.get("error"):
        return f'<td class="failed" {case}>failed</td>'
    if name not in rec["metrics"]:
        return f'<td class="na" {case}>{DASH}</td>'
    return _metric_cell(rec["metrics"][name], name, stat, case)


def metric_table(records: Sequence[dict], name: str, stat: str, look: Look) -> str:
    """One metric statistic as a backend x workload grid, like the figure above it.

    Every case of ``records`` gets its cell (``data-case``), failed ones say so.
    """
    by_case = {(r["backend"], r["workload"]): r for r in records}
    workloads = _unique(r["workload"] for r in records)
    rows = []
    for backend in look.backends(records):
        cells = "".join(_case_cell(by_case.get((backend, w)), name, stat) for w in workloads)
        rows.append(f"<tr><th>{look.backend(backend)}</th>{cells}</tr>")
    repeated = any(len(r["metrics"].get(name, {}).get("values", ())) > 1 for r in records)
    what = "median [95% CI of the median]" if repeated else "one value per case"
    caption = f"{LABELS.get(name, name)}: {what if stat == MEDIAN else stat}"
    return _table(["backend", *map(e, workloads)], rows, "numbers", caption)


# ---------------------------------------------------------------- scenario sections


def _ok(records: Iterable[dict]) -> list[dict]:
    return [r for r in records if not r.get("error")]


def _metric_names(records: Iterable[dict]) -> list[str]:
    return _unique(name for r in _ok(records) for name in r["metrics"])


def _panel(records: Sequence[dict], name: str, stat: str):
    from serbench.plots import Panel

    ok = {(r["backend"], r["workload"]): r["metrics"][name] for r in _ok(records) if name in r["metrics"]}
    failed = frozenset((r["backend"], r["workload"]) for r in records if r.get("error"))
    unit = next(iter(ok.values()))["unit"]
    return Panel(LABELS.get(name, name), unit, stat, ok, failed, log=name not in LINEAR_METRICS)


def _timeline(records: Sequence[dict], look: Look) -> bytes | None:
    """Each backend's timeline of the workload with the most images (None: no timelines)."""
    from serbench import plots

    ok = [r for r in _ok(records) if r.get("info", {}).get("timeline")]
    if not ok:
        return None
    workload = max((r["workload"] for r in ok), key=lambda w: (plots.image_count(w) or 0, w))
    timelines = {r["backend"]: r["info"]["timeline"] for r in ok if r["workload"] == workload}
    return plots.timelines(workload, timelines, look.backends(ok), look.colours)


def _draw(spec: FigureSpec, columns: Sequence[Column], records: Sequence[dict], look: Look) -> bytes | None:
    from serbench import plots

    if spec.kind == "timeline":
        return _timeline(records, look)
    panels = [_panel(records, name, stat) for name, stat in columns]
    backends = look.backends(records)
    workloads = _unique(r["workload"] for r in records)
    if spec.kind == "cdf":
        return plots.cdf(panels[0], backends, workloads, look.colours)
    if spec.kind == "images" and len({plots.image_count(w) for w in workloads} - {None}) >= 2:
        return plots.against_images(panels, backends, look.colours)
    return plots.bars(panels, backends, workloads, look.colours)


def _specs(scenario: str, records: Sequence[dict]) -> tuple[FigureSpec, ...]:
    """The declared figures of a scenario; a bar chart per metric for one not declared."""
    if scenario in SECTIONS:
        return SECTIONS[scenario]
    return tuple(FigureSpec("bars", LABELS.get(n, n), ((n, MEDIAN),)) for n in _metric_names(records))


def scenario_section(scenario: str, records: Sequence[dict], look: Look) -> str:
    """Figures with their tables, then a table of the metrics no figure shows."""
    from serbench.scenarios import SCENARIOS

    present = _metric_names(records)
    parts = [f"<p>{e(SCENARIOS[scenario].description)}</p>" if scenario in SCENARIOS else ""]
    shown: set[str] = set()
    for spec in _specs(scenario, records):
        columns = [c for c in spec.columns if c[0] in present]
        png = _draw(spec, columns, records, look) if columns else None
        if png is None:
            continue
        parts += [f"<h3>{e(spec.title)}</h3>", _figure(png, spec.title)]
        if spec.table:
            shown.update(name for name, _ in columns)
            parts += [metric_table(records, name, stat, look) for name, stat in columns]
    rest = [name for name in present if name not in shown]
    if rest:
        parts += ["<h3>Other metrics</h3>", *(metric_table(records, name, MEDIAN, look) for name in rest)]
    if not present:
        parts += ["<p class='banner bad'>Every case of this scenario failed: see the failed cases.</p>"]
    return _section(f"scenario-{scenario}", scenario, "".join(parts))


def _scenarios(data: dict) -> list[str]:
    found = _unique(r["scenario"] for r in data["records"])
    return [s for s in SECTIONS if s in found] + [s for s in found if s not in SECTIONS]


# ---------------------------------------------------------------- run-level sections


@dataclass(frozen=True)
class Run:
    """A results document with where it came from and what the page calls it."""

    label: str
    source: str
    data: dict


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
    return _section("environment", "Environment", _table(headers, rows, "env"))


@dataclass(frozen=True)
class Noise:
    """How well this run pinned its medians: half-width of each median's CI over the median."""

    scenario: str
    spreads: dict[str, float]  # "backend, workload: metric" → relative spread

    @property
    def typical(self) -> float:
        return statistics.median(self.spreads.values())

    @property
    def worst(self) -> tuple[str, float]:
        return max(self.spreads.items(), key=lambda kv: kv[1])


def noise(data: dict) -> list[Noise]:
    """Per scenario, the relative CI half-width of every metric with repeated samples."""
    out = []
    for scenario in _scenarios(data):
        spreads = {
            f"{r['backend']} {TIMES} {r['workload']}: {LABELS.get(n, n)}": stats.relative_spread(m["values"])
            for r in results.ok_records(data, scenario)
            for n, m in r["metrics"].items()
            if len(m["values"]) >= NOISE_MIN_SAMPLES
        }
        if spreads:
            out.append(Noise(scenario, spreads))
    return out


def noise_level(spread: float) -> str:
    return next((name for limit, name in NOISE_LEVELS if spread <= limit), "noisy")


def noise_html(data: dict) -> str:
    """A one-line verdict per scenario: typical and worst ± of the medians."""
    rows = []
    for n in noise(data):
        level = noise_level(n.typical)
        worst, spread = n.worst
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
    return intro + _table(headers, rows)


def noise_section(runs: Sequence[Run]) -> str:
    body = "".join(
        (f"<h3>{e(run.label)}</h3>" if len(runs) > 1 else "") + noise_html(run.data) for run in runs
    )
    return _section("noise", "How noisy " + ("were these runs" if len(runs) > 1 else "was this run"), body)


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
    return _section("backends", "Backends: safety and conformance", _table(headers, rows))


def failed_section(data: dict, look: Look) -> str:
    """Every failed case with its error, in full."""
    failed = [r for r in data["records"] if r.get("error")]
    if not failed:
        return _section("failed", "Failed cases", "<p>None: every case ran.</p>")
    rows = [
        f'<tr data-case="{_case_attr(r)}"><td>{e(r["scenario"])}</td><td>{look.backend(r["backend"])}</td>'
        f"<td>{e(r['workload'])}</td><td><pre>{e(str(r['error']))}</pre></td></tr>"
        for r in failed
    ]
    return _section(
        "failed", f"Failed cases ({len(failed)})", _table(["scenario", "backend", "workload", "error"], rows)
    )


# ---------------------------------------------------------------- comparison


def _ratio_text(row: compare.MetricComparison) -> str:
    if row.ratio is None:
        return DASH
    if row.ci_low is None or row.ci_high is None or row.exact:
        return f"{row.ratio:.3f}"
    return f"{row.ratio:.3f} <span class='ci'>[{row.ci_low:.3f} {DASH} {row.ci_high:.3f}]</span>"


def _comparison_row(row: compare.MetricComparison, look: Look, with_scenario: bool) -> str:
    def side(value: float | None) -> str:
        return DASH if value is None else format_value(value, row.unit)

    label = LABELS.get(row.metric, row.metric) + (" (exact)" if row.exact else "")
    first = f"<td>{e(row.scenario)}</td>" if with_scenario else ""
    verdict = row.verdict.replace(" ", "-")
    return (
        f'<tr class="{verdict}" data-case="{_case_attr(row.case)}" data-metric="{e(row.metric)}">'
        f"{first}<td>{look.backend(row.backend)}</td><td>{e(row.workload)}</td><td>{e(label)}</td>"
        f"<td>{side(row.base_median)}</td><td>{side(row.head_median)}</td><td>{_ratio_text(row)}</td>"
        f"<td><span class='badge {verdict}'>{e(row.verdict)}</span></td></tr>"
    )


def comparison_table(
    rows: Sequence[compare.MetricComparison], look: Look, with_scenario: bool = False
) -> str:
    headers = [
        "backend",
        "workload",
        "metric",
        "base median",
        "head median",
        "head / base [95% CI]",
        "verdict",
    ]
    body = [_comparison_row(r, look, with_scenario) for r in rows]
    return _table(["scenario", *headers] if with_scenario else headers, body, "numbers")


def _ratio_figure(scenario: str, rows: Sequence[compare.MetricComparison], look: Look) -> bytes | None:
    from serbench import plots

    wanted = _unique(n for spec in SECTIONS.get(scenario, ()) for n, _ in spec.columns) or _unique(
        r.metric for r in rows
    )
    panels = {
        LABELS.get(name, name): [
            plots.RatioPoint(r.backend, r.workload, r.ratio, r.ci_low, r.ci_high, r.verdict)
            for r in rows
            if r.metric == name and r.ratio  # a ratio of 0 (or none) has no place on a log axis
        ]
        for name in wanted
    }
    panels = {k: v for k, v in panels.items() if v}
    if not panels:
        return None
    backends = [b for b in look.colours if any(r.backend == b for r in rows)]
    return plots.ratios(panels, backends, _unique(r.workload for r in rows), look.colours)


def _comparison_scenario(
    scenario: str, rows: Sequence[compare.MetricComparison], workloads: list[str], look: Look
) -> str:
    """The ratio figure and every row of one scenario, ordered like the run (workload, backend)."""
    backends = list(look.colours)
    rows = sorted(rows, key=lambda r: (workloads.index(r.workload), backends.index(r.backend), r.metric))
    png = _ratio_figure(scenario, rows, look)
    title = f"{scenario}: head / base per case (1 = unchanged; {TIMES} regression, + improvement)"
    figure = f"<h3>{e(title)}</h3>" + _figure(png, title) if png else ""
    return _section(
        f"scenario-{scenario}", f"{scenario}: head against base", figure + comparison_table(rows, look)
    )


def _case_list(title: str, cases: Sequence[tuple[str, str, str]]) -> str:
    if not cases:
        return ""
    return (
        f"<h3>{e(title)} ({len(cases)})</h3><ul>"
        + "".join(f"<li>{e(f' {TIMES} '.join(c))}</li>" for c in cases)
        + "</ul>"
    )


def verdict_section(result: compare.Comparison, max_regression: float, look: Look) -> str:
    """The headline: regressions and improvements first, then what differs in the set-ups."""
    bad, good = result.regressions, result.improvements
    cls = "bad" if bad else "good"
    summary = (
        f"<p class='banner {cls}'>{len(bad)} regression(s), {len(good)} improvement(s) among "
        f"{len(result.rows)} compared metrics (tolerated slowdown {max_regression:.0%}).</p>"
    )
    env = "".join(
        f"<li>{e(k)}: base {e(str(b))}, head {e(str(h))}</li>"
        for k, (b, h) in result.environment_differences.items()
    )
    warning = (
        f"<p class='banner bad'>The runs are not comparable as they stand:</p><ul>{env}</ul>" if env else ""
    )
    marked = comparison_table([*bad, *good], look, with_scenario=True) if bad or good else ""
    lists = _case_list("Only in head", result.added) + _case_list("Only in base", result.removed)
    return _section("verdict", "Verdict", summary + warning + marked + lists)


# ---------------------------------------------------------------- pages

CSS = """
body{font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#1b1b1b;
background:#fafafa}
main{max-width:1180px;margin:0 auto;padding:12px 20px 40px}
h1{font-size:1.6em;margin:.4em 0 .1em} h2{border-bottom:2px solid #ddd;padding-bottom:.2em;margin-top:1.8em}
h3{margin:1.4em 0 .4em;font-size:1.1em}
nav a{margin-right:1em} figure{margin:.5em 0;background:#fff;border:1px solid #e3e3e3;padding:6px}
figure img{max-width:100%;height:auto;display:block} figcaption{font-size:.9em;color:#555}
.scroll{overflow-x:auto} table{border-collapse:collapse;background:#fff;margin:.4em 0 1em;font-size:13px}
th,td{border:1px solid #e0e0e0;padding:3px 7px;text-align:left;vertical-align:top}
thead th{background:#f0f0f0;position:sticky;top:0}
table.numbers td[data-metric]{text-align:right;white-space:nowrap}
table.env th,table.numbers th{white-space:nowrap}
caption{text-align:left;font-weight:600;padding:.2em 0}
.ci{color:#666;font-size:.92em} td.failed{color:#b71c1c;font-weight:600}
td.na{color:#999} pre{white-space:pre-wrap;margin:0;font-size:12px;max-width:70ch}
.backend{white-space:nowrap}
.swatch{display:inline-block;width:.8em;height:.8em;border-radius:2px;margin-right:.35em;vertical-align:-1px}
.badge{border-radius:3px;padding:0 .4em;font-size:.85em;font-weight:600;white-space:nowrap}
.bad,.regression,.failed-in-head{background:#fde0e0;color:#b71c1c}
.good,.improvement,.fixed-in-head,.quiet{background:#e2f4e4;color:#1b5e20}
.moderate{background:#fff3cd;color:#7a5b00} .noisy{background:#fde0e0;color:#b71c1c}
.no-change{color:#555} .banner{padding:.5em .8em;border-radius:4px;font-weight:600}
tr.differs td,tr.differs th{background:#fff3cd} details summary{cursor:pointer}
"""

# Marks the page with how many of its images decoded: a self-check for people and for the tests.
IMAGE_CHECK = """
window.addEventListener("load", function () {
  var imgs = Array.prototype.slice.call(document.images);
  var broken = imgs.filter(function (i) { return !(i.complete && i.naturalWidth > 0); });
  document.body.setAttribute("data-images", String(imgs.length));
  document.body.setAttribute("data-images-loaded", String(imgs.length - broken.length));
  document.body.setAttribute("data-images-broken", broken.map(function (i) { return i.alt; }).join(" | "));
});
"""


def page(title: str, subtitle: str, sections: Sequence[str]) -> str:
    """The whole HTML document: header, a table of contents from the sections' ids, the sections."""
    links = "".join(
        f'<a href="#{a}">{t}</a>'
        for a, t in re.findall(r'<section id="([^"]+)"><h2>([^<]+)</h2>', "".join(sections))
    )
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{e(title)}</title><style>{CSS}</style></head><body><main>"
        f"<h1>{e(title)}</h1><p>{subtitle}</p><nav>{links}</nav>{''.join(sections)}"
        f"</main><script>{IMAGE_CHECK}</script></body></html>"
    )


def _incomplete(data: dict, label: str) -> str:
    if data["complete"]:
        return ""
    return (
        f"<p class='banner bad'>{e(label)} is incomplete (complete: false): the run was interrupted, "
        f"{len(data['records'])} cases recorded; cases not run are absent, not failed.</p>"
    )


def render(data: dict, source: str = "") -> str:
    """The report page of one results document."""
    look = Look.of(data)
    runs = [Run("this run", source, data)]
    sections = [
        _incomplete(data, "This run"),
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


def render_comparison(
    base: dict, head: dict, sources: tuple[str, str] = ("", ""), max_regression: float = 0.10
) -> str:
    """The comparison page: verdicts, both environments, and per scenario the ratios head/base."""
    look = Look.of(base, head)
    result = compare.compare(base, head, max_regression)
    runs = [Run("base", sources[0], base), Run("head", sources[1], head)]
    scenarios = _unique(r.scenario for r in result.rows)
    workloads = _unique(r["workload"] for d in (base, head) for r in d["records"])
    sections = [
        _incomplete(base, "The base run") + _incomplete(head, "The head run"),
        verdict_section(result, max_regression, look),
        environment_section(runs),
        noise_section(runs),
        *(
            _comparison_scenario(s, [r for r in result.rows if r.scenario == s], workloads, look)
            for s in scenarios
        ),
        failed_section(head, look),
    ]
    subtitle = f"head <code>{e(sources[1])}</code> against base <code>{e(sources[0])}</code>"
    return page("serbench comparison", subtitle, sections)


def write_page(text: str, out_dir: Path) -> Path:
    """Write ``out_dir/index.html`` atomically (temp file + rename); returns its path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "index.html"
    tmp = out_dir / ".index.html.tmp"
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
    return path


def write_report(data: dict, out_dir: Path, source: str = "") -> Path:
    """Render ``data`` to ``out_dir/index.html``: what ``serbench run`` leaves beside results.json."""
    return write_page(render(data, source or str(out_dir / "results.json")), out_dir)


# ---------------------------------------------------------------- command line


def _default_out(args: argparse.Namespace) -> Path:
    if args.out:
        return Path(args.out)
    if args.head is None:
        return Path(args.results).parent
    return Path("reports") / ("compare-" + datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ"))


def cmd_report(args: argparse.Namespace) -> int:
    """Render one results file, or base against head; print the page's path."""
    from serbench.cli import UsageError

    try:
        max_regression = compare.parse_threshold(args.max_regression)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    base = results.load(args.results)
    head = None if args.head is None else results.load(args.head)
    out = _default_out(args)
    try:  # before rendering: a bad folder fails at once
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot write the report to {out}: {exc.strerror or exc}") from None
    if head is None:
        text = render(base, args.results)
    else:
        text = render_comparison(base, head, (args.results, args.head), max_regression)
    print(f"report: {write_page(text, out)}")
    return 0


def register(subparsers) -> None:
    """Add ``serbench report RESULTS.json [HEAD.json] [--out DIR]``."""
    parser = subparsers.add_parser("report", help="HTML report of a results file, or of head against base")
    parser.add_argument(
        "results", metavar="RESULTS.json", help="a results file (the base when HEAD is given)"
    )
    parser.add_argument(
        "head", nargs="?", metavar="HEAD.json", help="a second results file: compare it to the first"
    )
    parser.add_argument(
        "--out",
        help="folder for index.html (default: beside RESULTS.json; for two files reports/compare-<time>/)",
    )
    parser.add_argument(
        "--max-regression", default="10%", help="tolerated slowdown with two files (default 10%%)"
    )
    parser.set_defaults(func=cmd_report)
