"""The HTML report: pages from a real run and from a built results file, checked in headless Chromium.

The built file holds what a small real run cannot produce quickly: ipc and
memory records with raw samples and a timeline, a failed case, an unsafe
and a non-conforming backend, and a scenario the report has never heard of.
A schema-1 file of the serbench before the typed model (with ``@shm`` cases)
reports as its schema-2 re-save does.
"""

from __future__ import annotations

import base64
import colorsys
import copy
import io
import json
import re
import subprocess
import warnings
from html.parser import HTMLParser
from pathlib import Path

import matplotlib.colors
import msgspec
import numpy as np
import pytest
from builders import memory_info
from matplotlib.backends.backend_agg import FigureCanvasAgg
from PIL import Image
from suite_paths import FIXTURES

from serbench import cli as commands
from serbench.analysis import verdicts
from serbench.analysis.summary import scenario_tables, summarize_comparison, summarize_run
from serbench.model import results
from serbench.model.metrics import metric
from serbench.model.results import (
    Backend,
    Case,
    Conformance,
    IpcInfo,
    MemoryInfo,
    Results,
    Serving,
    ServingStat,
    Sweep,
    SweepPoint,
)
from serbench.model.stats import MIN_DISTRIBUTION, Measurement, summarize
from serbench.model.units import format_value
from serbench.present import html as report
from serbench.present.html import plots, run_page
from serbench.present.html.page import TIMES, Look, line
from serbench.probes import environment

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)
WINDOW = (1366, 900)
IMAGE_COUNTS = (4, 16)
SCHEMA_1 = FIXTURES / "results-schema-1.json"


# ---------------------------------------------------------------- building results files


def _ipc_metrics(rng: np.random.Generator, slow: float, images: int) -> dict[str, Measurement]:
    ttft = rng.gamma(4.0, slow * images * 1e-3 / 4, 200)
    return {
        "ttft_s": summarize(ttft, "s"),
        "itl_s": summarize(rng.gamma(8.0, 2e-3 / 8, 400), "s"),
        "e2e_s": summarize(ttft + 0.3, "s"),
        "req_per_s": summarize(rng.normal(40 / slow, 0.5, 5), "req/s"),
        "payload_gb_per_s": summarize(rng.normal(3.0 / slow, 0.05, 5), "GB/s"),
    }


def _ipc_info(images: int) -> IpcInfo:
    """What the ipc scenario says of a case beside its metrics (the serving summary in ms)."""
    stat = ServingStat(mean_ms=5.0 * images, median_ms=4.5 * images, p99_ms=9.0 * images)
    return IpcInfo(
        serving=Serving(ttft=stat, itl=ServingStat(2.0, 2.0, 3.0), e2e=stat),
        duration_s=5.0,
        output_tokens=200,
        settings={"num_prompts": 200},
        local_engine=True,
        ttft_over_floor=3.0,
        payload_bytes=int(images * 9.6e6),
    )


def _memory_metrics(rng: np.random.Generator, slow: float, images: int) -> dict[str, Measurement]:
    payload = images * 9.6e6
    # Enough repetitions for a distribution, so the noise section counts memory too.
    engine = payload * slow * (1 + 0.01 * rng.standard_normal(MIN_DISTRIBUTION))
    frontend = payload * (slow - 1) * (1 + 0.01 * rng.standard_normal(MIN_DISTRIBUTION))
    return {
        "peak_rss_engine_bytes": summarize(engine, "bytes"),
        "peak_rss_frontend_bytes": summarize(frontend, "bytes"),
        "copies": summarize(engine / payload, "ratio"),
        "copies_frontend": summarize(frontend / payload, "ratio"),
    }


def _timeline(slow: float, images: int) -> dict[str, list[float | None]]:
    t = np.linspace(0.0, 0.05 * images / 4, 40)
    ramp = np.clip(t / t[-1] * 2, 0, 1) * images * 9.6e6
    return {"t_s": t.tolist(), "engine": (ramp * slow).tolist(), "frontend": (ramp * (slow - 1)).tolist()}


