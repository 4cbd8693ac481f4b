"""Terminal tables: one per scenario, a row per backend, a column per workload."""

from __future__ import annotations

from collections.abc import Sequence

from serbench.scenarios import SCENARIOS, Column


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


def cell(rec: dict | None, column: Column) -> str:
    """A metric's median as the column formats it; FAILED or blank if none."""
    if rec is None:
        return ""
    if rec.get("error"):
        return "FAILED"
    metric = rec["metrics"].get(column.metric)
    return "" if metric is None else column.fmt.format(metric["median"] * column.scale)


def render(data: dict) -> str:
    """Every scenario's tables for a results document, then the failed cases."""
    out = []
    unsafe = {spec for spec, info in data["backends"].items() if not info.get("safe")}
    for name, scenario in SCENARIOS.items():
        records = [r for r in data["records"] if r["scenario"] == name]
        if not records:
            continue
        workloads = list(dict.fromkeys(r["workload"] for r in records))
        backends = list(dict.fromkeys(r["backend"] for r in records))
        by_case = {(r["backend"], r["workload"]): r for r in records}
        for column in scenario.summary:
            rows = [
                [
                    b + (" (unsafe)" if b in unsafe else ""),
                    *(cell(by_case.get((b, w)), column) for w in workloads),
                ]
                for b in backends
            ]
            out.append(f"{name}: {column.label} (median)\n{table(['backend', *workloads], rows)}")
    failed = [r for r in data["records"] if r.get("error")]
    if failed:
        out.append(
            "failed cases:\n"
            + "\n".join(f"  {r['scenario']} {r['backend']} × {r['workload']}: {r['error']}" for r in failed)
        )
    return "\n\n".join(out)
