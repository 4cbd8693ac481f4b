"""Instruction counts: the window rule, how counts are compared and merged by the gate, the
minimum detectable effect, worker pinning, the run without valgrind, and real counts under callgrind."""

from __future__ import annotations

import json
import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import tracemalloc
from pathlib import Path

import psutil
import pytest
from builders import doc, metric, one, rec, samples
from suite_paths import ROOT

from serbench import cli as commands
from serbench.analysis import estimates, verdicts
from serbench.analysis.summary import summarize_comparison
from serbench.analysis.verdicts import Verdict
from serbench.cli import gate as gate_command
from serbench.gate import counting as gate_counting
from serbench.gate import cpus
from serbench.gate.measurers import ProtocolMeasurer
from serbench.gate.revision import Revision
from serbench.model import results
from serbench.model.errors import GateError
from serbench.model.profiles import PROFILES
from serbench.present import terminal
from serbench.probes import instructions
from serbench.runner import measurer as worker
from serbench.runner import protocol
from serbench.runner.matrix import Plan

SLOWED = "serbench.testing:slowed:base=msgspec-frombuffer,factor={},slot={}"
QUICK = PROFILES["quick"]
MICRO = Plan(["msgspec-frombuffer"], ["text-sonnet"], ["micro"])


def test_windows_hold_the_target_count_in_whole_hundreds_of_calls_unless_too_long() -> None:
    target = instructions.WINDOW_INSTRUCTIONS
    assert instructions.window(target * 2) == 1
    assert instructions.window(target / 3) == 3  # a hundred calls would be 33 windows' worth
    assert instructions.window(target / 10) == 10
    assert instructions.window(target / 30) == 100
    assert instructions.window(target / 101) == 200
    assert instructions.window(target / 1000) == 1000
    # A smaller window (the ipc path's) holds fewer calls by the same rules.
    assert instructions.window(target / 101, size=target // 2) == 100
    assert instructions.window(target / 10, size=target // 2) == 5


def test_the_counting_loop_gets_a_fresh_malloc_arena_and_its_errors_come_back() -> None:
    # In a forked child, as a case counts, every arena but the forking thread's is free: the
    # placeholder threads take them (or make their own, HOLDERS at least) and the counting
    # thread gets one more, new.
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:
        before = instructions._glibc_arenas()
        (inside,) = instructions._in_new_thread(lambda: (instructions._glibc_arenas(),))
        os.write(writer, json.dumps([before, inside]).encode())
        os._exit(0)
    os.close(writer)
    with os.fdopen(reader) as answer:
        before, inside = json.loads(answer.read())
    os.waitpid(pid, 0)
    assert inside == max(before, 1 + instructions.HOLDERS) + 1
    with pytest.raises(ZeroDivisionError):
        instructions._in_new_thread(lambda: (1 / 0,))


def test_reading_a_dump_takes_its_total_and_allocates_nothing_its_size(monkeypatch, tmp_path: Path) -> None:
    # Dumps are read between two windows in the counting thread: a buffer the size of the dump
    # (which varies from run to run) would move where the next window's objects land.
    monkeypatch.setattr(instructions, "_dumps", tmp_path)  # as ``counting_in`` sets it
    body = b"fn=(1) filler\n" * 20_000  # 280 kB, as large as real dumps get and more
    for n, total in ((2, 111), (10, 123_456_789)):  # the latest dump is the highest number, not the last name
        (tmp_path / f"callgrind.{os.getpid()}.{n}").write_bytes(body + f"\ntotals: {total}\n".encode())
    tracemalloc.start()
    try:
        total = instructions._dumped_instructions()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert total == 123_456_789
    assert peak < len(body) // 10
    assert not (tmp_path / f"callgrind.{os.getpid()}.10").exists()
    assert instructions._dumped_instructions() == 111
    (tmp_path / f"callgrind.{os.getpid()}.11").write_bytes(body)
    with pytest.raises(RuntimeError, match="totals line"):
        instructions._dumped_instructions()


ARENA_PROBE = """
import sys
from serbench.probes import instructions
if sys.argv[1] == "aligned":
    instructions.align_arenas()
kept = [object() for _ in range(10_000)]
sys._debugmallocstats()
kept += [object() for _ in range(1_000_000)]  # tens of new arenas, freed at exit through the allocator
sys._debugmallocstats()
"""


def _arena_alignment_losses(mode: str) -> list[int]:
    """The bytes pymalloc lost to aligning its pools in its arenas, before and after new arenas."""
    run = subprocess.run(
        [sys.executable, "-c", ARENA_PROBE, mode], capture_output=True, text=True, check=True
    )
    return [
        int(line.split("=")[1].replace(",", ""))
        for line in run.stderr.splitlines()
        if "arena alignment" in line
    ]


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the arena allocator is x86-64 code")
def test_aligned_arenas_start_at_a_multiple_of_their_size() -> None:
    # An arena that starts off a pool boundary loses part of a pool; mmap places arenas on
    # pages, so among tens of new ones some do, unless they are aligned to their own size.
    before, after = _arena_alignment_losses("default")
    assert after > before
    before, after = _arena_alignment_losses("aligned")
    assert after == before


POOL_PROBE = """
import sys
from serbench.probes import instructions

def main(history, fill):
    kept = [bytes(n % 470 + 1) for n in range(history)] + [object() for _ in range(history)]
    pools = instructions._Pools()
    if fill:
        pools.fill()
    sys._debugmallocstats()

main(int(sys.argv[1]), sys.argv[2] == "fill")
"""


def _free_blocks_by_size_class(history: int, fill: str) -> list[int]:
    """Free blocks in pymalloc's partly used pools, by size class, after ``history`` blocks kept."""
    run = subprocess.run(
        [sys.executable, "-c", POOL_PROBE, str(history), fill], capture_output=True, text=True, check=True
    )
    rows = [line.split() for line in run.stderr.splitlines()]
    table = [row for row in rows if len(row) == 5 and all(field.isdigit() for field in row)]
    assert [int(row[0]) for row in table] == list(range(instructions.SIZE_CLASSES))
    return [int(row[4]) for row in table]


def test_filled_pools_leave_every_size_class_as_free_whatever_came_before() -> None:
    # Without filling, how many free blocks each class's partly used pools hold follows what the
    # process did before: the control, showing the probe sees the difference.
    assert _free_blocks_by_size_class(1_000, "no") != _free_blocks_by_size_class(1_337, "no")
    filled = _free_blocks_by_size_class(1_000, "fill")
    assert filled == _free_blocks_by_size_class(1_337, "fill")
    # Each class's free blocks are those of one fresh pool with one block taken, and the two
    # or fewer that the filling's own iterators gave back.
    usable = instructions.POOL_SIZE - instructions.POOL_HEADER
    for size_class, free in enumerate(filled):
        assert 0 <= free - (usable // (16 * (size_class + 1)) - 1) <= 2


def test_a_counting_process_fixes_the_mmap_threshold_and_keeps_tunables_already_set(
    monkeypatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
    env = instructions.counting_environment()
    assert env["GLIBC_TUNABLES"] == instructions.FIXED_MALLOC and env["PYTHONHASHSEED"] == "0"
    assert env["PYTHONMALLOC"] == "pymalloc"  # whose pools _Pools reads
    assert env["PYTHONSAFEPATH"] == "1"  # the current folder's listing off the path
    assert env["OMP_NUM_THREADS"] == "1"  # no pool thread mapping memory at times of its own
    # only what the interpreter and the libraries read as they start: serbench's own settings
    # (the dump folder, the output folder, the backends) go in the worker's messages
    added = {key for key in env if key not in os.environ}
    assert added <= {
        "GLIBC_TUNABLES",
        "PYTHONHASHSEED",
        "PYTHONMALLOC",
        "PYTHONSAFEPATH",
        *instructions.SINGLE_THREADED,
    }
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.tcache_count=3")
    env = instructions.counting_environment()
    assert env["GLIBC_TUNABLES"] == f"glibc.malloc.tcache_count=3:{instructions.FIXED_MALLOC}"


def counts(value: float) -> dict:
    return {"decode_instructions": metric([value], "count")}


def test_a_count_is_compared_with_its_own_tolerance_not_the_wall_clock_threshold() -> None:
    # A count is one exact number a side: 0.9 % more is slower, but within its 1 % tolerance.
    assert one(counts(100_000), counts(100_900))["decode_instructions"].verdict == Verdict.SLOWER_TOLERATED
    slower = one(counts(100_000), counts(101_500), max_regression=0.10)["decode_instructions"]
    assert slower.verdict == Verdict.REGRESSION and slower.exact
    assert slower.ratio == pytest.approx(1.015) and slower.detectable == pytest.approx(0.01)
    assert one(counts(100_000), counts(96_000))["decode_instructions"].verdict == Verdict.IMPROVEMENT
    loose = one(counts(100_000), counts(104_000), overrides={"decode_instructions": 0.05})
    assert loose["decode_instructions"].verdict == Verdict.SLOWER_TOLERATED


def test_the_minimum_detectable_effect_grows_with_the_interval() -> None:
    # A ±2 % interval: 1.96 standard errors below; 2.8 of them make about 2.9 %.
    expected = math.exp(math.log(1 / 0.98) * (1.95996 + 0.84162) / 1.95996) - 1
    assert estimates.detectable(1.0, 0.98, 1.02, False) == pytest.approx(expected, rel=1e-4)
    assert estimates.detectable(1.0, 0.99, 1.01, False) < estimates.detectable(1.0, 0.98, 1.02, False)
    # A rate's interval reads the same.
    assert estimates.detectable(1.0, 0.98, 1 / 0.98, True) == pytest.approx(expected, rel=1e-4)
    # A lopsided interval (few rounds, one of them slow) is as blind as its wider half.
    lopsided = estimates.detectable(1.0, 0.99, 1.30, False)
    assert lopsided == pytest.approx(estimates.detectable(1.0, 1 / 1.30, 1.01, False)) and lopsided > 0.3
    assert estimates.detectable(1.0, None, None, False) is None


def test_every_timed_comparison_states_what_it_could_detect() -> None:
    base, head = doc([rec({"encode_s": metric(samples(1))})]), doc([rec({"encode_s": metric(samples(2))})])
    comparison = verdicts.compare(base, head)
    (row,) = comparison.rows
    assert 0 < row.detectable < 0.05  # 2 % noise per sample, 60 samples a side
    header, _, line, *_ = terminal.comparison_table(summarize_comparison(comparison, base, head)).splitlines()
    assert header.split()[-1] == "detects" and line.split()[-1] == f"{row.detectable:.1%}"


def test_the_gate_adds_counts_to_the_timed_cases_and_a_failed_count_fails_the_case() -> None:
    timed = doc([rec({"encode_s": metric(samples(1))}, "a"), rec({"encode_s": metric(samples(2))}, "b")])
    counted = doc([rec(counts(5.0), "a"), rec({}, "b", error="valgrind crashed")])
    merged = gate_counting.add_counts(timed, counted)
    a, b = merged.records
    assert set(a.metrics) == {"encode_s", "decode_instructions"} and a.error is None
    assert b.error == "counting instructions: valgrind crashed"
    assert timed.records[1].error is None  # the input is left alone


def test_cpu_lists_and_pinning_only_where_cpus_are_to_spare(monkeypatch, tmp_path: Path) -> None:
    assert cpus._cpu_list("0-2,5\n") == {0, 1, 2, 5} and cpus._cpu_list("\n") == set()
    monkeypatch.setattr(cpus, "ISOLATED_CPUS", tmp_path / "isolated")
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    assert cpus.measurer_cpus() is None
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)))
    assert cpus.measurer_cpus() == {14, 15}
    (tmp_path / "isolated").write_text("4-5\n")
    assert cpus.measurer_cpus() == {4, 5}


def test_a_pinned_run_runs_on_its_cpu(tmp_path: Path) -> None:
    cpu = max(os.sched_getaffinity(0))
    side = Revision("head", ROOT, MICRO, QUICK)
    proc = side.run("--help", cpus=frozenset({cpu}), stdout=subprocess.PIPE)
    try:
        assert psutil.Process(proc.pid).cpu_affinity() == [cpu]
    finally:
        proc.communicate(timeout=60)


def test_a_run_that_cannot_count_says_so_and_measures_wall_time(monkeypatch, capsys, tmp_path) -> None:
    monkeypatch.setattr(instructions, "cannot_launch", lambda: instructions.MISSING)
    argv = ["run", "--scenarios", "micro", "--backends", "pickle", "--workloads", "text-sonnet"]
    assert commands.main([*argv, "--measure", "instructions", "--out", str(tmp_path / "run")]) == 0
    assert instructions.wall_time_note(instructions.MISSING) in capsys.readouterr().err
    (record,) = results.load(tmp_path / "run" / "results.json").records
    assert "encode_s" in record.metrics and "encode_instructions" not in record.metrics


def test_gate_counts_only_micro_ipc_and_fanout_and_says_why_not(monkeypatch, capsys) -> None:
    args = type("Args", (), {"measure": "instructions"})()
    memory = Plan(["x"], ["text-sonnet"], ["memory"])
    counting, why = gate_command.count_plan(args, memory, QUICK)
    assert counting is None and "has none" in why
    assert "micro, ipc and fanout" in capsys.readouterr().err
    monkeypatch.setattr(instructions, "cannot_launch", lambda: None)
    (plan, _), _ = gate_command.count_plan(args, Plan(["x"], ["text-sonnet"], ["memory", "fanout"]), QUICK)
    assert plan.scenarios == ["fanout"]
    both = Plan(["x"], ["text-sonnet"], ["micro", "memory", "ipc"])
    monkeypatch.setattr(instructions, "cannot_launch", lambda: instructions.MISSING)
    assert gate_command.count_plan(args, both, QUICK) == (None, instructions.MISSING)
    assert "valgrind not found" in capsys.readouterr().err
    args.measure = "auto"  # the default: no counts is no surprise there, so no note; the summary says it
    assert gate_command.count_plan(args, both, QUICK) == (None, instructions.MISSING)
    assert capsys.readouterr().err == ""
    assert "no counts: valgrind not found" in gate_command.measured_by(False, 15, instructions.MISSING)
    monkeypatch.setattr(instructions, "cannot_launch", lambda: None)
    for measure in ("instructions", "auto"):
        args.measure = measure
        (plan, profile), why = gate_command.count_plan(args, both, QUICK)
        assert plan.scenarios == ["micro", "ipc"] and plan.backends == ["x"] and why is None
        assert profile.options == {"measure": "instructions"}
    assert gate_command.measured_by(True, 10, None).startswith("measured by: instruction counts")
    assert "(10 paired rounds)" in gate_command.measured_by(True, 10, None)
    assert gate_command.measured_by(True, 0, None).endswith("alone: no wall clock (--measure auto adds it)")
    args.measure = "time"
    assert gate_command.count_plan(args, both, QUICK) == (None, None)


def _run(
    out: Path, backends: str, path: str | None = None, tmp: Path | None = None
) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), **({"PATH": path} if path is not None else {})}
    if tmp is not None:
        env["TMPDIR"] = str(tmp)
    command = [sys.executable, "-m", "serbench", "run", "--scenarios", "micro", "--measure", "instructions"]
    command += ["--backends", backends, "--workloads", "text-sonnet", "--out", str(out)]
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def test_without_valgrind_the_run_times_and_says_counts_are_absent(tmp_path: Path) -> None:
    bare = tmp_path / "bin"  # a PATH with git but no valgrind
    bare.mkdir()
    (bare / "git").symlink_to(shutil.which("git"))
    done = _run(tmp_path / "out", "msgspec-frombuffer", path=str(bare))
    assert done.returncode == 0, done.stderr
    assert "valgrind not found on PATH" in done.stderr
    (record,) = json.loads((tmp_path / "out" / "results.json").read_text())["records"]
    assert record["error"] is None and "decode_s" in record["metrics"]
    assert not any(name.endswith("_instructions") for name in record["metrics"])
    assert record["info"]["instructions"].startswith("not counted")