def _memory_info(slow: float, images: int) -> MemoryInfo:
    return memory_info(int(images * 9.6e6), MIN_DISTRIBUTION, _timeline(slow, images))


def _backend(
    name: str, safe: bool, passed: int, unsupported: dict | None = None, failed: dict | None = None
) -> Backend:
    conformance = Conformance(passed=passed, unsupported=unsupported or {}, failed=failed or {})
    return Backend(name=name, description=f"{name} strategy", safe=safe, conformance=conformance)


BACKENDS = {
    "pickle": _backend("pickle", False, 53),
    "msgspec-frombuffer": _backend("msgspec-frombuffer", True, 52, {"complex64": "no complex dtype"}),
    "flat-mmk": _backend(
        "flat-mmk", True, 51, failed={"strided-1d": "view size is not compatible with input"}
    ),
}
FAILED_ERROR = "failed conformance (1 case(s)): strided-1d: view size is not compatible"


def build_results(path: Path, slow: float = 3.0, seed: int = 6) -> Results:
    """A results file through ``serbench.model.results``: ipc, memory, a failed case, an unknown scenario."""
    rng = np.random.default_rng(seed)
    file = results.ResultsFile(
        path, environment.collect(["run", "--built"]), "quick", copy.deepcopy(BACKENDS)
    )
    for backend, factor in (("pickle", slow), ("msgspec-frombuffer", 1.0)):
        for n in IMAGE_COUNTS:
            workload = f"images-{n}"
            ipc, memory = Case("ipc", backend, workload, "ipc"), Case("memory", backend, workload, "ipc")
            file.add(results.record(ipc, metrics=_ipc_metrics(rng, factor, n), info=_ipc_info(n)))
            file.add(
                results.record(memory, metrics=_memory_metrics(rng, factor, n), info=_memory_info(factor, n))
            )
    file.add(results.record(Case("ipc", "flat-mmk", "images-4", "ipc"), error=FAILED_ERROR))
    future = {"widgets_s": summarize(rng.random(9), "s")}
    file.add(results.record(Case("future", "pickle", "text-sonnet"), metrics=future))
    file.finish()
    return results.load(path)


# ---------------------------------------------------------------- reading pages


