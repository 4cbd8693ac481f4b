"""The asv suites run once, in quick mode, against the current environment, and none fails.

This is the local-iteration path of docs/asv.md (``asv run --python=same
--quick``), pointed at a temporary copy of ``asv.conf.json`` (results, site
and environments in a temp folder) and a temporary ``HOME`` (asv's machine
file), so the user's asv state is left alone. The grid is narrowed to one
backend and one payload workload through the variables the suites read:
every suite still runs, every metric exists for that case.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import by_path
from asv.util import load_json
from suite_paths import ROOT

from serbench.model.results import Case
from serbench.model.stats import summarize
from serbench.runner import matrix as runner
from serbench.scenarios import SCENARIOS, Outcome

ASV = [sys.executable, "-m", "asv"]
MACHINE = "serbench-test"


def _asv(args: list[str], home: Path, config: Path | None = None) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "HOME": str(home),
        "SERBENCH_ASV_BACKENDS": "msgspec-frombuffer",
        "SERBENCH_ASV_WORKLOADS": "images-4",
        "SERBENCH_ASV_COUNTED_WORKLOADS": "text-sonnet",  # counting images-4 imports torch under valgrind
        "SERBENCH_ASV_STEPS": "outputs-64:logprobs=5,layout=flat",
        "SERBENCH_ASV_SIZES": "tensor-256",
        "SERBENCH_ASV_WORKERS": "2",
    }
    command = [*ASV, *args, *(["--config", str(config)] if config else [])]
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def _config() -> dict:
    return load_json(str(ROOT / "asv.conf.json"), js_comments=True)


def test_environments_results_and_site_are_ignored_by_git() -> None:
    for key in ("env_dir", "results_dir", "html_dir"):
        probe = f"{_config()[key]}/probe"
        assert subprocess.run(["git", "check-ignore", "-q", probe], cwd=ROOT).returncode == 0, key


def test_asv_quick_run_has_a_result_for_every_benchmark(tmp_path: Path) -> None:
    conf = _config()
    conf.update(
        repo=str(ROOT),
        benchmark_dir=str(ROOT / conf["benchmark_dir"]),
        env_dir=str(tmp_path / "env"),
        results_dir=str(tmp_path / "results"),
        html_dir=str(tmp_path / "html"),
    )
    config = tmp_path / "asv.conf.json"
    config.write_text(json.dumps(conf))
    commit = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()

    machine = _asv(["machine", "--yes", "--machine", MACHINE], tmp_path)
    assert machine.returncode == 0, machine.stdout + machine.stderr
    quick = ["run", "--python=same", "--quick", "--set-commit-hash", commit, "--machine", MACHINE]
    run = _asv([*quick, "--show-stderr"], tmp_path, config)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]

    benchmarks = json.loads((tmp_path / "results" / "benchmarks.json").read_text())
    benchmarks.pop("version")
    # Every scenario in serbench's registry has an asv suite (its module).
    assert set(SCENARIOS) <= {name.split(".")[0] for name in benchmarks}

    (results_file,) = (tmp_path / "results" / MACHINE).glob(f"{commit[:8]}-*.json")
    results = json.loads(results_file.read_text())
    columns = results["result_columns"]
    recorded = {name: dict(zip(columns, row, strict=False)) for name, row in results["results"].items()}
    assert set(recorded) == set(benchmarks), "benchmarks without a result"
    for name, row in recorded.items():
        # asv records a failed benchmark as None and a skipped one as NaN.
        (value,) = row["result"]
        assert value is not None, f"{name} failed:\n{run.stdout[-4000:]}"
        assert math.isfinite(value) and value > 0, f"{name} = {value}"


def _common():
    """``benchmarks/common.py``, as asv imports it (no relative import in it)."""
    return by_path.load("benchmarks/common.py", "benchmarks_common")


def test_the_suites_read_old_and_new_cases_and_outcomes_alike(monkeypatch) -> None:
    """asv runs today's suites against older commits: a typed ``Case`` (transport a field)
    and one from before the typed model (``spec@transport`` in the backend) get the same
    parameter, and an ``Outcome`` / ``runner.Unsupported`` the same cache entry as the dicts
    that older commits returned."""
    common = _common()
    shm = Case("ipc", "pickle", "images-4", transport="shm")
    before = SimpleNamespace(scenario="ipc", backend="pickle@shm", workload="images-4")
    assert common.label(shm) == common.label(before) == "pickle@shm"
    assert common.label(Case("ipc", "pickle", "images-4", transport="ipc")) == "pickle"
    assert common.label(Case("micro", "pickle", "images-4")) == "pickle"
    measured = summarize([0.1] * 5, "s")
    old = {"metrics": {"ttft_s": {"unit": "s", "values": [0.1] * 5, "median": 0.1}}}
    assert common.medians(Outcome({"ttft_s": measured})) == common.medians(old) == {"ttft_s": 0.1}
    unsupported = common.medians(runner.Unsupported("no images"))
    assert isinstance(unsupported, common.Unsupported) and unsupported == "no images"
    assert common.medians({"unsupported": "no images"}) == unsupported
    monkeypatch.setattr(common, "BACKENDS", ["pickle"])
    monkeypatch.setattr(common, "TRANSPORTS", ["ipc", "shm"])
    assert [common.label(c) for c in common._cases("ipc", ["images-4"])] == ["pickle", "pickle@shm"]
    assert [common.label(c) for c in common._cases("micro", ["images-4"])] == ["pickle"]