def test_a_gate_worker_does_not_count_case_by_case(tmp_path: Path) -> None:
    """The gate's timed workers measure wall time (their profile asks for no counts); a worker
    set up to count does so for every case at once, one valgrind process per side, and
    refuses a single case."""
    profile = QUICK.with_options(measure="instructions")
    counting = ProtocolMeasurer(Revision("head", ROOT, MICRO, profile), tmp_path / "head.log")
    try:
        assert counting.greet() and protocol.INSTRUCTIONS in counting.hello.capabilities
        (case,) = counting.ready().cases
        if instructions.cannot_launch() is None:
            with pytest.raises(GateError, match="one run per side"):
                counting.measure(tmp_path / "one", case)
        else:  # no valgrind here: the clock alone, and the case says why
            (record,) = counting.measure(tmp_path / "one", case).records
            assert "decode_s" in record.metrics and record.info.instructions.startswith("not counted")
    finally:
        counting.close()


def test_the_gate_counts_each_side_in_a_worker_of_its_own(monkeypatch, tmp_path: Path) -> None:
    """Each side's worker, set up to count, checks its backends and counts every case in one
    valgrind process of its own, once per interpreter layout (``count_layouts``); the counts
    come back as each side's results, a value per layout, the same code's within the count's
    tolerance of each other, and no dump folder or zygote is left behind."""
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    monkeypatch.setenv("TMPDIR", str(temporary))
    profile = QUICK.with_options(measure="instructions")
    sides = [Revision(label, ROOT, MICRO, profile) for label in ("base", "head")]
    notes: list[str] = []
    counted = gate_counting.count_layouts(sides, tmp_path, notes.append)
    assert counted is not None and len(counted) == 2
    for side in counted:
        (record,) = side.records
        assert record.ok and record.case.backend == "msgspec-frombuffer"
        if instructions.cannot_launch() is None:
            assert {"encode_instructions", "decode_instructions"} <= set(record.metrics)
            assert "decode_s" not in record.metrics
            assert len(record.metrics["decode_instructions"].values) == len(gate_counting.LAYOUTS)
        else:  # no valgrind here: the worker measured wall time and says why
            assert record.info.instructions.startswith("not counted")
    if instructions.cannot_launch() is None:
        rows = [r for r in verdicts.compare(*counted, side_by_side=True).rows if r.band is not None]
        assert {r.metric for r in rows} >= {"encode_instructions", "decode_instructions"}
        within = (Verdict.NO_CHANGE, Verdict.SLOWER_TOLERATED, Verdict.FASTER_TOLERATED)
        assert all(r.verdict in within and r.band < r.detectable for r in rows), rows
        assert (tmp_path / "head-instructions-layout-2").is_dir()
    assert notes[-1].startswith("instructions counted")
    assert sorted(p.name for p in temporary.iterdir()) == []