class _Elements(HTMLParser):
    """Every start tag's attributes, in order; the text of the page."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        self.tags.append((tag, {k: v or "" for k, v in attrs}))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def parse(page: str) -> _Elements:
    elements = _Elements()
    elements.feed(page)
    return elements


def cells(page: _Elements) -> set[tuple[str, str]]:
    """(case, metric) of every element that carries both; metric "" for case-only elements."""
    return {(a["data-case"], a.get("data-metric", "")) for _, a in page.tags if "data-case" in a}


def case_id(case: Case) -> str:
    """The ``data-case`` of a case or record: scenario, row (``pickle@shm``), workload."""
    return "|".join((case.scenario, case.row, case.workload))


def chromium(tmp: Path, *args: str) -> subprocess.CompletedProcess:
    assert CHROMIUM.exists(), (
        f"headless Chromium not found at {CHROMIUM}: install it with `make system-deps` "
        "(Debian package `chromium`); the report test needs a real browser"
    )
    profile = tmp / "chromium-profile"
    command = [str(CHROMIUM), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=True)


def browse(page: Path, tmp: Path) -> tuple[_Elements, Path]:
    """The page's DOM after load (with the page's own image check) and a laptop-sized screenshot."""
    url = page.resolve().as_uri()
    dom = chromium(tmp, "--virtual-time-budget=10000", "--dump-dom", url).stdout
    shot = tmp / f"{page.parent.name}.png"
    chromium(tmp, f"--screenshot={shot}", f"--window-size={WINDOW[0]},{WINDOW[1]}", url)
    return parse(dom), shot


# ---------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, Results]:
    """The built results file, rendered with ``serbench report`` into its own folder."""
    folder = tmp_path_factory.mktemp("built")
    data = build_results(folder / "results.json")
    assert commands.main(["report", str(folder / "results.json")]) == 0
    return folder, data


@pytest.fixture(scope="module")
def compared(tmp_path_factory, built) -> tuple[Path, verdicts.Comparison]:
    """Head = base with pickle three times slower on ipc, the failed case fixed, a case added."""
    folder = tmp_path_factory.mktemp("compared")
    base_path = built[0] / "results.json"
    head = build_results(folder / "head.json", slow=9.0, seed=7)
    head.records = [r for r in head.records if r.ok]
    fixed = _ipc_metrics(np.random.default_rng(1), 1.0, 4)
    head.records.append(
        results.record(Case("ipc", "flat-mmk", "images-4", "ipc"), metrics=fixed, info=_ipc_info(4))
    )
    head.records.append(results.record(Case("micro", "pickle", "text-sonnet"), error="segfault"))
    results.save(folder / "head.json", head)
    assert (
        commands.main(["report", str(base_path), str(folder / "head.json"), "--out", str(folder / "page")])
        == 0
    )
    return folder / "page", verdicts.compare(results.load(base_path), results.load(folder / "head.json"))


# ---------------------------------------------------------------- tests


def test_run_leaves_a_report_beside_its_results_and_prints_its_path(micro_run):
    out, stdout = micro_run.out, micro_run.stdout
    printed = re.search(r"^results: (\S+)/ \(results\.json, (index\.html)\)$", stdout, re.MULTILINE)
    assert printed, stdout[-1000:]
    assert Path(printed.group(1)) / printed.group(2) == out / "index.html"
    assert (out / "index.html").stat().st_size > 10_000


def _check_in_browser(page: Path, tmp: Path) -> _Elements:
    """The page loads in Chromium with every figure decoded, and screenshots at laptop width."""
    dom, shot = browse(page, tmp)
    body = next(a for tag, a in dom.tags if tag == "body")
    assert "data-images" in body, "the page's image check did not run"
    assert int(body["data-images"]) > 0
    assert body["data-images-loaded"] == body["data-images"], f"broken images: {body['data-images-broken']}"
    with Image.open(shot) as image:
        assert image.size == WINDOW
        assert sum(1 for count in image.convert("L").histogram() if count) > 20, "the screenshot is blank"
    return dom


def test_real_run_page_in_chromium_holds_every_case_and_metric(micro_run, tmp_path):
    out = micro_run.out
    data = results.load(out / "results.json")
    dom = _check_in_browser(out / "index.html", tmp_path)
    found = cells(dom)
    assert data.records
    for rec in data.records:
        for name in rec.metrics:
            assert (case_id(rec), name) in found, (case_id(rec), name)


def test_built_page_in_chromium_holds_every_case_failures_and_marks(built, tmp_path):
    folder, data = built
    dom = _check_in_browser(folder / "index.html", tmp_path)
    found = cells(dom)
    for rec in data.records:
        if not rec.ok:
            assert (case_id(rec), "") in found
        for name in rec.metrics:
            assert (case_id(rec), name) in found, (case_id(rec), name)
    text = " ".join(dom.text)
    assert FAILED_ERROR in text
    assert "view size is not compatible with input" in text  # conformance failure detail
    ids = {a.get("id") for _, a in dom.tags}
    assert {
        "environment",
        "noise",
        "backends",
        "failed",
        "scenario-ipc",
        "scenario-memory",
        "scenario-future",
    } <= ids
    assert "scenario-micro" not in ids  # no micro records: no micro section


def test_unsafe_backends_are_marked_wherever_they_appear(built):
    page = (built[0] / "index.html").read_text()
    unsafe_rows = re.findall(r"<tr><th>.*?</th>", page)
    pickle_rows = [row for row in unsafe_rows if ">pickle" in row]
    assert pickle_rows and all(">unsafe<" in row for row in pickle_rows)
    assert not any(">unsafe<" in row for row in unsafe_rows if ">msgspec-frombuffer" in row)


def test_page_is_self_contained_with_whole_pngs(built):
    """No network reference; every figure an embedded PNG that decodes completely (not only its header)."""
    page = (built[0] / "index.html").read_text()
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page)
    sources = re.findall(r'<img src="([^"]+)"', page)
    assert len(sources) >= 8
    for src in sources:
        prefix, data = src.split(",", 1)
        assert prefix == "data:image/png;base64"
        with Image.open(io.BytesIO(base64.b64decode(data))) as image:
            image.load()  # raises on a truncated image


def test_comparison_page_in_chromium_marks_every_verdict(compared, tmp_path):
    page, comparison = compared
    dom = _check_in_browser(page / "index.html", tmp_path)
    rows = {
        (a["data-case"], a["data-metric"]): a["class"]
        for tag, a in dom.tags
        if tag == "tr" and "data-metric" in a
    }
    for row in comparison.rows:
        assert rows[(case_id(row.case), row.metric)] == row.verdict.replace(" ", "-")
    verdicts = {row.verdict for row in comparison.rows}
    assert {"regression", "fixed in head", "no change"} <= verdicts
    text = " ".join(dom.text)
    assert f"{len(comparison.regressions)} regression(s)" in text
    assert "Only in head (1)" in text and f"micro {TIMES} pickle {TIMES} text-sonnet" in text


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "No such file"),
        ("{not json", "not valid JSON"),
        ('{"schema": "other/9"}', "schema"),
    ],
)
def test_unusable_results_file_is_one_line_and_exit_2(tmp_path, capsys, content, message):
    path = tmp_path / "results.json"
    if content is not None:
        path.write_text(content)
    assert commands.main(["report", str(path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and err.startswith("serbench: error:")
    assert not (tmp_path / "out" / "index.html").exists()


def test_unusable_head_or_output_folder_is_exit_2(built, tmp_path, capsys):
    base = str(built[0] / "results.json")
    assert commands.main(["report", base, str(tmp_path / "missing.json")]) == 2
    (tmp_path / "file").write_text("")
    assert commands.main(["report", base, "--out", str(tmp_path / "file" / "sub")]) == 2
    assert commands.main(["report", base, base, "--max-regression", "lots"]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 3 and all(line.startswith("serbench: error:") for line in lines)


def test_incomplete_run_is_flagged(built):
    data = msgspec.structs.replace(built[1], complete=False, finished=None, records=built[1].records[-1:])
    page = report.render(summarize_run(data), "partial.json")
    assert "is incomplete (complete: false)" in page


def test_noise_indicator_reports_each_scenario_spread(built):
    noise = {n.scenario: n for n in summarize_run(built[1]).noise}
    assert set(noise) == {"ipc", "memory", "future"}
    assert all(0 <= n.typical <= n.worst for n in noise.values())
    assert run_page.noise_level(0.01) == "quiet"
    assert run_page.noise_level(0.05) == "moderate"
    assert run_page.noise_level(0.5) == "noisy"


@pytest.mark.parametrize(
    ("value", "unit", "text"),
    [
        (1.38e-5, "s", "13.8 µs"),
        (0.25, "s", "250 ms"),
        (38_535_807, "bytes", "38.54 MB"),
        (70, "count", "70"),
    ],
)
def test_values_are_shown_in_a_readable_scale(value, unit, text):
    assert format_value(value, unit) == text


def test_scenario_whose_every_case_failed_says_so():
    records = [results.record(Case("micro", "pickle", "images-4"), error="Killed by signal 9")]
    data = Results(records=records)
    section = run_page.scenario_section(scenario_tables(data, "micro"), data, Look.of(data))
    assert "Every case of this scenario failed" in section
    assert "<img" not in section


# ---------------------------------------------------------------- schema 1 and case dimensions


def _section(page: str, anchor: str) -> str:
    found = re.search(rf'<section id="{anchor}">(.*?)</section>', page, re.DOTALL)
    assert found, f"no section {anchor}"
    return found.group(1)


def _row_labels(page: str) -> set[str]:
    """The label of every table row's backend (``<tr><th>`` swatch, label, marks)."""
    found = re.findall(r"<tr><th><span class='backend'><span class=\"swatch\"[^>]*></span>([^<]+)", page)
    return {label.strip() for label in found}


