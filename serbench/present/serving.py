"""The ipc records of a run in the serving benchmark's layout, for docs/ipc.md and a terminal.

One column per record and a line per statistic, as vLLM's serving benchmark prints its summary,
then TTFT's parts and a rate sweep's points. It reads the records themselves: it shows what each
case measured, not what the analysis made of them.
"""

from __future__ import annotations

import math

import numpy as np

from serbench.model.results import IpcInfo, Record, Results, ServingStat, SweepPoint
from serbench.model.stats import MIN_DISTRIBUTION, Measurement
from serbench.present.terminal import table

SERVING_PARTS = (("ttft", "TTFT", "ttft_s"), ("itl", "ITL", "itl_s"), ("e2e", "E2E", "e2e_s"))
SERVING_STATS = (("mean", "Mean"), ("median", "Median"), ("p99", "P99"))
TTFT_PARTS = (
    ("encode_s", "encode"),
    ("ingress_s", "ingress"),
    ("queue_s", "queue"),
    ("first_step_s", "first step"),
    ("egress_s", "egress"),
)


def _ipc(rec: Record) -> IpcInfo:
    """A serving record's info (``serving_report`` takes only records that have one)."""
    assert isinstance(rec.info, IpcInfo)
    return rec.info


def _latency_ms(latency: ServingStat, stat: str) -> float:
    """One of the serving benchmark's statistics of a latency: mean, median or p99."""
    return {"mean": latency.mean_ms, "median": latency.median_ms, "p99": latency.p99_ms}[stat]


def _serving_rows(records: list[Record]) -> list[list[str]]:
    """The serving benchmark's summary lines, one column per record, then TTFT's parts.

    A p99 of fewer than ``MIN_DISTRIBUTION`` samples is not one: its cell says n instead.
    """

    def row(label: str, value) -> list[str]:
        return [label, *(value(r) for r in records)]

    def measured(r: Record, name: str) -> Measurement | None:
        return r.metrics.get(name)

    def median(name: str, scale: float, fmt: str = "{:.2f}"):
        def cell(r: Record) -> str:
            m = measured(r, name)
            return "-" if m is None else fmt.format(m.median * scale)

        return cell

    def count(r: Record, name: str) -> int:
        return r.metrics[name].n

    def serving(part: str, stat: str, name: str):
        def cell(r: Record) -> str:
            if stat == "p99" and count(r, name) < MIN_DISTRIBUTION:
                return f"n={count(r, name)}"
            return f"{_latency_ms(getattr(_ipc(r).serving, part), stat):.2f}"

        return cell

    def part(name: str, stat: str):
        def cell(r: Record) -> str:
            m = measured(r, name)
            if m is None:
                return "-"
            if stat == "p99" and m.n < MIN_DISTRIBUTION:
                return f"n={m.n}"
            value = m.median if stat == "median" else np.percentile(m.values, 99)
            return f"{value * 1e3:.3f}"

        return cell

    def ingress_over_floor(r: Record) -> str:
        ratio = _ipc(r).ingress_over_floor
        return f"{math.nan if ratio is None else ratio:.2f}"

    rows = [
        row("Successful requests", lambda r: str(count(r, "ttft_s"))),
        row("Benchmark duration (s)", lambda r: f"{_ipc(r).duration_s:.2f}"),
        row("Request throughput (req/s)", median("req_per_s", 1)),
        row("Output token throughput (tok/s)", median("output_tokens_per_s", 1, "{:.1f}")),
    ]
    for key, label, name in SERVING_PARTS:
        for stat, stat_label in SERVING_STATS:
            rows.append(row(f"{stat_label} {label} (ms)", serving(key, stat, name)))
    for name, label in TTFT_PARTS:
        for stat, stat_label in (("median", "Median"), ("p99", "P99")):
            rows.append(row(f"{stat_label} {label} (ms)", part(name, stat)))
    rows.append(row("Empty-message round trip (µs)", median("floor_rtt_s", 1e6, "{:.0f}")))
    rows.append(row("Median ingress / round trip", ingress_over_floor))
    rows.append(row("Payload GB/s (median)", median("payload_gb_per_s", 1)))
    rows.append(row("Unix-socket GB/s, same bytes", median("unix_gb_per_s", 1)))
    if any(_ipc(r).sweep is not None for r in records):
        rows += _sweep_rows(records)
    return rows


def _points(record: Record) -> dict[float | str, SweepPoint]:
    """A record's sweep points by rate (empty without a sweep)."""
    sweep = _ipc(record).sweep
    return {} if sweep is None else {p.rate: p for p in sweep.points}


def _per_second(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _ttft_ms(point: SweepPoint) -> str:
    ttft = point.metrics.get("ttft_s")
    return "-" if ttft is None else f"{ttft.median * 1e3:.2f}"


def _sweep_rows(records: list[Record]) -> list[list[str]]:
    """A rate sweep's lines: TTFT median and admitted/goodput per rate, then where it saturated."""
    points = [_points(r) for r in records]
    rows = []
    for rate in dict.fromkeys(rate for by_rate in points for rate in by_rate):
        ttft, rates = [f"Rate {rate}: median TTFT (ms)"], [f"Rate {rate}: admitted / goodput (req/s)"]
        for by_rate in points:
            p = by_rate.get(rate)
            ttft.append("-" if p is None else _ttft_ms(p))
            admitted = None if p is None else _per_second(p.admitted_per_s)
            rates.append("-" if p is None else f"{admitted} / {p.goodput_per_s:.1f}")
        rows += [ttft, rates]
    sweeps = [_ipc(r).sweep for r in records]
    saturated = [None if s is None else s.saturated_at for s in sweeps]
    capacity = [None if s is None else s.capacity_per_s for s in sweeps]
    rows.append(["Saturated at (offered req/s)", *(str(v or "-") for v in saturated)])
    rows.append(["Capacity, all at once (req/s)", *map(_per_second, capacity)])
    return rows


def serving_report(data: Results) -> str:
    """Per workload, the ipc records of a results document in the serving benchmark's layout
    (records with serving numbers: an output workload's, ``StreamInfo``, has none).

    Printed for docs/ipc.md by ``python -c "from serbench.model.results import load;
    from serbench.present.serving import serving_report as r; print(r(load('RESULTS.json')))"``.
    """
    records = [r for r in data.of() if isinstance(r.info, IpcInfo)]
    blocks = []
    for workload in dict.fromkeys(r.workload for r in records):
        group = [r for r in records if r.workload == workload]
        blocks.append(table([workload, *(r.row for r in group)], _serving_rows(group)))
    return "\n\n".join(blocks)
