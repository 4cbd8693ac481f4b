"""The HTML report: pages from a real run and from a built results file, checked in headless Chromium.

The built file holds what a small real run cannot produce quickly: ipc and
memory records with raw samples and a timeline, a failed case, an unsafe
and a non-conforming backend, and a scenario the report has never heard of.
"""

from __future__ import annotations

import base64
import copy
import io
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from serbench import commands, compare, environment, report, results
from serbench.report import run_page
from serbench.report.page import TIMES, Look
from serbench.stats import MIN_DISTRIBUTION, summarize
from serbench.units import format_value

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


# ---------------------------------------------------------------- building results files


def _ipc_metrics(rng: np.random.Generator, slow: float, images: int) -> dict:
    ttft = rng.gamma(4.0, slow * images * 1e-3 / 4, 200)
    return {
        "ttft_s": summarize(ttft, "s"),
        "itl_s": summarize(rng.gamma(8.0, 2e-3 / 8, 400), "s"),
        "e2e_s": summarize(ttft + 0.3, "s"),
        "req_per_s": summarize(rng.normal(40 / slow, 0.5, 5), "req/s"),
        "payload_gb_per_s": summarize(rng.normal(3.0 / slow, 0.05, 5), "GB/s"),
    }


def _memory_metrics(rng: np.random.Generator, slow: float, images: int) -> dict:
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


def _timeline(slow: float, images: int) -> dict:
    t = np.linspace(0.0, 0.05 * images / 4, 40)
    ramp = np.clip(t / t[-1] * 2, 0, 1) * images * 9.6e6
    return {"t_s": t.tolist(), "engine": (ramp * slow).tolist(), "frontend": (ramp * (slow - 1)).tolist()}


def _backend(name: str, safe: bool, passed: int, unsupported: dict | None = None, failed: dict | None = None):
    return {
        "name": name,
        "description": f"{name} strategy",
        "safe": safe,
        "conformance": {"passed": passed, "unsupported": unsupported or {}, "failed": failed or {}},
    }


BACKENDS = {
    "pickle": _backend("pickle", False, 53),
    "msgspec-frombuffer": _backend("msgspec-frombuffer", True, 52, {"complex64": "no complex dtype"}),
    "flat-mmk": _backend(
        "flat-mmk", True, 51, failed={"strided-1d": "view size is not compatible with input"}
    ),
}
FAILED_ERROR = "failed conformance (1 case(s)): strided-1d: view size is not compatible"


def build_results(path: Path, slow: float = 3.0, seed: int = 6) -> dict:
    """A results file through ``serbench.results``: ipc, memory, a failed case, an unknown scenario."""
    rng = np.random.default_rng(seed)
    file = results.ResultsFile(
        path, environment.collect(["run", "--built"]), "quick", copy.deepcopy(BACKENDS)
    )
    for backend, factor in (("pickle", slow), ("msgspec-frombuffer", 1.0)):
        for n in IMAGE_COUNTS:
            workload = f"images-{n}"
            file.add(results.record("ipc", backend, workload, _ipc_metrics(rng, factor, n)))
            info = {"timeline": _timeline(factor, n), "payload_bytes": int(n * 9.6e6)}
            file.add(results.record("memory", backend, workload, _memory_metrics(rng, factor, n), info))
    file.add(results.record("ipc", "flat-mmk", "images-4", error=FAILED_ERROR))
    file.add(results.record("future", "pickle", "text-sonnet", {"widgets_s": summarize(rng.random(9), "s")}))
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


def case_id(rec_or_case) -> str:
    return "|".join(results.case_key(rec_or_case) if isinstance(rec_or_case, dict) else rec_or_case)


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
def real_run(tmp_path_factory) -> tuple[Path, str]:
    """A tiny real ``serbench run`` (micro, two backends, two workloads): its folder and stdout."""
    out = tmp_path_factory.mktemp("real")
    command = [sys.executable, "-m", "serbench", "run", "--scenarios", "micro", "--quick", "--out", str(out),
               "--backends", "pickle,msgspec-frombuffer", "--workloads", "text-sonnet,images-4"]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return out, done.stdout


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, dict]:
    """The built results file, rendered with ``serbench report`` into its own folder."""
    folder = tmp_path_factory.mktemp("built")
    data = build_results(folder / "results.json")
    assert commands.main(["report", str(folder / "results.json")]) == 0
    return folder, data


@pytest.fixture(scope="module")
def compared(tmp_path_factory, built) -> tuple[Path, compare.Comparison]:
    """Head = base with pickle three times slower on ipc, the failed case fixed, a case added."""
    folder = tmp_path_factory.mktemp("compared")
    base_path = built[0] / "results.json"
    head = build_results(folder / "head.json", slow=9.0, seed=7)
    head["records"] = [r for r in head["records"] if not r.get("error")]
    head["records"].append(
        results.record("ipc", "flat-mmk", "images-4", _ipc_metrics(np.random.default_rng(1), 1.0, 4))
    )
    head["records"].append(results.record("micro", "pickle", "text-sonnet", error="segfault"))
    results.write_json_atomic(folder / "head.json", head)
    assert (
        commands.main(["report", str(base_path), str(folder / "head.json"), "--out", str(folder / "page")])
        == 0
    )
    return folder / "page", compare.compare(results.load(base_path), results.load(folder / "head.json"))


# ---------------------------------------------------------------- tests


def test_run_leaves_a_report_beside_its_results_and_prints_its_path(real_run):
    out, stdout = real_run
    printed = re.search(r"^report:\s+(\S+)$", stdout, re.MULTILINE)
    assert printed, stdout[-1000:]
    assert Path(printed.group(1)) == out / "index.html"
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


def test_real_run_page_in_chromium_holds_every_case_and_metric(real_run, tmp_path):
    out, _ = real_run
    data = results.load(out / "results.json")
    dom = _check_in_browser(out / "index.html", tmp_path)
    found = cells(dom)
    assert data["records"]
    for rec in data["records"]:
        for name in rec["metrics"]:
            assert (case_id(rec), name) in found, (case_id(rec), name)


def test_built_page_in_chromium_holds_every_case_failures_and_marks(built, tmp_path):
    folder, data = built
    dom = _check_in_browser(folder / "index.html", tmp_path)
    found = cells(dom)
    for rec in data["records"]:
        if rec.get("error"):
            assert (case_id(rec), "") in found
        for name in rec["metrics"]:
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
    data = {**built[1], "complete": False, "finished": None, "records": built[1]["records"][-1:]}
    page = report.render(data, "partial.json")
    assert "is incomplete (complete: false)" in page


def test_noise_indicator_reports_each_scenario_spread(built):
    noise = {n.scenario: n for n in run_page.noise(built[1])}
    assert set(noise) == {"ipc", "memory", "future"}
    assert all(0 <= n.typical <= n.worst[1] for n in noise.values())
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
    records = [results.record("micro", "pickle", "images-4", error="Killed by signal 9")]
    look = Look.of({"records": records, "backends": {}})
    section = run_page.scenario_section("micro", records, look)
    assert "Every case of this scenario failed" in section
    assert "<img" not in section