def test_a_schema_1_file_reports_as_its_schema_2_resave_does(tmp_path):
    """A real schema-1 file (micro, ipc, memory over ipc and shm) gets a figure per scenario, its
    ``spec@shm`` cases their own rows; re-saved as schema 2 it shows the same cases."""
    assert commands.main(["report", str(SCHEMA_1), "--out", str(tmp_path / "v1")]) == 0
    old = (tmp_path / "v1" / "index.html").read_text()
    for scenario in ("micro", "ipc", "memory"):
        assert "<img " in _section(old, f"scenario-{scenario}"), scenario

    data = results.load(SCHEMA_1)
    results.save(tmp_path / "results.json", data)
    assert json.loads((tmp_path / "results.json").read_text())["schema"] == results.SCHEMA
    assert commands.main(["report", str(tmp_path / "results.json"), "--out", str(tmp_path / "v2")]) == 0
    new = (tmp_path / "v2" / "index.html").read_text()

    assert cells(parse(new)) == cells(parse(old))
    assert _row_labels(new) == _row_labels(old)
    raw = json.loads(SCHEMA_1.read_text())["records"]
    shown = cells(parse(new))
    for rec in raw:  # every case of the file as schema 1 named it: scenario|spec@transport|workload
        case = "|".join((rec["scenario"], rec["backend"], rec["workload"]))
        assert case in {c for c, _ in shown}, case
        for name in rec["metrics"]:  # a statistic of another's samples (ttft_p99_s) in that one's table
            shown_as = metric(name).statistic_of or name
            assert (case, shown_as) in shown, (case, name)
    assert {"pickle@shm", "msgspec-frombuffer@shm", "msgspec-frombuffer:threshold=inf@shm"} <= _row_labels(
        new
    )
    for scenario in ("ipc", "memory"):
        assert "pickle@shm" in _row_labels(_section(new, f"scenario-{scenario}")), scenario
    assert "pickle@shm" not in _row_labels(_section(new, "scenario-micro"))  # micro links nothing
    failed = _section(new, "failed")
    assert failed.count("<tr data-case=") == 4 and "release of block -1" in failed
    # The same document, the same page: only the source named in the environment differs.
    assert new.replace(str(tmp_path / "results.json"), "SOURCE") == old.replace(str(SCHEMA_1), "SOURCE")


