"""serbench gate: merging rounds, interleaving, measuring processes and their fallbacks, errors, and one
end-to-end run in a fresh clone."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from builders import doc, metric, rec, samples
from gating import BASE_BACKEND, HEAD_BACKEND, PADDED, clone_working_tree, git
from suite_paths import ROOT

from serbench import cli as commands
from serbench import testing
from serbench.gate import measure as gate
from serbench.gate import measurers, rounds
from serbench.gate.measurers import OneShotMeasurer, ProtocolMeasurer, RunWorkerMeasurer
from serbench.gate.revision import Revision
from serbench.model import results
from serbench.model.errors import EXIT_TERMINATED, GateError
from serbench.model.profiles import PROFILES
from serbench.model.results import Backend, Case, Results
from serbench.probes import instructions
from serbench.runner import protocol
from serbench.runner.matrix import Plan
from serbench.runtime.isolation import kill_tree
from serbench.serializers import BUILTINS, get_serializer

QUICK = PROFILES["quick"]


def test_merge_concatenates_samples_and_remembers_rounds() -> None:
    first = doc([rec({"encode_s": metric(samples(1, n=15)), "frames": metric([2], "count")})])
    second = doc([rec({"encode_s": metric(samples(2, n=10)), "frames": metric([2], "count")})])
    merged = results.merge([first, second])
    (record,) = merged.records
    encode = record.metrics["encode_s"]
    assert encode.values == samples(1, n=15) + samples(2, n=10)
    assert encode.rounds == [15, 10]
    assert encode.ci_low <= encode.median <= encode.ci_high
    assert record.metrics["frames"].values == [2.0, 2.0]
    assert record.error is None and record.rounds == 2


def test_a_case_failing_in_any_round_is_failed() -> None:
    ok = rec({"encode_s": metric(samples(1))})
    merged = results.merge([doc([ok]), doc([rec({}, error="segfault")]), doc([ok])])
    (record,) = merged.records
    assert record.error == "failed in 1 of 3 rounds: segfault"
    assert record.metrics == {}


class FakeMeasurer:
    def __init__(self, label: str, calls: list, cases: list[Case] | None) -> None:
        plan = Plan([], [], [])
        self.revision, self.calls, self.cases = Revision(label, Path("."), plan, QUICK), calls, cases

    def measure(self, out: Path, case: Case | None = None) -> Results:
        self.calls.append((self.revision.label, case))
        measured = doc([])
        measured.backends = {"x": Backend(name=self.revision.label)}  # as checked by this side
        return measured


class Ending:
    """A measurer that records when it is told to end and when it is waited for."""

    def __init__(self, label: str, events: list) -> None:
        self.label, self.events = label, events

    def end(self) -> None:
        self.events.append(("end", self.label))

    def close(self) -> None:
        self.events.append(("close", self.label))


def test_every_measurer_is_told_to_end_before_any_is_waited_for() -> None:
    events: list = []
    measurers.close_all([Ending("base", events), Ending("head", events)])
    assert events == [("end", "base"), ("end", "head"), ("close", "base"), ("close", "head")]


def test_a_closed_measuring_process_has_ended(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    measurers._end(proc)
    measurers._close(proc)  # a second end of a closed stdin is harmless
    assert proc.returncode == 0 and proc.stdout.closed


def test_rounds_alternate_the_order_of_the_sides(tmp_path: Path) -> None:
    calls: list = []
    sides = [FakeMeasurer("base", calls, None), FakeMeasurer("head", calls, None)]
    runs = [rounds.one_round(sides, r, tmp_path) for r in (1, 2, 3)]
    assert [label for label, _ in calls] == ["base", "head", "head", "base", "base", "head"]
    assert [[len(side) for side in run] for run in runs] == [[1, 1]] * 3


def test_sides_alternate_case_by_case_and_round_by_round(tmp_path: Path) -> None:
    """Every case is measured on both sides back to back, and which side goes first changes
    from case to case and from round to round; a case only head has runs on head only."""
    a, b, new = Case("micro", "x", "w1"), Case("micro", "x", "w2"), Case("micro", "y", "w1")
    calls: list = []
    sides = [FakeMeasurer("base", calls, [a, b]), FakeMeasurer("head", calls, [a, b, new])]
    runs = [rounds.one_round(sides, r, tmp_path) for r in (1, 2)]
    assert calls == [
        ("base", a), ("head", a), ("head", b), ("base", b), ("head", new),
        ("head", a), ("base", a), ("base", b), ("head", b), ("head", new),
    ]  # fmt: skip
    assert [[len(side) for side in run] for run in runs] == [[2, 3], [2, 3]]


MICRO_TEXT = Plan(["msgspec-frombuffer"], ["text-sonnet"], ["micro"])


def test_every_round_is_measured_by_measurers_started_for_it(monkeypatch, tmp_path: Path) -> None:
    """``fresh_rounds``: a new measurer per side each round (what a process draws at its start
    then varies from round to round), the order still alternating, the first round's notes
    said once."""
    calls: list = []
    started: list[list[FakeMeasurer]] = []
    notes: list[str] = []

    handed: list = []

    @contextlib.contextmanager
    def fake_measurers(revisions, out, log, backends):
        log("measuring processes pinned to CPU(s) 1")
        handed.append(backends)
        started.append([FakeMeasurer(r.label, calls, None) for r in revisions])
        yield started[-1]

    monkeypatch.setattr(rounds, "measurers", fake_measurers)
    revisions = [Revision(label, ROOT, MICRO_TEXT, QUICK) for label in ("base", "head")]
    runs = rounds.fresh_rounds(revisions, 3, tmp_path, log=notes.append)
    assert len(started) == 3 and len({id(m) for side in started for m in side}) == 6
    assert [label for label, _ in calls] == ["base", "head", "head", "base", "base", "head"]
    assert [len(r) for r in runs] == [3, 3]
    assert notes.count("measuring processes pinned to CPU(s) 1") == 1
    said = [note.split(":")[0] for note in notes if note.startswith("round")]
    assert said == ["round 1/3", "round 2/3", "round 3/3"]
    # The first round's measurers check their backends; the later ones are handed each side's own.
    sides = [{"x": Backend(name=label)} for label in ("base", "head")]
    assert handed == [[None, None], sides, sides]


def test_the_rounds_done_are_handed_on_before_a_later_one_fails(monkeypatch, tmp_path: Path) -> None:
    """``on_round`` sees every side's results after each round, so a run stopped in round 3
    (a lease ending, Ctrl-C) has already handed on rounds 1 and 2."""
    seen: list[list[int]] = []

    @contextlib.contextmanager
    def fake_measurers(revisions, out, log, backends):
        if len(seen) == 2:
            raise KeyboardInterrupt
        yield [FakeMeasurer(r.label, [], None) for r in revisions]

    monkeypatch.setattr(rounds, "measurers", fake_measurers)
    revisions = [Revision(label, ROOT, MICRO_TEXT, QUICK) for label in ("base", "head")]
    with pytest.raises(KeyboardInterrupt):
        rounds.fresh_rounds(
            revisions,
            3,
            tmp_path,
            log=lambda m: None,
            on_round=lambda runs: seen.append([len(r) for r in runs]),
        )
    assert seen == [[1, 1], [2, 2]]


def test_a_measurer_measures_one_round_per_request(tmp_path: Path) -> None:
    side = Revision("head", ROOT, MICRO_TEXT, QUICK)
    measurer = ProtocolMeasurer(side, tmp_path / "head.log")
    try:
        assert measurer.greet()  # its hello, instead of its --help, says what it can do
        assert measurer.hello.protocol == protocol.PROTOCOL
        assert protocol.MEASURE_CASE in measurer.hello.capabilities
        measurer.ready()
        assert measurer.cases == [Case("micro", "msgspec-frombuffer", "text-sonnet")]
        first = measurer.measure(tmp_path / "round-1")
        second = measurer.measure(tmp_path / "round-2", measurer.cases[0])
        unknown = measurer.measure(tmp_path / "round-3", Case("micro", "pickle", "text-sonnet"))
    finally:
        measurer.close()
    assert measurer.proc.returncode == 0
    for data in (first, second):
        assert data.complete
        (record,) = data.records
        assert record.error is None and len(record.metrics["encode_s"].values) > 1
    assert first.started <= second.started
    assert unknown.records == []


def test_a_measurer_handed_its_checked_backends_records_them_instead_of_checking(tmp_path: Path) -> None:
    """A later round's measurer runs the code the first round's checked: it is handed those backends
    (``rounds.checked_backends``), which its results then hold as given, not checked again."""
    side = Revision("head", ROOT, MICRO_TEXT, QUICK)
    handed = {"msgspec-frombuffer": Backend(name="handed on", description="round 1's check", safe=True)}
    measurer = ProtocolMeasurer(side, tmp_path / "head.log", backends=handed)
    try:
        assert measurer.greet()
        measurer.ready()
        measured = measurer.measure(tmp_path / "round-2")
    finally:
        measurer.close()
    assert measured.backends == handed
    assert measured.records and measured.records[0].error is None
    assert rounds.checked_backends([measured]) == handed


def test_checked_backends_are_handed_on_only_where_they_cover_every_backend_measured() -> None:
    checked = Backend(name="pickle", safe=False)
    measured = doc([rec({"encode_s": metric(samples(1))}, "pickle"), rec({}, "flat-mmk")])
    assert rounds.checked_backends([measured]) is None  # nothing recorded
    measured.backends = {"pickle": checked}
    assert rounds.checked_backends([measured]) is None  # flat-mmk's missing
    measured.backends["flat-mmk"] = checked
    assert rounds.checked_backends([measured]) == {"pickle": checked, "flat-mmk": checked}


def test_a_measurer_that_stops_is_a_gate_error_with_its_last_words(tmp_path: Path) -> None:
    side = Revision("base", ROOT, Plan(["no-such-backend"], ["text-sonnet"], ["micro"]), QUICK)
    measurer = ProtocolMeasurer(side, tmp_path / "base.log")
    assert measurer.greet()
    with pytest.raises(GateError, match=r"base: serbench's measuring process stopped: .*no-such-backend"):
        measurer.ready()


# A revision from before serbench.runner.measurer, as small as the gate needs: `serbench run --help`
# (with or without --worker), and `serbench run --worker` speaking the JSON lines of serbench
# before the typed model (schema-1 results, the transport in the backend: spec@transport).
OLD_MAIN = """
import json, sys
from pathlib import Path

