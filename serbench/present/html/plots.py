"""matplotlib figures for the HTML report, rendered off-screen to PNG bytes.

Figures are built on ``matplotlib.figure.Figure`` directly (the Agg canvas,
no pyplot and no global backend switch), so the report can run inside any
process. Every figure draws a line with the ``Style`` ``line_style`` gave it:
a backend keeps one hue and one marker in every report, so a reader can follow
it down the page, and a variant of it (``:threshold=inf``) or a run along
another dimension (``@shm``) is told apart by line style, hatch and hollow
markers rather than by a lighter shade. Every axis carries its unit, scaled to
something readable (ms, MB ...) from the data it shows; a linear value axis
starts at zero, so noise looks like noise.

A figure draws *lines*: whatever the caller groups its cases by (the report: a
``results.Case`` without scenario and workload). Drawing is most of the report's
time, so no figure costs more drawing than it shows: fixed margins in inches
(``_figure``), not constrained layout, which draws a figure twice; one legend per
page laid on each figure as pixels (``_legend_pixels``); bars as one collection
per hatch; PNGs without alpha, at a fast zlib level (``_png``).
"""

from __future__ import annotations

import functools
import io
import itertools
import math
import re
import textwrap
import zlib
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field

import matplotlib
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import PolyCollection
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullFormatter
from matplotlib.transforms import blended_transform_factory
from PIL import Image

from serbench.model.results import Case, Sweep, SweepPoint
from serbench.model.specs import Spec, SpecError, parse_spec
from serbench.model.stats import MIN_DISTRIBUTION, Measurement
from serbench.model.units import UNITLESS, scale_for
from serbench.serializers import BUILTINS

WIDTH_IN = 11.0
DPI = 100
PNG_COMPRESSION = 3  # zlib level: PIL's default, 6, takes half as long again for 5% fewer bytes
FAILED_COLOUR = "#c62828"
LINESTYLES = ("-", "--", ":", "-.")
FEW_SAMPLES = 10
TICKS = 5  # at most this many labelled ticks on a linear axis: labels that never run together
NICE_STEPS = (1, 2, 2.5, 5, 10)  # tick steps: 0, 1, 2, 3 rather than 0, 0.8, 1.6, 2.4

Cell = tuple[Hashable, str]  # (line, workload): one slot of a figure


@dataclass(frozen=True)
class Style:
    """How a figure draws one line (a backend and the dimensions it ran with): colour, legend
    label, marker, line style, bar hatch, and hollow markers (a variant's)."""

    colour: str
    label: str
    marker: str = "o"
    dash: str | tuple = "-"  # a matplotlib line style
    hatch: str = ""
    hollow: bool = False

    def line_kwargs(self) -> dict[str, object]:
        """What ``Axes.plot`` and ``Axes.errorbar`` take to draw this line."""
        face = "white" if self.hollow else self.colour
        return {"color": self.colour, "marker": self.marker, "linestyle": self.dash, "markerfacecolor": face}


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


def _parsed(spec: str) -> Spec:
    try:
        return parse_spec(spec)
    except SpecError:
        return Spec(spec, {})


def _builtin_or_hashed(name: str, builtin: Sequence, other: Sequence):
    """A built-in backend's entry of ``builtin`` (registry order); any other name's, hashed into ``other``."""
    builtins = list(BUILTINS)
    if name in builtins:
        return builtin[builtins.index(name)]
    return other[zlib.crc32(name.encode()) % len(other)]


def backend_colour(spec: str) -> str:
    """A backend's colour (hex), from its name alone: the same in every report.

    The built-ins keep tab10's first six colours in registry order; any other
    name hashes to one of tab20's remaining colours. A variant (a spec with
    options, e.g. ``msgspec-frombuffer:threshold=inf``) keeps its backend's
    colour: ``line_style`` tells it apart by line style and hatch, since
    lightened shades of one hue are hard to tell apart.
    """
    tab20 = matplotlib.colormaps["tab20"].colors
    tab10 = tab20[::2][: len(BUILTINS)]  # tab20's even entries are tab10's colours
    free = [c for i, c in enumerate(tab20) if i % 2 or i >= 2 * len(BUILTINS)]
    return matplotlib.colors.to_hex(_builtin_or_hashed(_parsed(spec).name, tab10, free))


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