def test_a_dimension_is_a_line_of_its_own_in_its_backends_hue():
    """Rows and figure lines are cases less scenario and workload: ``pickle@shm`` apart from
    ``pickle``, a default transport the same line as none; its colour pickle's, darker."""
    micro, ipc = Case("micro", "pickle", "images-4"), Case("ipc", "pickle", "text-sonnet", "ipc")
    shm, tcp = Case("ipc", "pickle", "images-4", "shm"), Case("ipc", "pickle", "images-4", "tcp")
    workers = Case("ipc", "pickle", "images-4", "ipc", 4)
    assert line(micro) == line(ipc) == line("pickle") != line(shm)
    assert len({line(micro), line(shm), line(tcp), line(workers)}) == 4
    look = Look.of(Results(records=[results.record(c) for c in (micro, ipc, shm, tcp, workers)]))
    assert list(look.labels.values()) == ["pickle", "pickle@shm", "pickle@tcp", "pickle workers=4"]
    pickle = plots.backend_colour("pickle")
    assert look.colour(micro) == look.colour(ipc) == pickle
    assert len({pickle, look.colour(shm), look.colour(tcp), look.colour(workers)}) == 4
    for other in (look.colour(shm), look.colour(tcp), look.colour(workers)):
        (h1, l1, _), (h2, l2, _) = (
            colorsys.rgb_to_hls(*matplotlib.colors.to_rgb(c)) for c in (pickle, other)
        )
        assert h1 == pytest.approx(h2, abs=0.02) and l2 < l1  # same hue, darker