argv = sys.argv[1:]
if "--help" in argv:
    print("usage: serbench run [--backends B] [--transport T] " + ("[--worker]" if WORKER else ""))
    sys.exit(0)
if "--worker" not in argv:
    sys.exit("serbench: error: no such thing")
print(json.dumps({"cases": CASES}), flush=True)
for line in sys.stdin:
    request = json.loads(line)
    chosen = [key for key in CASES if request.get("case") in (None, key)]
    records = [
        {"scenario": s, "backend": b, "workload": w, "error": None, "duration_s": 0.1,
         "metrics": {"encode_s": {"unit": "s", "values": [1e-5] * 5, "median": 1e-5,
                                  "ci_low": 1e-5, "ci_high": 1e-5}}, "info": {}}
        for s, b, w in chosen
    ]
    document = {"schema": "serbench-results/1", "complete": True, "started": "2026-12-01T00:00:00+00:00",
                "environment": {"command": argv}, "backends": {}, "records": records}
    out = Path(request["out"])
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(document))
    print(line.strip(), flush=True)
"""
OLD_CASES = [["ipc", "pickle@shm", "text-sonnet"], ["micro", "pickle", "text-sonnet"]]


def old_revision(folder: Path, worker: bool) -> Path:
    """A tree whose serbench predates ``serbench.runner.measurer`` (``OLD_MAIN``)."""
    (folder / "serbench").mkdir(parents=True)
    (folder / "serbench" / "__init__.py").write_text('__version__ = "0.0.1"\n')
    code = f"WORKER = {worker}\nCASES = {OLD_CASES!r}\n{OLD_MAIN}"
    (folder / "serbench" / "__main__.py").write_text(code)
    return folder


def test_a_revision_without_a_measurer_falls_back_to_its_run_worker(tmp_path: Path) -> None:
    """Its serbench.runner.measurer never says hello (the module is missing there; the editable
    install's would be another tree's, and says so and ends), so its `serbench run --worker`
    measures, given the plan as options; its case keys and schema-1 results come back as
    ``Case``s, keyed like head's."""
    plan = Plan(["pickle"], ["text-sonnet"], ["micro", "ipc"], {"transport": ("shm",)})
    base = Revision("base", old_revision(tmp_path / "old", worker=True), plan, QUICK)
    head = Revision("head", ROOT, Plan(["pickle"], ["text-sonnet"], ["micro"]), QUICK)
    notes: list[str] = []
    with measurers.measurers([base, head], tmp_path, notes.append) as (old, new):
        assert [type(old), type(new)] == [RunWorkerMeasurer, ProtocolMeasurer]
        shm = Case("ipc", "pickle", "text-sonnet", transport="shm")
        micro = Case("micro", "pickle", "text-sonnet")
        assert old.cases == [shm, micro]
        assert new.cases == [micro]  # the same key on both sides: the pair is measured back to back
        measured = old.measure(tmp_path / "base-1-1", shm)
    assert "base predates serbench.runner.measurer" in notes[-1]
    (record,) = measured.records
    assert record.case == shm and record.metrics["encode_s"].median == 1e-5
    command = measured.environment.command  # the options it was started with: the plan as text
    assert command[command.index("--transport") + 1] == "shm" and "--worker" in command
    assert command[command.index("--scenarios") + 1] == "micro,ipc"
    assert "No module named serbench.worker" in (tmp_path / "base.log").read_text()  # why it fell back


