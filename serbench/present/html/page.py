"""The HTML building blocks both report pages share: escaping, tables, figures, sections,
the backends' look, metric cells, and the page around them.

A page is one self-contained document: styles inline, figures as PNG data
URIs, a script that marks ``<body>`` with how many images decoded. Nothing
here knows what a scenario measures; that is ``run_page``'s and
``comparison_page``'s (docs/architecture.md, Report).

Everything reads the typed model (``results.Results``, ``Record``, ``Case``).
A table row, a swatch and a figure's line stand for a *line*: a case without
its scenario and workload (``line``), so a backend run over another transport,
or along any dimension ``results.Case`` grows, has its own without code here.
"""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from serbench.model import results
from serbench.model.results import Case, Record, Results
from serbench.model.stats import MIN_DISTRIBUTION, Measurement
from serbench.model.units import format_number, format_value, scale_for
from serbench.model.views import MEDIAN, P99

if TYPE_CHECKING:
    from serbench.present.html.plots import Style

TIMES, DASH = "\u00d7", "\u2013"  # the case separator and the range dash shown on the page

e = html.escape
T = TypeVar("T", bound=Hashable)


def unique(items: Iterable[T]) -> list[T]:
    """``items`` without repeats, in first-seen order."""
    return list(dict.fromkeys(items))


def case_attr(case: Case) -> str:
    """The ``data-case`` value of a case (or a record): ``scenario|row|workload``, the row with
    every dimension beyond the defaults (``pickle@shm``)."""
    return e("|".join((case.scenario, case.row, case.workload)))


def case_text(case: Case) -> str:
    """A case as the page names it in running text: ``scenario × row × workload``."""
    return f" {TIMES} ".join((case.scenario, case.row, case.workload))


def line(case: Case | str) -> Case:
    """What a row, a swatch and a figure's line stand for: ``case`` without its scenario and
    workload (a backend spec alone: the backend with no dimension set). Cases that differ in
    a dimension (transport, workers, …) are different lines; a dimension at its default, which
    the row leaves unmarked (``Case.row``), is the same line as one left unset."""
    if isinstance(case, str):
        return Case("", case, "")
    fields = {name: getattr(case, name) for name in Case.__struct_fields__}
    bare = Case(**{**fields, "scenario": "", "workload": ""})
    return bare if bare.row != bare.backend else Case("", bare.backend, "")  # unset ≡ default


def lines_of(records: Iterable[Record]) -> list[Case]:
    """The lines of ``records``, in first-seen order."""
    return unique(line(r) for r in records)


@dataclass(frozen=True)
class Look:
    """What every section shares: each line's ``plots.Style`` (``plots.line_style``: colour,
    marker, dashes and hatch for a variant) with its label (``Results.row_label``), in legend
    order, and which backend specs are unsafe (declared so) or undeclared (no claim made;
    treated as unsafe)."""

    drawn: dict[Case, Style]
    unsafe: frozenset[str] = frozenset()
    undeclared: frozenset[str] = frozenset()

    @classmethod
    def of(cls, *docs: Results) -> Look:
        # Here, not at the top: plots imports matplotlib, which importing the report must not pay.
        from serbench.present.html import plots

        found = unique(
            [*(line(r) for d in docs for r in d.records), *(line(b) for d in docs for b in d.backends)]
        )
        drawn = {}
        for case in found:  # named by the last document that declares its backend
            declaring = [d for d in docs if case.backend in d.backends] or docs[-1:]
            drawn[case] = plots.line_style(case, declaring[-1].row_label(case))
        declared = {spec: b.safe for d in docs for spec, b in d.backends.items()}
        return cls(
            drawn,
            frozenset(spec for spec, safe in declared.items() if safe is False),
            frozenset(spec for spec, safe in declared.items() if safe is None),
        )

    @property
    def labels(self) -> dict[Case, str]:
        return {case: style.label for case, style in self.drawn.items()}

    def lines(self, records: Iterable[Record]) -> list[Case]:
        """The lines of ``records`` in legend order."""
        present = set(lines_of(records))
        return [case for case in self.drawn if case in present]

    def styles(self, lines: Iterable[Case]) -> dict[Case, Style]:
        """``lines`` as a figure draws them (``plots.Style``), in the given order."""
        return {case: self.drawn[line(case)] for case in lines}

    def colour(self, case: Case) -> str:
        style = self.drawn.get(line(case))
        return style.colour if style else "#999"

    def label(self, case: Case) -> str:
        key = line(case)
        style = self.drawn.get(key)
        return style.label if style else key.row

    def swatch(self, case: Case | str) -> str:
        """A line's colour as a small square; striped for a variant, as its bars are hatched."""
        colour, style = self.colour(case), self.drawn.get(line(case))
        fill = colour
        if style and style.hollow:
            fill = f"repeating-linear-gradient(135deg,{colour} 0 2px,#fff 2px 3.5px)"
        return f'<span class="swatch" style="background:{fill}"></span>'

    def backend(self, case: Case | str) -> str:
        """A line's label (or a backend spec's) with its swatch and, if its backend is or may be
        unsafe, a mark."""
        key = line(case)
        mark = ""
        if key.backend in self.unsafe:
            mark = ' <span class="badge bad" title="executes code from its input">unsafe</span>'
        elif key.backend in self.undeclared:
            mark = ' <span class="badge bad" title="declares no safety: treated as unsafe">undeclared</span>'
        return f"<span class='backend'>{self.swatch(key)}{e(self.label(key))}{mark}</span>"