def _swept(rng: np.random.Generator, slow: float) -> Sweep:
    """A rate sweep as ``scenarios.load`` records it: 1 and 4 req/s, then everything at once."""
    points = [
        SweepPoint(
            rate=rate,
            offered_per_s=None if rate == "inf" else float(rate),
            admitted_per_s=10.0 / slow,
            goodput_per_s=8.0 / slow,
            ttft_slo_s=1.0,
            metrics={
                "ttft_s": summarize(rng.gamma(4.0, slow * 1e-3, 8), "s"),
                "ingress_s": summarize(rng.gamma(4.0, slow * 1e-4, 8), "s"),
            },
        )
        for rate in (1.0, 4.0, "inf")
    ]
    return Sweep(points=points, saturated_at=4.0, capacity_per_s=10.0 / slow, keep_up=0.9)


def test_a_rate_sweep_is_drawn_with_a_line_per_transport():
    """``IpcInfo.sweep`` gets its figure (log-log goodput with its y = x diagonal), pickle over
    shm its own row beside pickle over ipc."""
    rng = np.random.default_rng(3)
    records = []
    for backend, transport, slow in (
        ("pickle", "ipc", 2.0),
        ("pickle", "shm", 1.0),
        ("msgspec-frombuffer", "ipc", 1.0),
    ):
        info = msgspec.structs.replace(_ipc_info(4), sweep=_swept(rng, slow))
        metrics = {"ttft_s": summarize(rng.gamma(4.0, slow * 1e-3, 8), "s")}
        records.append(
            results.record(Case("ipc", backend, "images-4", transport), metrics=metrics, info=info)
        )
    page = report.render(summarize_run(Results(records=records)), "swept.json")
    ipc = _section(page, "scenario-ipc")
    assert "Against offered load (--rate sweep)" in ipc
    assert re.search(r'<img src="data:image/png;base64,[^"]+" alt="Against offered load', ipc)
    assert {"pickle", "pickle@shm", "msgspec-frombuffer"} <= _row_labels(ipc)


# ---------------------------------------------------------------- figures as matplotlib draws them

# The memory matrix of a default run: the variants are the zero-copy backends with threshold=inf.
ZERO_COPY = ("pickle-oob", "numpy-intermediate", "msgspec-frombuffer", "flat-mmk")
VARIANTS = tuple(f"{b}:threshold=inf" for b in ZERO_COPY[1:])
COPIES = {"pickle": 3.0, "cloudpickle": 3.0, **dict.fromkeys(ZERO_COPY, 1.0), **dict.fromkeys(VARIANTS, 2.0)}


@pytest.fixture
def drawn(monkeypatch) -> list:
    """The ``matplotlib.figure.Figure`` of every plot drawn, kept instead of rendered to PNG."""
    figures: list = []
    monkeypatch.setattr(plots, "_png", lambda fig: figures.append(fig) or b"")
    return figures


def _data_lines(ax) -> list:
    """An axes' lines through data points (not error bar caps, not marks)."""
    return [ln for ln in ax.get_lines() if ln.get_linestyle() != "None" and len(ln.get_xdata()) > 1]


def test_coinciding_memory_lines_each_get_a_style_and_a_place_of_their_own(drawn):
    """The default run's copies: pickle exactly under cloudpickle, the four zero-copy backends
    at one copy, three variants at two. Every line has its own colour, marker, dashes or fill,
    and its own x at a workload (dodged, within a fraction of an octave of the true x), so
    none hides another; the legend names all nine."""
    records = [
        results.record(
            Case("memory", spec, f"images-{n}", "ipc"), metrics={"copies": summarize([copies] * 5, "ratio")}
        )
        for spec, copies in COPIES.items()
        for n in (4, 32)
    ]
    look = Look.of(Results(records=records))
    cells = {(line(r), r.workload): r.metrics["copies"] for r in records}
    styles = look.styles(look.lines(records))
    plots.against([plots.Panel("copies", "ratio", "median", cells)], styles)
    (fig,) = drawn
    lines = _data_lines(fig.axes[0])
    assert len(lines) == len(COPIES)
    looks = {(ln.get_color(), ln.get_marker(), ln.get_linestyle(), ln.get_markerfacecolor()) for ln in lines}
    assert len(looks) == len(COPIES)
    for i, true_x in enumerate((4, 32)):
        xs = [ln.get_xdata()[i] for ln in lines]
        assert len(set(xs)) == len(COPIES)
        assert all(abs(np.log2(x / true_x)) < 0.5 for x in xs)
    assert len(fig.images) == 1  # the legend, laid on as pixels
    legend = plots.legend_figure(list(styles.values())).legends[0]
    assert [t.get_text() for t in legend.get_texts()] == list(COPIES)


