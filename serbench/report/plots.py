"""matplotlib figures for the HTML report, rendered off-screen to PNG bytes.

Figures are built on ``matplotlib.figure.Figure`` directly (the Agg canvas,
no pyplot and no global backend switch), so the report can run inside any
process. Every figure gives a backend the colour ``palette`` assigned it, so
a reader can follow one backend down the page; every axis carries its unit,
scaled to something readable (ms, MB ...) from the data it shows.

A figure draws *lines*: whatever the caller groups its cases by (the report:
a ``results.Case`` without scenario and workload, so every dimension of a case
gets its own line), each with its ``Style`` (colour and legend label).
Figures read the typed model: ``stats.Measurement`` and ``results.Sweep``.
"""

from __future__ import annotations

import io
import math
import re
import zlib
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field

import matplotlib
import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, NullFormatter
from matplotlib.transforms import blended_transform_factory

from serbench.results import Case, Sweep, SweepPoint
from serbench.serializers import BUILTINS
from serbench.specs import Spec, SpecError, format_spec, parse_spec
from serbench.stats import MIN_DISTRIBUTION, Measurement
from serbench.units import UNITLESS, scale_for

WIDTH_IN = 11.0
DPI = 100
FAILED_COLOUR = "#c62828"
LINESTYLES = ("-", "--", ":", "-.")
FEW_SAMPLES = 10

Cell = tuple[Hashable, str]  # (line, workload): one slot of a figure


@dataclass(frozen=True)
class Style:
    """How a figure draws one line (a backend and the dimensions it ran with): colour, legend label."""

    colour: str
    label: str


Lines = Mapping[Hashable, Style]  # a figure's lines in legend order


@dataclass(frozen=True)
class XAxis:
    """The x of a figure against a workload parameter: images per request, batch, tensor bytes.

    ``pattern`` finds the number in a workload spec (group 1); specs that
    differ only in it are one family, one line style. ``marks`` are vertical
    lines (x, label) such as the 256 B and 64 KiB thresholds; ``budget`` a
    horizontal line in seconds (the step budget) on panels whose unit is s.
    """

    label: str
    pattern: str
    base: int = 2
    marks: tuple[tuple[float, str], ...] = ()
    budget: float | None = None

    def value(self, workload: str) -> int | None:
        match = re.match(self.pattern, workload)
        return int(match.group(1)) if match else None

    def family(self, workload: str) -> str:
        """The workload spec without its number: one line per family."""
        return re.sub(self.pattern, lambda m: m.group(0).replace(m.group(1), "N"), workload, count=1)


IMAGES = XAxis("images per request", r"images-(\d+)")
BATCH = XAxis("requests in the step (batch)", r"outputs-(\d+)")
SIZE = XAxis(
    "tensor bytes",
    r"tensor-(\d+)",
    base=10,
    marks=((256, "256 B: inline → own frame"), (65536, "64 KiB: zmq copies below")),
)
# fanout: a cell's workload is written "workers=N <workload spec>" (``run_page._workers``)
WORKERS = XAxis("worker processes (N)", r"workers=(\d+) ")


def image_count(workload: str) -> int | None:
    """Images per request of an ``images-N`` workload spec, None for others."""
    return IMAGES.value(workload)


def stat_value(metric: Measurement, stat: str) -> float:
    """A metric's ``median`` (from the file) or ``p99`` (from its raw values)."""
    if stat == "median":
        return metric.median
    return float(np.percentile(metric.values, 99))


def backend_colour(spec: str) -> str:
    """A backend's colour (hex), from its spec alone: the same in every report.

    The built-ins keep tab10's first six colours in registry order; any other
    name hashes to one of tab20's remaining colours. A variant (a spec with
    options, e.g. ``msgspec-frombuffer:threshold=inf``) is its backend's hue,
    lightened by an amount its options fix.
    """
    tab20 = matplotlib.colormaps["tab20"].colors
    try:
        parsed = parse_spec(spec)
    except SpecError:
        parsed = Spec(spec, {})
    builtins = list(BUILTINS)
    if parsed.name in builtins:
        rgb = tab20[2 * builtins.index(parsed.name)]  # tab20's even entries are tab10's colours
    else:
        free = [c for i, c in enumerate(tab20) if i % 2 or i >= 2 * len(builtins)]
        rgb = free[zlib.crc32(parsed.name.encode()) % len(free)]
    if parsed.options:
        shade = 0.35 + 0.15 * (zlib.crc32(format_spec(parsed).encode()) % 3)
        rgb = tuple(c + (1 - c) * shade for c in rgb)
    return matplotlib.colors.to_hex(rgb)


