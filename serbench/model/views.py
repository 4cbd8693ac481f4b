"""How a scenario's results are shown, declared as data beside its metrics.

A scenario owns its presentation: its report figures (``Figure``: which
metrics, which statistic, against what) and the tables only it can compute
(``Table``, e.g. the largest batch whose decode fits an engine step). The
terminal text and the HTML report draw what a scenario declares; neither
knows a scenario by name nor imports its internals.
"""

from __future__ import annotations

from dataclasses import dataclass

MEDIAN, P99 = "median", "p99"
Column = tuple[str, str]  # (metric name, statistic: MEDIAN or P99)

FIGURE_KINDS = ("bars", "cdf", "images", "batch", "size", "sweep", "timeline", "workers", "hits")


@dataclass(frozen=True)
class Figure:
    """One figure of a scenario's report section and the tables beneath it.

    ``kind``: "bars" (grouped by workload), "cdf" (raw samples of the first
    column's metric, one axes per workload), "images" (lines against images per
    request; bars when the run has fewer than two image counts), "batch" (lines
    against the batch of ``outputs-B`` workloads, the step budget dashed) and
    "size" (log-log lines against the bytes of ``tensor-N`` workloads, the
    256 B and 64 KiB thresholds marked), both left out with fewer than two such
    workloads; "sweep" (the rate sweep in ``IpcInfo.sweep``, drawn when a case
    has one) or "timeline" (the RSS timeline in ``MemoryInfo.timeline``, drawn
    when the run has one; the columns of these two only say which metric must
    exist); "workers" (lines against ``Case.workers``, one per backend and
    transport, bars when the run has fewer than two worker counts); "hits" (each
    column against the case's measured ``hit_ratio``, a line per backend and
    cache mode through its workloads; drawn when two cases or more have one).
    """

    kind: str
    title: str
    columns: tuple[Column, ...]
    table: bool = True  # the columns as tables beneath the figure

    def __post_init__(self) -> None:
        if self.kind not in FIGURE_KINDS:
            raise ValueError(f"figure kind {self.kind!r}: one of {', '.join(FIGURE_KINDS)}")


@dataclass(frozen=True)
class Table:
    """One titled table of text cells: a scenario's own, the summary's, the ranking's."""

    title: str
    headers: list[str]
    rows: list[list[str]]
    note: str = ""  # a line under the table (e.g. what "(n=K)" means)
