"""Text for terminals and pull requests: tables of a run, of a comparison, the serving summary.

Presentation only: the numbers come from results documents and from
``serbench.compare``; what a metric is called and how it scales comes from
``serbench.metrics``.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from serbench.compare import BAD_VERDICTS, Comparison, MetricComparison, noise
from serbench.metrics import METRICS, metric
from serbench.results import ok_records
from serbench.units import UNITLESS, format_value, scale_for


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A plain aligned text table (first column left, the rest right)."""
    widths = [max(len(str(cell)) for cell in col) for col in zip(headers, *rows, strict=False)]

    def line(cells: Sequence[str]) -> str:
        first, *rest = (str(c) for c in cells)
        return "  ".join(
            [first.ljust(widths[0]), *(c.rjust(w) for c, w in zip(rest, widths[1:], strict=True))]
        )

    rule = "-" * (sum(widths) + 2 * (len(widths) - 1))
    return "\n".join([line(headers), rule, *(line(r) for r in rows)])


def _column(records: Sequence[dict], name: str) -> tuple[float, str]:
    """One display scale for a metric across a table: the one its largest median reads best in."""
    medians = [r["metrics"][name]["median"] for r in records if name in r["metrics"]]
    return scale_for(metric(name).unit, max(medians, default=0.0))


def _cell(rec: dict | None, name: str, factor: float) -> str:
    """A metric's median in the column's scale; FAILED or blank if none."""
    if rec is None:
        return ""
    if rec.get("error"):
        return "FAILED"
    measured = rec["metrics"].get(name)
    return "" if measured is None else f"{measured['median'] / factor:.3g}"


def render(data: dict) -> str:
    """Per scenario, a table for each summary metric (``metrics.Metric.summary``), then the failed cases."""
    out = []
    unsafe = {spec for spec, info in data["backends"].items() if not info.get("safe")}
    for scenario in dict.fromkeys(r["scenario"] for r in data["records"]):
        records = [r for r in data["records"] if r["scenario"] == scenario]
        workloads = list(dict.fromkeys(r["workload"] for r in records))
        backends = list(dict.fromkeys(r["backend"] for r in records))
        by_case = {(r["backend"], r["workload"]): r for r in records}
        present = {name for r in records for name in r["metrics"]}
        for name in (n for n, m in METRICS.items() if m.summary and n in present):
            factor, unit = _column(records, name)
            rows = [
                [
                    b + (" (unsafe)" if b in unsafe else ""),
                    *(_cell(by_case.get((b, w)), name, factor) for w in workloads),
                ]
                for b in backends
            ]
            shown = "" if unit in UNITLESS else f"{unit}, "
            out.append(
                f"{scenario}: {metric(name).label} ({shown}median)\n{table(['backend', *workloads], rows)}"
            )
    failed = [r for r in data["records"] if r.get("error")]
    if failed:
        out.append(
            "failed cases:\n"
            + "\n".join(f"  {r['scenario']} {r['backend']} × {r['workload']}: {r['error']}" for r in failed)
        )
    return "\n\n".join(out)


def _serving_rows(records: list[dict]) -> list[list[str]]:
    """The serving benchmark's summary lines, one column per record."""

    def row(label: str, value) -> list[str]:
        return [label, *(value(r) for r in records)]

    def median(name: str, scale: float, fmt: str = "{:.2f}"):
        return lambda r: fmt.format(r["metrics"][name]["median"] * scale) if name in r["metrics"] else "-"

    def serving(part: str, stat: str):
        return lambda r: f"{r['info']['serving'][part][stat]:.2f}"

    rows = [
        row("Successful requests", lambda r: str(len(r["metrics"]["ttft_s"]["values"]))),
        row("Benchmark duration (s)", lambda r: f"{r['info']['duration_s']:.2f}"),
        row("Request throughput (req/s)", median("req_per_s", 1)),
        row("Output token throughput (tok/s)", median("output_tokens_per_s", 1, "{:.1f}")),
    ]
    for part, name in (("ttft", "TTFT"), ("itl", "ITL"), ("e2e", "E2E")):
        for stat, label in (("mean", "Mean"), ("median", "Median"), ("p99", "P99")):
            rows.append(row(f"{label} {name} (ms)", serving(part, f"{stat}_ms")))
    rows.append(row("Empty-message round trip (µs)", median("floor_rtt_s", 1e6, "{:.0f}")))
    rows.append(row("Payload GB/s (median)", median("payload_gb_per_s", 1)))
    rows.append(row("Unix-socket GB/s, same bytes", median("unix_gb_per_s", 1)))
    return rows


def serving_report(data: dict) -> str:
    """Per workload, the ipc records of a results document in the serving benchmark's layout.

    Printed for docs/ipc.md by ``python -c "from serbench.results import load;
    from serbench.text import serving_report as r; print(r(load('RESULTS.json')))"``.
    """
    records = list(ok_records(data, "ipc"))
    blocks = []
    for workload in dict.fromkeys(r["workload"] for r in records):
        group = [r for r in records if r["workload"] == workload]
        blocks.append(table([workload, *(r["backend"] for r in group)], _serving_rows(group)))
    return "\n\n".join(blocks)