# ---------------------------------------------------------------- metric cells


def metric_cell(metric: Measurement, name: str, stat: str, case: str) -> str:
    """A table cell: the value (and its CI) scaled for reading; the exact numbers in its tooltip.

    With fewer than ``MIN_DISTRIBUTION`` samples a median is a value marked
    with its n (no CI), and a p99 is not shown: the cell says n.
    """
    # Here, not at the top: plots imports matplotlib, which importing the report must not pay.
    from serbench.present.html.plots import stat_value

    n = metric.n
    few = 1 < n < MIN_DISTRIBUTION or (n == 1 and stat == P99)
    attrs = f'{case} data-metric="{e(name)}" data-stat="{stat}"'
    if few and stat == P99:
        return f'<td {attrs} class="few" title="{n} samples: too few for a p99">n={n}</td>'
    value = stat_value(metric, stat)
    text = format_value(value, metric.unit)
    exact = f"{stat} {value!r} {metric.unit}, n={n}"
    if few:
        text += f' <span class="ci">(n={n})</span>'
    elif stat == MEDIAN and metric.ci_low != metric.ci_high:
        factor, _ = scale_for(metric.unit, value)
        low, high = format_number(metric.ci_low / factor), format_number(metric.ci_high / factor)
        text += f' <span class="ci">[{low} {DASH} {high}]</span>'
        exact += f", 95% CI {metric.ci_low!r} to {metric.ci_high!r}"
    return f'<td {case} data-metric="{e(name)}" data-stat="{stat}" title="{e(exact)}">{text}</td>'


def case_cell(rec: Record | None, name: str, stat: str) -> str:
    """A record's cell for one metric statistic: its value, "failed", "unsupported", or a dash
    (no such case or metric)."""
    if rec is None:
        return f'<td class="na">{DASH}</td>'
    case = f'data-case="{case_attr(rec)}"'
    if not rec.ok:
        if rec.unsupported is not None:  # declared by the backend: never timed, not a failure
            return f'<td class="na" {case}>unsupported</td>'
        return f'<td class="failed" {case}>failed</td>'
    if name not in rec.metrics:
        return f'<td class="na" {case}>{DASH}</td>'
    return metric_cell(rec.metrics[name], name, stat, case)


# ---------------------------------------------------------------- html pieces


def table(headers: Sequence[str], rows: Sequence[str], cls: str = "", caption: str = "") -> str:
    """Rows are ready ``<tr>`` strings; headers are HTML, the caption is text."""
    head = "".join(f"<th>{h}</th>" for h in headers)
    cap = f"<caption>{e(caption)}</caption>" if caption else ""
    return (
        f'<div class="scroll"><table class="{cls}">{cap}<thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table></div>"
    )


def figure(png: bytes, title: str) -> str:
    data = base64.b64encode(png).decode("ascii")
    return f'<figure><img src="data:image/png;base64,{data}" alt="{e(title)}"></figure>'


def section(anchor: str, title: str, body: str) -> str:
    return f'<section id="{e(anchor)}"><h2>{e(title)}</h2>{body}</section>'


def incomplete(data: Results, label: str) -> str:
    """A red banner for an interrupted run; nothing for a complete one."""
    if data.complete:
        return ""
    return (
        f"<p class='banner bad'>{e(label)} is incomplete (complete: false): the run was interrupted, "
        f"{len(data.records)} cases recorded; cases not run are absent, not failed.</p>"
    )


# ---------------------------------------------------------------- the page

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


def write_page(text: str, out_dir: Path) -> Path:
    """Write ``out_dir/index.html`` atomically (temp file + rename); returns its path."""
    path = out_dir / "index.html"
    results.write_text_atomic(path, text)
    return path