def test_if_one_side_has_no_worker_both_run_a_process_per_round(tmp_path: Path) -> None:
    """Measured alike: a base from before ``--worker`` makes head run per round too."""
    sides = [
        Revision("base", old_revision(tmp_path / "old", worker=False), MICRO_TEXT, QUICK),
        Revision("head", ROOT, MICRO_TEXT, QUICK),
    ]
    notes: list[str] = []
    with measurers.measurers(sides, tmp_path, notes.append) as started:
        assert [type(m) for m in started] == [OneShotMeasurer, OneShotMeasurer]
    assert "predates" in notes[-1]


def test_a_one_shot_round_that_fails_is_a_gate_error(tmp_path: Path) -> None:
    plan = Plan(["no-such-backend"], ["text-sonnet"], ["micro"])
    one_shot = OneShotMeasurer(Revision("base", ROOT, plan, QUICK), tmp_path / "base.log")
    with pytest.raises(GateError, match=r"base: serbench run failed: .*no-such-backend"):
        one_shot.measure(tmp_path / "round-1")


def test_a_one_shot_round_past_its_time_is_ended_and_leaves_nothing(monkeypatch, tmp_path: Path) -> None:
    """A run past the gate's limit gets SIGTERM and time to remove its temporary files."""
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    monkeypatch.setenv("TMPDIR", str(temporary))
    monkeypatch.setattr(measurers, "RUN_TIMEOUT_S", 10)
    revision = Revision("base", ROOT, Plan(list(BUILTINS), ["images-32"], ["micro"]), QUICK)
    with pytest.raises(GateError, match="took over 10 s"):
        OneShotMeasurer(revision, tmp_path / "base.log").measure(tmp_path / "round-1")
    assert sorted(p.name for p in temporary.iterdir()) == []