BUILTIN_MARKERS = ("o", "s", "^", "D", "v", "P")  # one per built-in backend, registry order
OTHER_MARKERS = ("X", "*", "<", ">", "h", "p", "d")
# (variant, other dimensions) → line style and bar hatch
VARIATIONS = {(False, False): ("-", ""), (True, False): ("--", "//"), (False, True): (":", ".."),
              (True, True): ("-.", "//..")}  # fmt: skip


# A dimension off its default dots a line; each built-in transport has a pattern of its own, so
# that one backend's lines over several transports (fan-out's figure) are told apart by more
# than a shade of one hue.
TRANSPORT_DASHES = {"tcp": (0, (6, 2)), "zmq-each": (0, (6, 2)), "zmq-pub": (0, (3, 1, 1, 1)),
                    "torch-dist": (0, (1, 1, 5, 1))}  # fmt: skip


def line_style(case: Case, label: str) -> Style:
    """How every figure draws a case's line, from the case alone (the same in every report):
    its ``line_colour``, a marker per backend name, and for a variant (options in its spec)
    dashes, a hatch and hollow markers; a dimension off its default (``@shm``) dots, or
    draws its transport's ``TRANSPORT_DASHES``."""
    spec = _parsed(case.backend)
    variant, dimensions = bool(spec.options), case.row != case.backend
    dash, hatch = VARIATIONS[variant, dimensions]
    if dimensions and not variant:
        dash = TRANSPORT_DASHES.get(case.transport, dash)
    marker = _builtin_or_hashed(spec.name, BUILTIN_MARKERS, OTHER_MARKERS)
    return Style(line_colour(case), label, marker, dash, hatch, hollow=variant)


@dataclass(frozen=True)
class Panel:
    """One metric statistic across cases: what one axes of a figure shows."""

    label: str  # what is measured, e.g. "encode time"
    unit: str  # the results file's unit: "s", "bytes", "count", ...
    stat: str  # "median" (with its CI) or "p99"
    cells: dict[Cell, Measurement]  # the cells of successful cases → the metric
    failed: frozenset[Cell] = field(default_factory=frozenset)
    log: bool = True

    def scale(self, workload: str | None = None) -> tuple[float, str]:
        """The display factor and unit of the panel's values, or of one workload's only (an axes
        of its own: the text workload's ms beside the images' seconds)."""
        values = [stat_value(m, self.stat) for (_, w), m in self.cells.items() if workload in (None, w)]
        return scale_for(self.unit, max(values, default=0.0))

    def axis_label(self, workload: str | None = None) -> str:
        _, unit = self.scale(workload)
        stat = "" if self.stat == "median" else f" {self.stat}"
        return f"{self.label}{stat}" + ("" if unit in UNITLESS else f" ({unit})")


# Fixed margins, inches: enough for tick labels and a label of two lines beside or below an axes.
LEFT_IN, RIGHT_IN = 1.0, 0.25
COLUMN_GAP_IN = 1.0  # between axes side by side: the right one's tick labels and y label
ROW_GAP_IN = 0.62  # below each axes: its tick labels and x label
TITLE_IN = 0.3  # above each axes with a title
LEGEND_ROW_IN = 0.25
LABEL_CHAR_IN = 0.08  # one character of a 10 pt label


def _figure(
    rows: int, cols: int, row_height: float, lines: Lines, *, titled: bool = False, bars: bool = False
) -> tuple[Figure, list]:
    """A figure of ``rows`` x ``cols`` axes under a legend of ``lines``; ``row_height`` inches per
    row, its labels (and title, when ``titled``) included. The margins are fixed here, since
    constrained layout costs a second drawing of every figure."""
    legend_in = _legend_height([s.label for s in lines.values()])
    title_in = TITLE_IN if titled else 0.0
    height = legend_in + rows * row_height
    axes_h = row_height - ROW_GAP_IN - title_in
    axes_w = (WIDTH_IN - LEFT_IN - RIGHT_IN - (cols - 1) * COLUMN_GAP_IN) / cols
    fig = Figure(figsize=(WIDTH_IN, height), dpi=DPI, facecolor="white")  # opaque: saved without alpha
    grid = {
        "left": LEFT_IN / WIDTH_IN,
        "right": 1 - RIGHT_IN / WIDTH_IN,
        "top": 1 - (legend_in + title_in) / height,
        "bottom": ROW_GAP_IN / height,
        "wspace": COLUMN_GAP_IN / axes_w,
        "hspace": (ROW_GAP_IN + title_in) / axes_h,
    }
    # A title at a fixed height: placed automatically, it is moved above any tick labels on top
    # (these axes have none) by measuring the axes' ticks once more at every draw.
    with matplotlib.rc_context({"axes.titley": 1.0}):
        axes = list(fig.subplots(rows, cols, squeeze=False, gridspec_kw=grid).ravel())
    if lines:
        legend = _legend_pixels(tuple(lines.values()), bars)
        # under the axes: a tick label or spine at the top of an axes reaches into the strip
        fig.figimage(legend, yo=int(fig.bbox.height) - len(legend), origin="upper", zorder=-1)
    return fig, axes