def test_the_legend_on_a_figure_is_the_legend_figure_as_drawn():
    """The legend drawn once per page and laid on each figure (``plots._legend_pixels``) is,
    pixel for pixel, ``legend_figure`` drawn, in the same place atop the figure."""
    records = [
        results.record(Case("micro", spec, "images-4"), metrics={"encode_s": summarize([1e-3] * 5, "s")})
        for spec in (*ZERO_COPY, *VARIANTS)
    ]
    look = Look.of(Results(records=records))
    styles = look.styles(look.lines(records))
    cells = {(line(r), r.workload): r.metrics["encode_s"] for r in records}
    png = plots.bars([plots.Panel("encode", "s", "median", cells)], styles, ["images-4"])
    with Image.open(io.BytesIO(png)) as image:
        assert image.mode == "RGB"  # opaque figures are saved without alpha
        drawn = np.asarray(image)
    canvas = FigureCanvasAgg(plots.legend_figure(list(styles.values()), bars=True))
    canvas.draw()
    strip = np.asarray(canvas.buffer_rgba())[..., :3]
    top = len(strip) - 2  # the axes' frame starts in the strip's last rows
    assert np.array_equal(drawn[:top], strip[:top])


def test_one_backend_over_each_fanout_transport_draws_a_line_pattern_of_its_own():
    """Shades of one hue were all that told fan-out's transports apart; now each its dashes."""
    transports = ("zmq-each", "zmq-pub", "shm-ring", "torch-dist")
    styles = [plots.line_style(Case("fanout", "pickle", "images-8", t, workers=2), t) for t in transports]
    assert len({str(s.dash) for s in styles}) == len(transports)
    assert all(s.marker == styles[0].marker for s in styles)  # still recognisably one backend


def test_a_variant_keeps_its_backends_colour_and_differs_in_dashes_hatch_and_fill():
    base, variant = (plots.line_style(Case("memory", s, "images-4"), s) for s in ("flat-mmk", VARIANTS[-1]))
    assert variant.colour == base.colour == plots.backend_colour("flat-mmk")
    assert (base.dash, base.hatch, base.hollow) == ("-", "", False)
    assert variant.dash != "-" and variant.hatch and variant.hollow
    assert variant.marker == base.marker != plots.line_style(Case("memory", "pickle", "x"), "").marker
    look = Look.of(
        Results(records=[results.record(Case("memory", s, "images-4")) for s in ("flat-mmk", VARIANTS[-1])])
    )
    assert "repeating-linear-gradient" in look.backend(VARIANTS[-1])  # the swatch striped like the hatch
    assert "repeating-linear-gradient" not in look.backend("flat-mmk")


def test_a_narrow_linear_axis_starts_at_zero_so_noise_looks_like_noise(drawn):
    """ITL medians at 5.30-5.50 ms: a linear axis from zero, in ms, with few ticks."""
    rng = np.random.default_rng(5)
    cells = {
        (line(spec), f"images-{n}"): summarize(rng.normal(5.4e-3, 0.05e-3, 50), "s")
        for spec in ("pickle", "flat-mmk")
        for n in (4, 32)
    }
    look = Look.of(
        Results(records=[results.record(Case("ipc", s, "images-4")) for s in ("pickle", "flat-mmk")])
    )
    plots.against([plots.Panel("ITL", "s", "median", cells)], look.styles([line("pickle"), line("flat-mmk")]))
    ax = drawn[0].axes[0]
    assert ax.get_yscale() == "linear" and ax.get_ylim()[0] == 0
    assert ax.get_ylim()[1] > 5.5
    assert ax.get_ylabel().endswith("(ms)")
    assert len(ax.yaxis.get_major_locator()()) <= plots.TICKS + 1