def palette(backends: Sequence[str]) -> dict[str, str]:
    """Each backend's ``backend_colour``, in the given order (the order of legends)."""
    return {b: backend_colour(b) for b in backends}


def line_colour(case: Case) -> str:
    """The colour of a case's line: its backend's ``backend_colour`` when the case runs with the
    default dimensions (its ``row`` is the bare spec), else that hue darkened by an amount the
    dimensions as the row shows them fix (``@shm``, `` workers=4``): ``pickle@shm`` is told
    from ``pickle`` and stays recognisably pickle's, the same in every report."""
    colour = backend_colour(case.backend)
    dimensions = case.row.removeprefix(case.backend)
    if not dimensions:
        return colour
    shade = 0.2 + 0.05 * (zlib.crc32(dimensions.encode()) % 8)
    return matplotlib.colors.to_hex(tuple(c * (1 - shade) for c in matplotlib.colors.to_rgb(colour)))


@dataclass(frozen=True)
class Panel:
    """One metric statistic across cases: what one axes of a figure shows."""

    label: str  # what is measured, e.g. "encode time"
    unit: str  # the results file's unit: "s", "bytes", "count", ...
    stat: str  # "median" (with its CI) or "p99"
    cells: dict[Cell, Measurement]  # the cells of successful cases → the metric
    failed: frozenset[Cell] = field(default_factory=frozenset)
    log: bool = True

    def scale(self) -> tuple[float, str]:
        values = [stat_value(m, self.stat) for m in self.cells.values()]
        return scale_for(self.unit, max(values, default=0.0))

    def axis_label(self) -> str:
        _, unit = self.scale()
        stat = "" if self.stat == "median" else f" {self.stat}"
        return f"{self.label}{stat}" + ("" if unit in UNITLESS else f" ({unit})")


def _figure(rows: int, cols: int, row_height: float) -> tuple[Figure, list]:
    fig = Figure(figsize=(WIDTH_IN, 0.6 + row_height * rows), layout="constrained")
    return fig, list(fig.subplots(rows, cols, squeeze=False).ravel())


def _png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    return buf.getvalue()


LEGEND_CHAR_IN = 0.085  # width of one legend character at matplotlib's default 10 pt, inches
LEGEND_ENTRY_IN = 0.75  # marker, padding and gap around each entry