# What a counting process does with the setting its message carries: before it, it does not
# count; after it, it does (under valgrind), and nothing came through its environment.
UNDER_CALLGRIND = """
import json, os, sys
from pathlib import Path
from serbench.probes import instructions
before = instructions.launched()
instructions.counting_in(Path(json.loads(sys.stdin.readline())["dumps"]))
unset = [k for k in os.environ if k.startswith("SERBENCH")]
print(json.dumps([before, instructions.launched(), instructions.unavailable(), unset]), flush=True)
"""


def test_a_process_under_callgrind_gets_its_settings_by_message(monkeypatch, tmp_path) -> None:
    """``launched()`` follows the message, not the environment; the dump folder is removed."""
    if instructions.cannot_launch():
        pytest.skip(f"{instructions.cannot_launch()}: `make test` installs it")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the dump folder is made
    said: list = []

    def talk(proc: subprocess.Popen, dumps: Path) -> None:
        assert dumps.parent == tmp_path and dumps.is_dir()
        proc.stdin.write(json.dumps({"dumps": str(dumps)}).encode() + b"\n")
        proc.stdin.flush()
        said.append(json.loads(proc.stdout.readline()))

    code = instructions.run_under_callgrind([sys.executable, "-c", UNDER_CALLGRIND], talk)
    assert code == 0
    assert said == [[False, True, None, []]]
    assert not list(tmp_path.iterdir())