def test_an_unknown_ref_is_a_usage_error(monkeypatch, tmp_path, capsys) -> None:
    git(tmp_path, "init", "-q")
    (tmp_path / "f").write_text("x")
    git(tmp_path, "add", "f")
    git(tmp_path, "commit", "-qm", "one")
    monkeypatch.chdir(tmp_path)
    assert commands.main(["gate", "--base", "no-such-ref", "--out", str(tmp_path / "out")]) == 2
    assert "no-such-ref" in capsys.readouterr().err


def test_outside_a_git_repository_is_a_usage_error(monkeypatch, tmp_path, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    assert commands.main(["gate", "--base", "HEAD~1"]) == 2
    assert "git rev-parse" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("options", "valgrind", "rounds", "counted"),
    [
        ([], True, 10, True),  # --measure auto: counts where valgrind is
        ([], False, 15, False),  # and the clock alone where it is not
        (["--measure", "time"], True, 15, False),
        (["--measure", "instructions"], True, 0, True),  # micro (and ipc) counted: the counts alone
        (["--measure", "instructions", "--scenarios", "micro,memory"], True, 10, True),  # memory is timed
        (["--measure", "instructions"], False, 15, False),  # no counts: the clock alone, at full length
        (["--measure", "instructions", "--rounds", "3"], True, 3, True),
    ],
)
def test_fewer_timed_rounds_by_default_only_where_instructions_are_counted(
    monkeypatch, tmp_path, options, valgrind, rounds, counted
) -> None:
    git(tmp_path, "init", "-q")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(instructions, "cannot_launch", lambda: None if valgrind else "no valgrind here")
    asked = {}

    def measure(repo, base_ref, plan, profile, rounds, out, log, counting, runtimes, stopping):
        asked.update(rounds=rounds, counted=counting is not None)
        raise GateError("stop here")

    monkeypatch.setattr(gate, "measure", measure)
    assert commands.main(["gate", "--base", "HEAD", "--out", str(tmp_path / "out"), *options]) == 2
    assert asked == {"rounds": rounds, "counted": counted}