# ---------------------------------------------------------------- a comparison


def format_ratio(row: MetricComparison) -> tuple[str, str]:
    """The ratio and its interval as text, e.g. ``1.124`` and ``[1.080, 1.170]``."""
    if row.ratio is None:
        return "—", ""
    if row.exact:
        return f"{row.ratio:.3f}", "exact"
    interval = "" if row.ci_low is None else f"[{row.ci_low:.3f}, {row.ci_high:.3f}]"
    return f"{row.ratio:.3f}", interval


def reproduce_command(row: MetricComparison, base: dict) -> str:
    """A command that measures this case again locally, base against the working tree."""
    selection = ["--scenarios", row.scenario, "--backends", row.backend, "--workloads", row.workload]
    commit = (base["environment"].get("git_commit") or "").removesuffix("-dirty")
    command = (
        ["serbench", "gate", "--base", commit[:12], *selection] if commit else ["serbench", "run", *selection]
    )
    return shlex.join(command)


def _reproduce_commands(comparison: Comparison, base: dict) -> list[str]:
    """One command per regressed case, worst first."""
    return list(dict.fromkeys(reproduce_command(r, base) for r in comparison.regressions))


def _headline(comparison: Comparison) -> str:
    bad = comparison.regressions
    if not bad:
        return f"no regression in {len(comparison.rows)} comparison(s)"
    cases = len({r.case for r in bad})
    return f"{len(bad)} regression(s) in {cases} case(s), out of {len(comparison.rows)} comparison(s)"


def _cells(row: MetricComparison) -> list[str]:
    ratio, interval = format_ratio(row)
    return [
        row.verdict.upper() if row.verdict in BAD_VERDICTS else row.verdict,
        f"{row.scenario} {row.backend} × {row.workload}",
        row.metric,
        format_value(row.base_median, row.unit),
        format_value(row.head_median, row.unit),
        ratio,
        interval,
        "" if row.detectable is None else f"{row.detectable:.1%}",
    ]


# "detects": the smallest slowdown each comparison would have caught (``compare.detectable``).
HEADERS = ["verdict", "case", "metric", "base", "head", "head/base", "95% CI", "detects"]


def _notes(comparison: Comparison, base: dict, head: dict, bullet: str) -> list[str]:
    """Lines under the table: noise, environment, failures, added/removed cases."""
    lines = []
    base_noise, head_noise = noise(base), noise(head)
    if base_noise is not None and head_noise is not None:
        lines.append(
            f"noise: ±{base_noise:.1%} base, ±{head_noise:.1%} head (median CI half-width per metric)"
        )
    for key, (b, h) in comparison.environment_differences.items():
        lines.append(f"environment differs (--force): {key}: {b!r} → {h!r}")
    for case, error in sorted(comparison.head_errors.items()):
        lines.append(f"failed in head: {' '.join(case)}: {error}")
    lines += [f"added: {' '.join(case)}" for case in comparison.added]
    lines += [f"removed: {' '.join(case)}" for case in comparison.removed]
    return [f"{bullet}{line}" for line in lines]


def comparison_table(comparison: Comparison, base: dict, head: dict) -> str:
    """The terminal report: every row worst first, then how to reproduce each regression."""
    out = [table(HEADERS, [_cells(r) for r in comparison.rows])] if comparison.rows else []
    out += _notes(comparison, base, head, "")
    if comparison.regressions:
        out.append("reproduce:")
        out += [f"  {cmd}" for cmd in _reproduce_commands(comparison, base)]
    out.append(_headline(comparison))
    return "\n".join(out)


def _markdown_table(rows: Sequence[MetricComparison]) -> list[str]:
    lines = ["| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
    return lines + ["| " + " | ".join(c.replace("|", "\\|") for c in _cells(r)) + " |" for r in rows]


def comparison_markdown(comparison: Comparison, base: dict, head: dict) -> str:
    """A summary for a pull-request comment or ``$GITHUB_STEP_SUMMARY``."""
    bad = comparison.regressions
    mark = "❌" if bad else "✅"
    out = [f"## {mark} serbench: {_headline(comparison)}", ""]
    changed = bad + comparison.improvements
    if changed:
        out += [*_markdown_table(changed), ""]
    out += _notes(comparison, base, head, "- ")
    if bad:
        out += ["", "Reproduce locally:", "", "```"]
        out += _reproduce_commands(comparison, base)
        out += ["```"]
    if comparison.rows:
        out += ["", f"<details><summary>all {len(comparison.rows)} comparisons</summary>", ""]
        out += [*_markdown_table(comparison.rows), "", "</details>"]
    return "\n".join(out) + "\n"