def _png(fig: Figure) -> bytes:
    """The figure drawn once on the Agg canvas, as an RGB PNG: the figure is opaque, so the alpha
    channel ``savefig`` would keep is only more bytes to compress (a quarter of them)."""
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    rgba = Image.frombuffer("RGBA", canvas.get_width_height(), canvas.buffer_rgba(), "raw", "RGBA", 0, 1)
    buf = io.BytesIO()
    rgba.convert("RGB").save(buf, format="png", compress_level=PNG_COMPRESSION)
    return buf.getvalue()


LEGEND_CHAR_IN = 0.085  # width of one legend character at matplotlib's default 10 pt, inches
LEGEND_ENTRY_IN = 0.75  # marker, padding and gap around each entry


def legend_columns(labels: Sequence[str], width_in: float = WIDTH_IN) -> int:
    """As many legend columns as fit the figure's width with the longest label: a legend
    never wider than its image (long specs like ``flat-mmk:threshold=inf`` wrap to rows)."""
    entry = LEGEND_ENTRY_IN + LEGEND_CHAR_IN * max((len(label) for label in labels), default=1)
    return max(1, min(len(labels), int(width_in // entry)))


def _legend_height(labels: Sequence[str]) -> float:
    """Inches above a figure's axes for the legend of ``labels``: a row per ``legend_columns``."""
    if not labels:
        return 0.1
    return LEGEND_ROW_IN * math.ceil(len(labels) / legend_columns(labels)) + 0.1


def legend_figure(styles: Sequence[Style], bars: bool = False) -> Figure:
    """The legend of ``styles`` alone, the strip atop every figure: a hatched patch per line over
    bars, else a stretch of line with its marker, so a variant's dashes show in the legend too."""
    labels = [s.label for s in styles]
    if bars:
        handles = [Patch(facecolor=s.colour, hatch=s.hatch, edgecolor="white", linewidth=0) for s in styles]
    else:
        handles = [Line2D([], [], markersize=7, **s.line_kwargs()) for s in styles]
    fig = Figure(figsize=(WIDTH_IN, _legend_height(labels)), dpi=DPI, facecolor="white")
    fig.legend(handles, labels, loc="upper center", ncols=legend_columns(labels), frameon=False,
               handlelength=2.5, borderaxespad=0.3)  # fmt: skip
    return fig


@functools.lru_cache(maxsize=16)
def _legend_pixels(styles: tuple[Style, ...], bars: bool) -> np.ndarray:
    """``legend_figure`` drawn once, as the RGBA rows a figure shows on top: a page's figures share
    a few legends, and matplotlib lays a legend out afresh at every draw, measuring each of its
    texts several times (a fifth of the report's drawing)."""
    canvas = FigureCanvasAgg(legend_figure(styles, bars))
    canvas.draw()
    pixels = np.array(canvas.buffer_rgba())  # a copy: the canvas and its buffer go
    pixels.setflags(write=False)  # shared by every figure with this legend
    return pixels


def _ylabel(ax, text: str) -> None:
    """``text`` as the y label, wrapped to the axes' height (long labels ran into the next axes)."""
    height_in = ax.get_position().height * ax.figure.get_figheight()
    ax.set_ylabel(textwrap.fill(text, max(12, int(height_in / LABEL_CHAR_IN))))


def _plain(value: float, _pos=None) -> str:
    return f"{value:g}"


def _two_and_five(value: float, _pos=None) -> str:
    """Label minor ticks at 2 and 5 times a power of ten only: enough to read a narrow log axis."""
    leading = round(value / 10 ** math.floor(math.log10(value))) if value > 0 else 0
    return _plain(value) if leading in (2, 5) else ""


def log_axis(ax, values: Sequence[float], axis: str = "y") -> None:
    """Log scale with plain numbers (0.01, 2, 500). Over a span of less than a factor of three (a
    ratio from 0.8 to 1.25) every minor tick is labelled; within two decades, minor ticks at 2 and 5
    times a power of ten are; wider, those stay unlabelled. Minor ticks at 2..9 on every log axis
    would slow the drawing: each tick is a handful of artists."""
    (ax.set_yscale if axis == "y" else ax.set_xscale)("log")
    target = ax.yaxis if axis == "y" else ax.xaxis
    target.set_major_formatter(FuncFormatter(_plain))
    span = max(values) / min(values)
    target.set_minor_locator(LogLocator(subs="auto" if span < 3 else (2.0, 5.0)))
    labels = FuncFormatter(_plain) if span < 3 else FuncFormatter(_two_and_five) if span < 100 else None
    target.set_minor_formatter(labels or NullFormatter())


def _value_axis(ax, panel: Panel, values: Sequence[float], axis: str = "y") -> None:
    """A log axis where the values span at least a decade. A narrower span stays linear, with
    at most ``TICKS`` labels, and a linear y axis starts at zero: on an axis cut close around
    the values, noise looks like crossing trends."""
    if panel.log and values and min(values) > 0 and max(values) >= 10 * min(values):
        log_axis(ax, values, axis)
        return
    (ax.yaxis if axis == "y" else ax.xaxis).set_major_locator(MaxNLocator(TICKS, steps=NICE_STEPS))
    if axis == "y" and values:
        ax.set_ylim(0, max(values) * 1.08 or 1)  # room above the highest point: none sits on the frame


def _error(metric: Measurement, stat: str, factor: float) -> tuple[float, float]:
    """Error bar extents of a median (its CI); none for a percentile, nor under
    ``MIN_DISTRIBUTION`` samples (their range is not a confidence interval)."""
    if stat != "median" or metric.n < MIN_DISTRIBUTION:
        return 0.0, 0.0
    return (metric.median - metric.ci_low) / factor, (metric.ci_high - metric.median) / factor


def _bar_collections(
    ax, xs: Sequence[float], ys: Sequence[float], width: float, styles: Sequence[Style]
) -> None:
    """Bars from zero to ``ys`` centred on ``xs``, as one ``PolyCollection`` per hatch: ``Axes.bar``
    makes, fits the axes' limits to and later draws a patch per bar."""
    for hatch in dict.fromkeys(s.hatch for s in styles):
        picked = [
            (x - width / 2, y, s.colour) for x, y, s in zip(xs, ys, styles, strict=True) if s.hatch == hatch
        ]
        corners = [[(left, 0), (left, y), (left + width, y), (left + width, 0)] for left, y, _ in picked]
        bars = PolyCollection(corners, facecolors=[c for _, _, c in picked], edgecolors="white", linewidths=0,
                              hatch=hatch or None)  # fmt: skip
        bars.sticky_edges.y.append(0)  # as Axes.bar: no margin below zero on a linear axis
        ax.add_collection(bars)


def _bar_panel(ax, panel: Panel, lines: Lines, workloads: Sequence[str]) -> None:
    """Every bar of the panel in one collection per hatch (``_bar_collections``) and every whisker
    in one ``errorbar`` call (a call per line cost a tenth of the report's time)."""
    factor, _ = panel.scale()
    width = 0.8 / len(lines)
    xs, ys, errs, styles, failed = [], [], [], [], []
    for i, (line, style) in enumerate(lines.items()):
        for j, workload in enumerate(workloads):
            x = j - 0.4 + width * (i + 0.5)
            metric = panel.cells.get((line, workload))
            if metric is not None:
                xs.append(x)
                ys.append(stat_value(metric, panel.stat) / factor)
                errs.append(_error(metric, panel.stat, factor))
                styles.append(style)
            elif (line, workload) in panel.failed:
                failed.append(x)
    _bar_collections(ax, xs, ys, width, styles)
    if np.any(errs):
        ax.errorbar(xs, ys, yerr=np.array(errs).T, fmt="none", ecolor="#333", capsize=2)
    if failed:
        ax.plot(failed, [0.02] * len(failed), "x", color=FAILED_COLOUR,
                transform=blended_transform_factory(ax.transData, ax.transAxes))  # fmt: skip
    _value_axis(ax, panel, [y + high for y, (_, high) in zip(ys, errs, strict=True)])  # whiskers inside
    ax.set_xticks(range(len(workloads)), workloads)
    ax.set_xlim(-0.5, len(workloads) - 0.5)  # every workload's slot, even one with no bar
    _ylabel(ax, panel.axis_label())
    ax.grid(axis="y", alpha=0.3)


def bars(panels: Sequence[Panel], lines: Lines, workloads: Sequence[str]) -> bytes:
    """Grouped bars, one axes per panel (stacked): workloads on x, a bar per line, CI whiskers.

    A red cross at the foot of an empty slot marks a case that failed.
    """
    fig, axes = _figure(len(panels), 1, 2.9, lines, bars=True)
    for ax, panel in zip(axes, panels, strict=True):
        _bar_panel(ax, panel, lines, workloads)
    axes[-1].set_xlabel("workload")
    return _png(fig)


def cdf(panel: Panel, lines: Lines, workloads: Sequence[str]) -> bytes:
    """Empirical CDF of a metric's raw samples, one axes per workload, a line per backend line.

    Each axes' title says n (samples per backend) and its x axis has its own unit (text's
    TTFT in ms beside 32 images' in s); a backend with fewer than ``MIN_DISTRIBUTION``
    samples gets its points only, no line, since they are not a distribution.
    """
    rows = math.ceil(len(workloads) / 4)
    cols = math.ceil(len(workloads) / rows)  # 4 workloads: one row of 4; 5: two rows of 3
    fig, axes = _figure(rows, cols, 3.1, lines, titled=True)
    for ax, workload in zip(axes, workloads, strict=False):
        factor, _ = panel.scale(workload)
        samples, counts = [], []
        for line, style in lines.items():
            metric = panel.cells.get((line, workload))
            if metric is None or not metric.values:
                continue
            xs = np.sort(np.asarray(metric.values, dtype=float)) / factor
            ys = np.arange(1, len(xs) + 1) / len(xs)
            drawn = style.line_kwargs()
            if len(xs) < MIN_DISTRIBUTION:
                ax.plot(xs, ys, **{**drawn, "linestyle": ""})
            else:
                ax.step(xs, ys, where="post", **drawn, markevery=1 if len(xs) < FEW_SAMPLES else [])
            samples += [xs[0], xs[-1]]
            counts.append(len(xs))
        _value_axis(ax, panel, samples, axis="x")
        title = workload + (f", {_count_range(counts)}" if counts else "")
        ax.set(title=title, xlabel=panel.axis_label(workload), ylabel="cumulative fraction", ylim=(0, 1.02))
        ax.grid(alpha=0.3)
    for ax in axes[len(workloads) :]:
        ax.set_visible(False)
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
    ax, points: Sequence[SweepPoint], name: str, factor: float, xs: list[float], style: Style
) -> None:
    """Median (solid, the line's markers) and, from 5 samples on, p99 (dashed) of one metric
    against offered load: here dashes mean p99, not a variant."""
    pairs = zip(xs, points, strict=True)
    found = [(x, p.metrics[name].values) for x, p in pairs if name in p.metrics]
    if not found:
        return
    x = [x for x, _ in found]
    solid = {**style.line_kwargs(), "linestyle": "-"}
    ax.plot(x, [float(np.median(v)) * factor for _, v in found], **solid)
    tail = [(x, float(np.percentile(v, 99)) * factor) for x, v in found if len(v) >= MIN_DISTRIBUTION]
    if tail:
        ax.plot([x for x, _ in tail], [y for _, y in tail], "--", color=style.colour)


def _sweep_rates(ax, points: Sequence[SweepPoint], xs: list[float], style: Style) -> None:
    """Admitted rate (solid) and goodput (dashed) against offered load."""
    admitted = [(x, p.admitted_per_s) for x, p in zip(xs, points, strict=True) if p.admitted_per_s]
    ax.plot([x for x, _ in admitted], [a for _, a in admitted], **{**style.line_kwargs(), "linestyle": "-"})
    ax.plot(xs, [p.goodput_per_s for p in points], "--", color=style.colour)


def rate_sweep(sweeps: dict[Cell, Sweep], lines: Lines, workloads: Sequence[str]) -> bytes:
    """Against offered load (requests/s, log x; ``inf`` = everything at once), as vLLM's serving
    benchmark plots it: per workload (a row each) TTFT, ingress and throughput (admitted and
    goodput), a line per backend line; a vertical mark where one saturated."""
    drawn = {line: style for line, style in lines.items() if any((line, w) in sweeps for w in workloads)}
    fig, axes = _figure(len(workloads), len(SWEEP_PANELS), 3.3, drawn, titled=True)
    for row, workload in enumerate(workloads):
        row_axes = axes[row * len(SWEEP_PANELS) : (row + 1) * len(SWEEP_PANELS)]
        for line, style in lines.items():
            sweep = sweeps.get((line, workload))
            if sweep is None:
                continue
            points = sweep.points
            xs, labels = _rate_positions([p.rate for p in points])
            for ax, (name, _, factor) in zip(row_axes, SWEEP_PANELS, strict=True):
                if name == "goodput_per_s":
                    _sweep_rates(ax, points, xs, style)
                else:
                    _sweep_latency(ax, points, name, factor, xs, style)
                if sweep.saturated_at is not None:
                    ax.axvline(float(sweep.saturated_at), color=style.colour, alpha=0.4, linestyle=":")
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
    return _png(fig)


DODGE = 0.25  # the lines at one x spread over this fraction of the gap to the next x (log)
DODGE_MAX = 0.4  # and over at most this much of the log axis' base (0.4 octave on a log2 axis)


def dodges(xs: Sequence[float], count: int, base: float) -> list[float]:
    """Factors that move ``count`` lines sideways on a log axis of ``base``, one per line, centred
    on 1: lines that coincide (four zero-copy backends at one copy) stay visible side by side."""
    logs = sorted({math.log(x, base) for x in xs if x > 0})
    gap = min((b - a for a, b in itertools.pairwise(logs)), default=1.0)
    step = min(DODGE * gap, DODGE_MAX) / max(1, count - 1)
    return [base ** (step * (i - (count - 1) / 2)) for i in range(count)]


def _line_panel(ax, panel: Panel, lines: Lines, x_axis: XAxis) -> list[str]:
    """Plot ``panel`` against ``x_axis``, each line dodged a little sideways (``dodges``; the
    ticks mark the true x); returns the workload families drawn."""
    factor, unit = panel.scale()
    cells = {cell: m for cell, m in panel.cells.items() if x_axis.value(cell[1]) is not None}
    families = sorted({x_axis.family(w) for _, w in cells})
    shifts = dodges([x_axis.value(w) for _, w in cells], len(lines), x_axis.base)
    xs_seen, ys = set(), []
    for (line, style), shift in zip(lines.items(), shifts, strict=True):
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
            drawn = style.line_kwargs()
            if len(families) > 1:  # dashes tell the families apart here
                drawn["linestyle"] = LINESTYLES[k % len(LINESTYLES)]
            if np.any(err):
                ax.errorbar([n * shift for n in x], y, yerr=err, capsize=3, **drawn)
            else:  # a p99, or too few samples: no interval to draw, and errorbar is costly
                ax.plot([n * shift for n in x], y, **drawn)
            xs_seen.update(x)
            ys += [v + high for v, high in zip(y, err[1], strict=True)] if np.any(err) else y
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
    _value_axis(ax, panel, ys)
    ax.set_xlabel(x_axis.label)
    _ylabel(ax, panel.axis_label())
    ax.grid(alpha=0.3)
    return families


def against(panels: Sequence[Panel], lines: Lines, x_axis: XAxis = IMAGES) -> bytes:
    """Each panel as lines against ``x_axis`` (log x), a line per backend line and workload family."""
    cols = min(2, len(panels))
    fig, axes = _figure(math.ceil(len(panels) / cols), cols, 3.6, lines)
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
    return _png(fig)


def against_values(panels: Sequence[Panel], lines: Lines, xs: Mapping[Cell, float], x_label: str) -> bytes:
    """Each panel against a value per cell (``xs``: a measured hit ratio), linear x; a line per
    backend line through its cells in order of x. Cells without an x are left out."""
    cols = min(2, len(panels))
    fig, axes = _figure(math.ceil(len(panels) / cols), cols, 3.6, lines)
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
                ax.plot([x for x, _ in points], y, **style.line_kwargs())
                ys += y
        _value_axis(ax, panel, ys)
        ax.set(xlabel=x_label, xlim=(-0.05, 1.05))
        _ylabel(ax, panel.axis_label())
        ax.grid(alpha=0.3)
    for ax in axes[len(panels) :]:
        ax.set_visible(False)
    return _png(fig)


def timelines(
    workload: str, runs: Mapping[Hashable, Mapping[str, list[float | None]]], lines: Lines
) -> bytes:
    """RSS above baseline against time, one axes per side, a line per backend line.

    ``runs``: line → a timeline (``MemoryInfo.timeline``) ``{"t_s": [...], side: [bytes, ...],
    ...}``; a None sample (unreadable) is a gap. Each line's markers start at its own offset,
    so lines that run together (pickle and cloudpickle) still show both.
    """
    sides = list(dict.fromkeys(key for t in runs.values() for key in t if key != "t_s"))
    drawn = {line: style for line, style in lines.items() if line in runs}
    fig, axes = _figure(1, len(sides), 3.7, drawn, titled=True)
    peak = max(
        (v for t in runs.values() for side in sides for v in t.get(side) or () if v is not None), default=0
    )
    factor, unit = scale_for("bytes", peak)
    for ax, side in zip(axes, sides, strict=True):
        for i, (line, style) in enumerate(drawn.items()):
            timeline = runs[line]
            if side in timeline:
                t_ms = np.asarray(timeline["t_s"], dtype=float) * 1e3
                step = max(1, len(t_ms) // 6)
                ax.plot(t_ms, np.asarray(timeline[side], dtype=float) / factor, **style.line_kwargs(),
                        markevery=(i * step // len(drawn), step))  # fmt: skip
        ax.set(
            title=f"{side}, {workload}", xlabel="time since start (ms)", ylabel=f"RSS above baseline ({unit})"
        )
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
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
        if p.ratio <= 0:  # a metric that fell to zero has no place on a log axis (the table shows it)
            continue
        i, j = order.index(p.line), workloads.index(p.workload)
        low, high = (p.low, p.high) if p.low and p.high else (p.ratio, p.ratio)
        low = low if low > 0 else p.ratio  # an interval reaching zero: its upper whisker only
        extent += [low, high]
        marker, size = VERDICT_MARKERS.get(p.verdict, ("o", 6))
        style = lines[p.line]
        face = "white" if style.hollow and marker == "o" else style.colour
        ax.errorbar(j - 0.4 + width * (i + 0.5), p.ratio, yerr=[[p.ratio - low], [high - p.ratio]],
                    color=style.colour, marker=marker, markersize=size, markerfacecolor=face,
                    markeredgecolor="black" if marker != "o" else style.colour,
                    markeredgewidth=0.8 if marker != "o" else 1, capsize=2)  # fmt: skip
    ax.axhline(1.0, color="#333", linewidth=0.8)
    log_axis(ax, extent)
    ax.set_ylim(min(extent) / 1.1, max(extent) * 1.1)
    ax.set_xticks(range(len(workloads)), workloads)
    ax.set_xlim(-0.5, len(workloads) - 0.5)  # every workload's slot, even one with no point
    ax.set(title=title, ylabel="head / base")
    ax.grid(axis="y", alpha=0.3, which="both")


def ratios(panels: dict[str, Sequence[RatioPoint]], lines: Lines, workloads: Sequence[str]) -> bytes:
    """Per metric (one axes each, stacked): head/base per case with its interval; log y, 1 = unchanged.

    Regressions are drawn as a large cross, improvements as a large plus; the legend's patches
    give the lines' colours (markers here are verdicts).
    """
    fig, axes = _figure(len(panels), 1, 2.7, lines, titled=True, bars=True)
    for ax, (title, points) in zip(axes, panels.items(), strict=True):
        _ratio_panel(ax, title, points, lines, list(workloads))
    return _png(fig)