def test_without_rounds_the_gate_is_its_counts_and_without_counts_it_says_so(monkeypatch, tmp_path) -> None:
    plan = Plan(["pickle"], ["text-sonnet"], ["micro"])
    counted = [doc([rec({"encode_instructions": metric([100.0], "count")}, side)]) for side in ("a", "b")]
    monkeypatch.setattr(
        gate, "serbench_code", lambda repo, ref, log: contextlib.nullcontext((tmp_path, tmp_path))
    )
    monkeypatch.setattr(gate, "fresh_rounds", lambda *args: pytest.fail("no rounds were asked for"))
    monkeypatch.setattr(gate, "count_layouts", lambda revisions, out, log: counted)
    assert gate.measure(None, None, plan, QUICK, 0, tmp_path, print, (plan, QUICK)) == tuple(counted)
    monkeypatch.setattr(gate, "count_layouts", lambda revisions, out, log: None)  # a base that cannot count
    with pytest.raises(GateError, match="nothing measured"):
        gate.measure(None, None, plan, QUICK, 0, tmp_path, print, (plan, QUICK))


def test_gate_end_to_end_in_a_fresh_clone(monkeypatch, tmp_path, capsys) -> None:
    """Clone, commit a backend, commit a change that adds a frame; ``gate --base HEAD~1``
    runs each revision's own code and fails on the extra frame."""
    clone = tmp_path / "clone"
    clone_working_tree(clone)
    for version, source in (("base", BASE_BACKEND), ("head", HEAD_BACKEND)):
        (clone / "gate_e2e_backend.py").write_text(source)
        git(clone, "add", "gate_e2e_backend.py")
        git(clone, "commit", "-qm", f"{version} backend")
    base_commit, head_commit = git(clone, "rev-parse", "HEAD~1"), git(clone, "rev-parse", "HEAD")
    monkeypatch.chdir(clone)
    monkeypatch.setenv(PADDED, "1")
    args = ["--backends", "gate_e2e_backend:make", "--workloads", "text-sonnet", "--rounds", "2"]
    args += ["--measure", "time"]  # counting is tested apart: valgrind would add a minute here
    code = commands.main(["gate", "--base", "HEAD~1", *args])  # default --out: relative to the clone
    printed = capsys.readouterr().out
    (out,) = (clone / "reports").glob("gate-*")
    assert f"gate report: {out.resolve()}" in printed

    assert code == 1
    frames_line = next(line for line in printed.splitlines() if " frames " in line)
    assert frames_line.startswith("REGRESSION") and "exact" in frames_line
    assert f"serbench gate --base {base_commit[:12]} --scenarios micro" in printed
    base, head = (results.load(out / f"{side}.json") for side in ("base", "head"))
    # each side ran its own revision's serbench (the commit comes from serbench's own location)
    assert base.environment.git_commit == base_commit
    assert head.environment.git_commit == head_commit
    (record,) = head.records
    assert record.metrics["encode_s"].rounds == [record.info.samples] * 2
    summary = (out / "summary.md").read_text()
    assert "frames" in summary
    assert printed.startswith("measured by: the wall clock (2 paired rounds)") and "measured by:" in summary
    assert git(clone, "worktree", "list", "--porcelain").count("worktree ") == 1  # the temporary one is gone