def test_a_counting_run_that_cannot_set_up_says_why(tmp_path: Path) -> None:
    """The counting measurer's ``Failed`` comes back as a MeasurerError naming what went wrong."""
    if instructions.cannot_launch():
        pytest.skip(f"{instructions.cannot_launch()}: `make test` installs it")
    plan = Plan(["no-such-backend"], ["text-sonnet"], ["micro"])
    with pytest.raises(protocol.MeasurerError, match="no-such-backend"):
        worker.count(plan, QUICK.with_options(measure="instructions"), ["run"], tmp_path, {})


@pytest.fixture(scope="module")
def counted(made_once) -> dict:
    """One run under callgrind: the test backend as is and 10 % slowed."""
    if instructions.cannot_launch():
        pytest.skip(f"{instructions.cannot_launch()}: `make test` installs it")

    def make(folder: Path) -> None:
        out, tmp = folder / "out", folder / "tmp"
        tmp.mkdir()
        done = _run(out, f"{SLOWED.format(1.0, 0)},{SLOWED.format(1.10, 1)}", tmp=tmp)
        assert done.returncode == 0, done.stderr[-3000:]
        assert not list(tmp.iterdir()), "dumps left behind"

    out = made_once("micro-counted", make) / "out"
    return {r["backend"]: r for r in json.loads((out / "results.json").read_text())["records"]}


def test_counts_see_a_slowdown_made_of_real_work(counted: dict) -> None:
    """Within 2.5 %: a repeated call does not cost exactly what an average call does (its
    allocations land beside the first call's result), so "10 % more calls" is not exactly 10 %."""
    plain, slowed = counted[SLOWED.format(1.0, 0)], counted[SLOWED.format(1.10, 1)]
    for name in ("encode_instructions", "decode_instructions"):
        ratio = slowed["metrics"][name]["median"] / plain["metrics"][name]["median"]
        assert ratio == pytest.approx(1.10, abs=0.025), name
    assert plain["metrics"]["decode_instructions"]["median"] > 10_000


def test_a_counting_run_records_counts_and_bytes_but_no_times(counted: dict) -> None:
    for record in counted.values():
        assert record["error"] is None
        counts_and_bytes = {"encode_instructions", "decode_instructions", "wire_bytes", "frames"}
        assert set(record["metrics"]) == counts_and_bytes
        assert all(n % instructions.PERIOD == 0 for n in record["info"]["calls_per_window"].values())