def legend_columns(labels: Sequence[str], width_in: float = WIDTH_IN) -> int:
    """As many legend columns as fit the figure's width with the longest label: a legend
    never wider than its image (long specs like ``flat-mmk:threshold=inf`` wrap to rows)."""
    entry = LEGEND_ENTRY_IN + LEGEND_CHAR_IN * max((len(label) for label in labels), default=1)
    return max(1, min(len(labels), int(width_in // entry)))


def _backend_legend(fig: Figure, lines: Lines) -> None:
    handles = [
        Line2D([], [], color=s.colour, marker="s", linestyle="", markersize=10) for s in lines.values()
    ]
    labels = [s.label for s in lines.values()]
    columns = legend_columns(labels, fig.get_figwidth())
    fig.legend(handles, labels, loc="outside upper center", ncols=columns, frameon=False)


def _plain(value: float, _pos=None) -> str:
    return f"{value:g}"


def _two_and_five(value: float, _pos=None) -> str:
    """Label minor ticks at 2 and 5 times a power of ten only: enough to read a narrow log axis."""
    leading = round(value / 10 ** math.floor(math.log10(value))) if value > 0 else 0
    return _plain(value) if leading in (2, 5) else ""


def log_axis(ax, values: Sequence[float], axis: str = "y") -> None:
    """Log scale with plain numbers (0.01, 2, 500), minor labels only when the data span < 2 decades."""
    (ax.set_yscale if axis == "y" else ax.set_xscale)("log")
    target = ax.yaxis if axis == "y" else ax.xaxis
    target.set_major_formatter(FuncFormatter(_plain))
    narrow = max(values) < 100 * min(values)
    target.set_minor_formatter(FuncFormatter(_two_and_five) if narrow else NullFormatter())


def _use_log(ax, panel: Panel, values: Sequence[float], axis: str = "y") -> None:
    """A log axis where the values span at least a decade; a narrower span (ITL p99 at
    5.1-5.6 ms) may hold no labelled log tick at all, so it stays linear."""
    if panel.log and values and min(values) > 0 and max(values) >= 10 * min(values):
        log_axis(ax, values, axis)


def _error(metric: Measurement, stat: str, factor: float) -> tuple[float, float]:
    """Error bar extents of a median (its CI); none for a percentile, nor under
    ``MIN_DISTRIBUTION`` samples (their range is not a confidence interval)."""
    if stat != "median" or metric.n < MIN_DISTRIBUTION:
        return 0.0, 0.0
    return (metric.median - metric.ci_low) / factor, (metric.ci_high - metric.median) / factor


def _bar_panel(ax, panel: Panel, lines: Lines, workloads: Sequence[str]) -> None:
    factor, _ = panel.scale()
    width = 0.8 / len(lines)
    heights = []
    for i, (line, style) in enumerate(lines.items()):
        xs, ys, errs = [], [], []
        for j, workload in enumerate(workloads):
            x = j - 0.4 + width * (i + 0.5)
            metric = panel.cells.get((line, workload))
            if metric is not None:
                xs.append(x)
                ys.append(stat_value(metric, panel.stat) / factor)
                errs.append(_error(metric, panel.stat, factor))
            elif (line, workload) in panel.failed:
                ax.plot(
                    x,
                    0.02,
                    "x",
                    color=FAILED_COLOUR,
                    transform=blended_transform_factory(ax.transData, ax.transAxes),
                )
        if xs:
            yerr = np.array(errs).T if np.any(errs) else None
            ax.bar(xs, ys, width, color=style.colour, yerr=yerr, capsize=2, ecolor="#333")
        heights += ys
    _use_log(ax, panel, heights)
    ax.set_xticks(range(len(workloads)), workloads)
    ax.set_ylabel(panel.axis_label())
    ax.grid(axis="y", alpha=0.3)


def bars(panels: Sequence[Panel], lines: Lines, workloads: Sequence[str]) -> bytes:
    """Grouped bars, one axes per panel (stacked): workloads on x, a bar per line, CI whiskers.

    A red cross at the foot of an empty slot marks a case that failed.
    """
    fig, axes = _figure(len(panels), 1, 2.9)
    for ax, panel in zip(axes, panels, strict=True):
        _bar_panel(ax, panel, lines, workloads)
    axes[-1].set_xlabel("workload")
    _backend_legend(fig, lines)
    return _png(fig)


def cdf(panel: Panel, lines: Lines, workloads: Sequence[str]) -> bytes:
    """Empirical CDF of a metric's raw samples, one axes per workload, a line per backend line.

    Each axes' title says n (samples per backend); a backend with fewer than
    ``MIN_DISTRIBUTION`` samples gets its points only, no line, since they are
    not a distribution.
    """
    rows = math.ceil(len(workloads) / 4)
    cols = math.ceil(len(workloads) / rows)  # 4 workloads: one row of 4; 5: two rows of 3
    fig, axes = _figure(rows, cols, 2.8)
    factor, _ = panel.scale()
    for ax, workload in zip(axes, workloads, strict=False):
        samples, counts = [], []
        for line, style in lines.items():
            metric = panel.cells.get((line, workload))
            if metric is None or not metric.values:
                continue
            xs = np.sort(np.asarray(metric.values, dtype=float)) / factor
            ys = np.arange(1, len(xs) + 1) / len(xs)
            if len(xs) < MIN_DISTRIBUTION:
                ax.plot(xs, ys, "o", color=style.colour)
            else:
                marker = "o" if len(xs) < FEW_SAMPLES else ""
                ax.step(xs, ys, where="post", color=style.colour, marker=marker)
            samples += [xs[0], xs[-1]]
            counts.append(len(xs))
        _use_log(ax, panel, samples, axis="x")
        title = workload + (f", {_count_range(counts)}" if counts else "")
        ax.set(title=title, xlabel=panel.axis_label(), ylabel="cumulative fraction", ylim=(0, 1.02))
        ax.grid(alpha=0.3)
    for ax in axes[len(workloads) :]:
        ax.set_visible(False)
    _backend_legend(fig, lines)
    return _png(fig)


def _count_range(counts: Sequence[int]) -> str:
    """``n=5`` or ``n=5–20``, and a warning under ``MIN_DISTRIBUTION``."""
    low, high = min(counts), max(counts)
    text = f"n={low}" + (f"\u2013{high}" if high > low else "")
    return text + (" (too few for a distribution)" if low < MIN_DISTRIBUTION else "")


def _rate_positions(rates: Sequence[float | str]) -> tuple[list[float], list[str]]:
    """x positions of a sweep's rates on a log axis: ``inf`` two octaves right of the highest finite."""
    finite = [float(r) for r in rates if r != "inf"]
    top = max(finite, default=1.0) * 4
    labels = ["inf" if r == "inf" else f"{float(r):g}" for r in rates]
    return [top if r == "inf" else float(r) for r in rates], labels


SWEEP_PANELS = (
    ("ttft_s", "TTFT (ms), median — p99 dashed", 1e3),
    ("ingress_s", "ingress (ms), median — p99 dashed", 1e3),
    ("goodput_per_s", "req/s: admitted — goodput dashed", 1.0),
)


def _sweep_latency(
    ax, points: Sequence[SweepPoint], name: str, factor: float, xs: list[float], colour: str
) -> None:
    """Median (solid) and, from 5 samples on, p99 (dashed) of one metric against offered load."""
    pairs = zip(xs, points, strict=True)
    found = [(x, p.metrics[name].values) for x, p in pairs if name in p.metrics]
    if not found:
        return
    x = [x for x, _ in found]
    ax.plot(x, [float(np.median(v)) * factor for _, v in found], "o-", color=colour)
    tail = [(x, float(np.percentile(v, 99)) * factor) for x, v in found if len(v) >= MIN_DISTRIBUTION]
    if tail:
        ax.plot([x for x, _ in tail], [y for _, y in tail], "--", color=colour)


def _sweep_rates(ax, points: Sequence[SweepPoint], xs: list[float], colour: str) -> None:
    """Admitted rate (solid) and goodput (dashed) against offered load."""
    admitted = [(x, p.admitted_per_s) for x, p in zip(xs, points, strict=True) if p.admitted_per_s]
    ax.plot([x for x, _ in admitted], [a for _, a in admitted], "o-", color=colour)
    ax.plot(xs, [p.goodput_per_s for p in points], "--", color=colour)


def rate_sweep(sweeps: dict[Cell, Sweep], lines: Lines, workloads: Sequence[str]) -> bytes:
    """Against offered load (requests/s, log x; ``inf`` = everything at once), as vLLM's serving
    benchmark plots it: per workload (a row each) TTFT, ingress and throughput (admitted and
    goodput), a line per backend line; a vertical mark where one saturated."""
    fig, axes = _figure(len(workloads), len(SWEEP_PANELS), 3.0)
    for row, workload in enumerate(workloads):
        row_axes = axes[row * len(SWEEP_PANELS) : (row + 1) * len(SWEEP_PANELS)]
        for line, style in lines.items():
            sweep = sweeps.get((line, workload))
            if sweep is None:
                continue
            points, colour = sweep.points, style.colour
            xs, labels = _rate_positions([p.rate for p in points])
            for ax, (name, _, factor) in zip(row_axes, SWEEP_PANELS, strict=True):
                if name == "goodput_per_s":
                    _sweep_rates(ax, points, xs, colour)
                else:
                    _sweep_latency(ax, points, name, factor, xs, colour)
                if sweep.saturated_at is not None:
                    ax.axvline(float(sweep.saturated_at), color=colour, alpha=0.4, linestyle=":")
                ax.set_xscale("log")
                ax.set_xticks(xs, labels)
                ax.minorticks_off()
        for ax, (name, label, _) in zip(row_axes, SWEEP_PANELS, strict=True):
            ax.set(title=workload, xlabel="offered load (req/s)", ylabel=label)
            if name == "goodput_per_s":  # rates span decades; the diagonal is "keeps up"
                ax.set_yscale("log")
                ax.axline((1, 1), (10, 10), color="#999", linewidth=0.8, linestyle=":")  # y = x on log-log
            else:
                ax.set_ylim(bottom=0)
            ax.grid(alpha=0.3)
    drawn = {line: style for line, style in lines.items() if any((line, w) in sweeps for w in workloads)}
    _backend_legend(fig, drawn)
    return _png(fig)


def _line_panel(ax, panel: Panel, lines: Lines, x_axis: XAxis) -> list[str]:
    """Plot ``panel`` against ``x_axis``; returns the workload families drawn."""
    factor, unit = panel.scale()
    cells = {cell: m for cell, m in panel.cells.items() if x_axis.value(cell[1]) is not None}
    families = sorted({x_axis.family(w) for _, w in cells})
    xs_seen, ys = set(), []
    for line, style in lines.items():
        for k, fam in enumerate(families):
            points = sorted(
                (
                    (x_axis.value(w), m)
                    for (b, w), m in cells.items()
                    if b == line and x_axis.family(w) == fam
                ),
                key=lambda point: point[0],
            )
            if not points:
                continue
            x = [n for n, _ in points]
            y = [stat_value(m, panel.stat) / factor for _, m in points]
            err = np.array([_error(m, panel.stat, factor) for _, m in points]).T
            dash = LINESTYLES[k % len(LINESTYLES)]
            ax.errorbar(x, y, yerr=err, color=style.colour, linestyle=dash, marker="o", capsize=3)
            xs_seen.update(x)
            ys += y
    positive = sorted(x for x in xs_seen if x > 0)
    ax.set_xscale("log", base=x_axis.base)
    if x_axis.base == 2:
        ax.set_xticks(positive, [str(n) for n in positive])
        ax.minorticks_off()
    for x, label in x_axis.marks:
        ax.axvline(x, color="#777", linestyle=":", linewidth=1)
        ax.annotate(label, (x, 1), xycoords=("data", "axes fraction"), rotation=90, va="top",
                    ha="right", fontsize="x-small", color="#555")  # fmt: skip
    if x_axis.budget is not None and panel.unit == "s":
        ax.axhline(x_axis.budget / factor, color=FAILED_COLOUR, linestyle="--", linewidth=1)
        ax.annotate(f"step budget {x_axis.budget / factor:g} {unit}", (0.01, x_axis.budget / factor),
                    xycoords=("axes fraction", "data"), va="bottom", fontsize="x-small",
                    color=FAILED_COLOUR)  # fmt: skip
        ys.append(x_axis.budget / factor)
    _use_log(ax, panel, ys)
    if not panel.log:
        ax.set_ylim(bottom=0)
    ax.set(xlabel=x_axis.label, ylabel=panel.axis_label())
    ax.grid(alpha=0.3)
    return families


def against(panels: Sequence[Panel], lines: Lines, x_axis: XAxis = IMAGES) -> bytes:
    """Each panel as lines against ``x_axis`` (log x), a line per backend line and workload family."""
    cols = min(2, len(panels))
    fig, axes = _figure(math.ceil(len(panels) / cols), cols, 3.6)
    families: set[str] = set()
    for ax, panel in zip(axes, panels, strict=False):
        families.update(_line_panel(ax, panel, lines, x_axis))
    for ax in axes[len(panels) :]:
        ax.set_visible(False)
    if len(families) > 1:
        styles = [
            Line2D([], [], color="#555", linestyle=LINESTYLES[k % len(LINESTYLES)])
            for k in range(len(families))
        ]
        axes[0].legend(styles, sorted(families), fontsize="small")
    _backend_legend(fig, lines)
    return _png(fig)


def against_values(panels: Sequence[Panel], lines: Lines, xs: Mapping[Cell, float], x_label: str) -> bytes:
    """Each panel against a value per cell (``xs``: a measured hit ratio), linear x; a line per
    backend line through its cells in order of x. Cells without an x are left out."""
    cols = min(2, len(panels))
    fig, axes = _figure(math.ceil(len(panels) / cols), cols, 3.6)
    for ax, panel in zip(axes, panels, strict=False):
        factor, _ = panel.scale()
        ys = []
        for line, style in lines.items():
            points = sorted(
                ((xs[cell], m) for cell, m in panel.cells.items() if cell[0] == line and cell in xs),
                key=lambda point: point[0],
            )
            if points:
                y = [stat_value(m, panel.stat) / factor for _, m in points]
                ax.plot([x for x, _ in points], y, color=style.colour, marker="o")
                ys += y
        _use_log(ax, panel, ys)
        if not panel.log:
            ax.set_ylim(bottom=0)
        ax.set(xlabel=x_label, ylabel=panel.axis_label(), xlim=(-0.05, 1.05))
        ax.grid(alpha=0.3)
    for ax in axes[len(panels) :]:
        ax.set_visible(False)
    _backend_legend(fig, lines)
    return _png(fig)


def timelines(
    workload: str, runs: Mapping[Hashable, Mapping[str, list[float | None]]], lines: Lines
) -> bytes:
    """RSS above baseline against time, one axes per side, a line per backend line.

    ``runs``: line → a timeline (``MemoryInfo.timeline``) ``{"t_s": [...], side: [bytes, ...],
    ...}``; a None sample (unreadable) is a gap.
    """
    sides = list(dict.fromkeys(key for t in runs.values() for key in t if key != "t_s"))
    fig, axes = _figure(1, len(sides), 3.4)
    peak = max(
        (v for t in runs.values() for side in sides for v in t.get(side) or () if v is not None), default=0
    )
    factor, unit = scale_for("bytes", peak)
    for ax, side in zip(axes, sides, strict=True):
        for line, style in lines.items():
            timeline = runs.get(line)
            if timeline and side in timeline:
                t_ms = np.asarray(timeline["t_s"], dtype=float) * 1e3
                ax.plot(t_ms, np.asarray(timeline[side], dtype=float) / factor, color=style.colour)
        ax.set(
            title=f"{side}, {workload}", xlabel="time since start (ms)", ylabel=f"RSS above baseline ({unit})"
        )
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    _backend_legend(fig, {line: style for line, style in lines.items() if line in runs})
    return _png(fig)


@dataclass(frozen=True)
class RatioPoint:
    """head/base of one metric of one case, with its interval and the comparison's verdict."""

    line: Hashable
    workload: str
    ratio: float
    low: float | None
    high: float | None
    verdict: str


VERDICT_MARKERS = {"regression": ("X", 11), "improvement": ("P", 10)}


def _ratio_panel(ax, title: str, points: Sequence[RatioPoint], lines: Lines, workloads: list[str]) -> None:
    width = 0.8 / len(lines)
    order = list(lines)
    extent = [0.8, 1.25]  # at least this much around 1, so "unchanged" looks unchanged
    for p in points:
        i, j = order.index(p.line), workloads.index(p.workload)
        low, high = (p.low, p.high) if p.low and p.high else (p.ratio, p.ratio)
        extent += [low, high]
        marker, size = VERDICT_MARKERS.get(p.verdict, ("o", 6))
        ax.errorbar(j - 0.4 + width * (i + 0.5), p.ratio, yerr=[[p.ratio - low], [high - p.ratio]],
                    color=lines[p.line].colour, marker=marker, markersize=size, markeredgecolor="black",
                    markeredgewidth=0.8 if marker != "o" else 0, capsize=2)  # fmt: skip
    ax.axhline(1.0, color="#333", linewidth=0.8)
    log_axis(ax, extent)
    ax.set_ylim(min(extent) / 1.1, max(extent) * 1.1)
    ax.set_xticks(range(len(workloads)), workloads)
    ax.set(title=title, ylabel="head / base")
    ax.grid(axis="y", alpha=0.3, which="both")


def ratios(panels: dict[str, Sequence[RatioPoint]], lines: Lines, workloads: Sequence[str]) -> bytes:
    """Per metric (one axes each, stacked): head/base per case with its interval; log y, 1 = unchanged.

    Regressions are drawn as a large cross, improvements as a large plus.
    """
    fig, axes = _figure(len(panels), 1, 2.4)
    for ax, (title, points) in zip(axes, panels.items(), strict=True):
        _ratio_panel(ax, title, points, lines, list(workloads))
    _backend_legend(fig, lines)
    return _png(fig)