def test_each_cdf_axes_has_the_unit_of_its_own_workload(drawn):
    """Text TTFT in ms beside 32 images' in s (not 0.008 s), with few enough ticks to read."""
    rng = np.random.default_rng(8)
    cells = {
        (line("pickle"), "text-sonnet"): summarize(rng.normal(0.010, 0.002, 50), "s"),
        (line("pickle"), "images-32"): summarize(rng.normal(1.4, 0.05, 6), "s"),
    }
    look = Look.of(Results(records=[results.record(Case("ipc", "pickle", "text-sonnet"))]))
    plots.cdf(
        plots.Panel("TTFT", "s", "median", cells), look.styles([line("pickle")]), ["text-sonnet", "images-32"]
    )
    text, images = drawn[0].axes[:2]
    assert text.get_xlabel() == "TTFT (ms)" and images.get_xlabel() == "TTFT (s)"
    assert 5 < max(_data_lines(text)[0].get_xdata()) < 50  # plotted in ms
    for ax in (text, images):
        assert len(ax.xaxis.get_major_locator()()) <= plots.TICKS + 1


SAME_FILE = "base and head are the same file: every difference is noise"


def test_a_comparison_of_one_file_with_itself_says_so_at_the_top(built, compared, tmp_path):
    folder = built[0]
    base = folder / "results.json"
    twice = str(folder / ".." / folder.name / "results.json")  # the same file, spelt otherwise
    assert commands.main(["report", str(base), twice, "--out", str(tmp_path / "same")]) == 0
    page = (tmp_path / "same" / "index.html").read_text()
    assert SAME_FILE in page and page.index(SAME_FILE) < page.index("<section")
    copied = tmp_path / "copy.json"
    copied.write_bytes(base.read_bytes())
    base_data, copied_data = results.load(base), results.load(copied)
    summary = summarize_comparison(verdicts.compare(base_data, copied_data), base_data, copied_data)
    twin = report.render_comparison(summary, (str(base), str(copied)))
    assert "base and head hold the same results (identical contents): every difference is noise" in twin
    different = (compared[0] / "index.html").read_text()
    assert "every difference is noise" not in different


def test_ttft_p99_is_tabled_once() -> None:
    """ttft_p99_s is the p99 of ttft_s's samples: the TTFT figures' p99 table says it, once, and
    it does not come back under "Other metrics"."""
    data = results.load(SCHEMA_1)
    assert sum("ttft_p99_s" in r.metrics for r in data.records) > 0  # the fixture has it to show
    page = run_page.render(summarize_run(data), str(SCHEMA_1))
    assert page.count("<caption>TTFT: p99") == 1
    assert "TTFT p99: " not in page


def test_a_ratio_at_or_reaching_zero_draws_without_a_warning():
    """A metric that fell to zero, or an interval that reaches zero, has no place on the
    comparison's log axis: the figure leaves the one out, draws the other's upper whisker, and
    matplotlib has nothing to warn about (a warning in the output is a defect, issue 33)."""
    records = [results.record(Case("micro", s, "images-4")) for s in ("pickle", "flat-mmk")]
    look = Look.of(Results(records=records))
    styles = look.styles(look.lines(records))
    (zero, reaching) = list(styles)
    points = [
        plots.RatioPoint(zero, "images-4", 0.0, 0.0, 0.0, "improvement"),
        plots.RatioPoint(reaching, "images-4", 0.5, -0.2, 1.3, "no change"),
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        png = plots.ratios({"wire_bytes": points}, styles, ["images-4"])
    assert png.startswith(b"\x89PNG")