@pytest.mark.skipif(instructions.cannot_launch() is not None, reason="valgrind is not installed")
def test_a_terminated_gate_leaves_no_process_no_worktree_and_no_file_behind(tmp_path: Path) -> None:
    """SIGTERM while the counting runs count, after the rounds: exit 143, every process gone,
    nothing left in the temporary folder (worktree, zygotes, dump folders, valgrind's FIFOs)."""
    clone = tmp_path / "clone"
    clone_working_tree(clone)
    options = "--measure instructions --rounds 1 --backends msgspec-frombuffer --workloads text-sonnet"
    command = [sys.executable, "-m", "serbench", "gate", "--base", "HEAD", *options.split()]
    command += ["--out", str(tmp_path / "out")]
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    # this tree's gate, in the clone, with a temporary folder of its own
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONSAFEPATH": "1", "TMPDIR": str(temporary)}
    gate_proc = subprocess.Popen(
        command, cwd=clone, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    try:
        root = psutil.Process(gate_proc.pid)
        deadline = time.monotonic() + 300  # a gate that never reaches its counting fails, not hangs
        while not any("valgrind" in command for _, command in _alive(root.children(recursive=True))):
            assert gate_proc.poll() is None, gate_proc.stderr.read()
            assert time.monotonic() < deadline, "no counting run started within 300 s"
            time.sleep(0.1)
        descendants = root.children(recursive=True)
        gate_proc.terminate()
        assert gate_proc.wait(timeout=60) == EXIT_TERMINATED
    finally:
        kill_tree(gate_proc.pid)
    assert not _alive(descendants)
    assert "interrupted" in gate_proc.stderr.read()
    assert git(clone, "worktree", "list", "--porcelain").count("worktree ") == 1
    assert sorted(p.name for p in temporary.iterdir()) == []


def _alive(procs: list[psutil.Process]) -> list[tuple[psutil.Process, str]]:
    """Those of ``procs`` still running (not gone, not a zombie), with their command lines."""
    alive = []
    for proc in procs:
        with contextlib.suppress(psutil.NoSuchProcess):  # a process gone or a zombie by now, too
            if proc.status() != psutil.STATUS_ZOMBIE:
                alive.append((proc, " ".join(proc.cmdline())))
    return alive


class Counting:
    """A stand-in backend that counts its calls."""

    name = "counting"

    def __init__(self) -> None:
        self.calls = {"encode": 0, "decode": 0}

    def encode(self, obj: object) -> list[bytes]:
        self.calls["encode"] += 1
        return [b"x"]

    def decode(self, frames: list, type_: type) -> object:
        self.calls["decode"] += 1
        return type_()


@pytest.mark.parametrize(("factor", "extra"), [(1.0, 0), (1.10, 10), (1.25, 25), (2.0, 100)])
def test_slowed_does_factor_times_the_work_per_operation(factor: float, extra: int) -> None:
    inner = Counting()
    slowed = testing.Slowed(inner, factor)
    for _ in range(100):  # a round trip: the two operations' credits must not mix
        slowed.decode(slowed.encode(None), dict)
    assert inner.calls == {"encode": 100 + extra, "decode": 100 + extra}


def test_slowed_refuses_to_speed_up_and_is_reachable_by_dotted_path() -> None:
    with pytest.raises(ValueError):
        testing.Slowed(Counting(), 0.9)
    backend = get_serializer("serbench.testing:slowed:base=pickle,factor=1.5")
    assert backend.factor == 1.5 and backend.inner.name == "pickle"
