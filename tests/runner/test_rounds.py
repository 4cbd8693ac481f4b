"""Interleaved rounds: an interleaved scenario's cases are measured round by round, every backend of
a group in turn, and each case's visits merged into one record (``serbench.runner.visits``)."""

from __future__ import annotations

import dataclasses
import math
import os
from pathlib import Path
from typing import TypeVar

import numpy as np
import pytest

from serbench.model import metrics, results
from serbench.model.profiles import PROFILES, Profile
from serbench.model.results import Backend, Case
from serbench.runner import matrix as runner
from serbench.runner import protocol
from serbench.runner.matrix import Plan, execute, work
from serbench.runner.visits import Visit, merged, visit_order
from serbench.runtime.isolation import run_isolated
from serbench.scenarios import SCENARIOS, Outcome, Scenario, micro
from serbench.scenarios.ipc import MORE_VISITS, Ipc, settings_for
from serbench.workloads import get_workload

QUICK3 = dataclasses.replace(PROFILES["quick"], rounds=3)
BACKENDS = ["pickle", "msgspec-frombuffer", "flat-mmk"]


def test_a_group_is_visited_round_robin_with_rotation_and_a_rate_asked_for_stays_whole() -> None:
    """A group of requests, text at its default rate as payload one at a time, is visited at
    least ``Ipc.min_rounds`` times, whatever fewer the profile asks, and a payload, small or
    large, ``MORE_VISITS`` times; a rate or a concurrency asked for is an offered load, measured
    whole."""
    assert QUICK3.rounds < Ipc.min_rounds < MORE_VISITS
    plan = Plan(BACKENDS, ["text-sonnet", "images-1", "images-32"], ["ipc"])
    a, b, c = BACKENDS

    def group(workload: str, rounds: int) -> list[Visit]:
        order = [[a, b, c], [b, c, a], [c, a, b]]
        return [
            Visit(Case("ipc", backend, workload, transport="ipc"), r, rounds)
            for r in range(rounds)
            for backend in order[r % 3]
        ]

    expected = [*group("text-sonnet", Ipc.min_rounds), *group("images-1", MORE_VISITS)]
    assert visit_order(plan.cases(), QUICK3) == [*expected, *group("images-32", MORE_VISITS)]
    for asked in ({"ipc_rates": (40.0,)}, {"ipc_max_concurrency": 2}):
        planned = visit_order(plan.cases(), QUICK3.with_options(**asked))
        assert planned == [Visit(case) for case in plan.cases()], asked


def test_without_rounds_in_memory_or_when_counting_each_case_is_one_visit() -> None:
    plan = Plan(BACKENDS[:2], ["images-1"], ["micro", "ipc", "memory"])
    one_round = dataclasses.replace(QUICK3, rounds=1)
    assert visit_order(plan.cases(), one_round) == [Visit(case) for case in plan.cases()]
    interleaved = [v for v in visit_order(plan.cases(), QUICK3) if v.rounds > 1]
    assert {v.case.scenario for v in interleaved} == {"micro", "ipc"}
    counting = QUICK3.with_options(measure="instructions")  # one valgrind process for the run
    assert [v for v in visit_order(plan.cases(), counting) if v.rounds > 1] == []


def test_micro_plans_more_rounds_and_takes_those_past_the_profiles_while_they_are_cheap() -> None:
    """Every micro case plans ``MORE_ROUNDS`` (never fewer than the profile asks); past the
    profile's rounds a case is visited again only while its visits took at most ``MORE_ROUNDS_S``."""
    plan = Plan(BACKENDS, ["text-sonnet", "images-4", "images-32"], ["micro"])
    assert QUICK3.rounds < micro.MORE_ROUNDS
    assert {v.rounds for v in visit_order(plan.cases(), QUICK3)} == {micro.MORE_ROUNDS}
    full = dataclasses.replace(QUICK3, rounds=micro.MORE_ROUNDS + 2)  # never fewer than asked
    assert {v.rounds for v in visit_order(plan.cases(), full)} == {micro.MORE_ROUNDS + 2}
    case, scenario, over = plan.cases()[0], SCENARIOS["micro"], micro.MORE_ROUNDS_S + 1
    assert scenario.revisit(case, QUICK3, QUICK3.rounds - 1, over)  # the profile's rounds: always
    assert not scenario.revisit(case, QUICK3, QUICK3.rounds, over)
    assert scenario.revisit(case, QUICK3, micro.MORE_ROUNDS - 1, micro.MORE_ROUNDS_S)


def test_a_visit_measures_its_share_of_the_requests() -> None:
    whole = settings_for(QUICK3, get_workload("images-4"))
    visit = settings_for(dataclasses.replace(QUICK3, split=3), get_workload("images-4"))
    counts = (whole.num_prompts, whole.max_prompts, whole.floor)
    assert (visit.num_prompts, visit.max_prompts, visit.floor) == tuple(math.ceil(n / 3) for n in counts)
    assert visit.budget_s == pytest.approx(whole.budget_s / 3)
    assert settings_for(QUICK3, get_workload("text-sonnet")).num_prompts == 50


def test_each_visit_of_a_quick_payload_case_sends_at_least_two_requests() -> None:
    """An in-band request at images-32 takes about a second, so the time budget grants it only
    the minimum: one a visit left pickle's TTFT a mean of six requests, whose ratios moved by
    more than 10 % between two runs. The minimum is two a visit, whatever the budget says."""
    visit = settings_for(dataclasses.replace(QUICK3, split=Ipc.min_rounds), get_workload("images-32"))
    assert visit.num_prompts >= 2
    assert not visit.more(sent=1, elapsed_s=visit.budget_s)  # the budget alone would stop at one


class Counting(Scenario):
    """A scenario of the test: two samples a visit, counted per backend in ``folder``; the
    backend ``failing`` raises in its visit ``fail_at`` (from 0)."""

    name = "counting"
    description = "counts its visits"
    interleaved = True
    folder: Path
    failing = "msgspec-frombuffer"
    fail_at = 1

    def run(self, case: Case, profile: Profile) -> Outcome:
        tally = self.folder / case.backend
        visit = len(tally.read_text()) if tally.exists() else 0
        tally.write_text("v" * (visit + 1))
        if case.backend == self.failing and visit == self.fail_at:
            raise RuntimeError(f"visit {visit} fails on purpose")
        return Outcome({"wire_bytes": metrics.measured("wire_bytes", [100.0 + visit, 200.0 + visit])})


S = TypeVar("S", bound=Counting)


def _registered(scenario: S, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> S:
    """``scenario`` registered while a test runs (the zygote forks after), counting in ``tmp_path``."""
    scenario.folder = tmp_path / "visits"
    scenario.folder.mkdir()
    monkeypatch.setitem(SCENARIOS, scenario.name, scenario)
    return scenario


@pytest.fixture
def counting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Counting:
    return _registered(Counting(), tmp_path, monkeypatch)


def _trusted(specs: list[str]) -> dict[str, Backend]:
    """Checked backends without the conformance suite: the visits are what is under test."""
    return {spec: Backend(name=spec, safe=True) for spec in specs}


def _execute(plan: Plan, path: Path, on_case=None) -> results.ResultsFile:
    return execute(plan, QUICK3, path, ["run"], on_case, check=_trusted)


def test_visits_merge_into_one_record_and_a_failing_round_fails_only_its_case(
    tmp_path: Path, counting: Counting
) -> None:
    path = tmp_path / "results.json"
    seen: list[list[tuple[str, int | None]]] = []

    def on_case(index: int, total: int, case: Case) -> None:
        data = results.load(path)
        assert data.complete is False
        seen.append([(r.backend, r.rounds) for r in data.records])

    run = _execute(Plan(BACKENDS, ["images-1"], ["counting"]), path, on_case)
    by_backend = {r.backend: r for r in results.load(path).records}
    assert results.load(path).complete is True
    assert [r.backend for r in run.results.records] == BACKENDS  # one record per case, in plan order
    for backend in ("pickle", "flat-mmk"):
        rec = by_backend[backend]
        assert rec.error is None and rec.rounds == 3
        measured = rec.metrics["wire_bytes"]
        assert measured.rounds == [2, 2, 2]
        assert measured.values == [100.0, 200.0, 101.0, 201.0, 102.0, 202.0]
    failed = by_backend["msgspec-frombuffer"]
    assert failed.error.startswith("failed in 1 of 2 rounds")
    assert "visit 1 fails on purpose" in failed.error
    assert failed.rounds == 2 and failed.metrics == {}
    # the failed case is visited no more; the others ran all three rounds
    tallies = {p.name: len(p.read_text()) for p in counting.folder.iterdir()}
    assert tallies == {"pickle": 3, "msgspec-frombuffer": 2, "flat-mmk": 3}
    # the file after each visit: the visited cases' records, their rounds so far
    assert seen[:4] == [
        [],
        [("pickle", 1)],
        [("pickle", 1), ("msgspec-frombuffer", 1)],
        [("pickle", 1), ("msgspec-frombuffer", 1), ("flat-mmk", 1)],
    ]
    assert seen[-1] == [("pickle", 2), ("msgspec-frombuffer", 2), ("flat-mmk", 3)]


def test_a_case_its_scenario_revisits_no_more_keeps_the_rounds_it_has(
    tmp_path: Path, counting: Counting, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``Scenario.revisit`` ends one case's visits; the others of its group go on."""
    counting.failing = ""
    asked: list[tuple[str, int]] = []

    def revisit(case: Case, profile: Profile, visited: int, spent_s: float) -> bool:
        asked.append((case.backend, visited))
        assert spent_s >= 0
        return case.backend != "pickle" or visited < 2

    monkeypatch.setattr(counting, "revisit", revisit)
    run = _execute(Plan(BACKENDS, ["images-1"], ["counting"]), tmp_path / "results.json")
    assert {r.backend: r.rounds for r in run.results.records} == {
        "pickle": 2,
        "msgspec-frombuffer": 3,
        "flat-mmk": 3,
    }
    assert all(r.error is None for r in run.results.records)
    assert run.results.by_case()[Case("counting", "pickle", "images-1")].metrics["wire_bytes"].rounds == [
        2,
        2,
    ]
    assert ("pickle", 2) in asked and ("pickle", 0) not in asked  # a first visit is always taken


def test_a_case_failing_its_first_visit_keeps_that_visits_error(tmp_path: Path, counting: Counting) -> None:
    counting.fail_at = 0
    run = _execute(Plan(BACKENDS[:2], ["images-1"], ["counting"]), tmp_path / "results.json")
    failed = run.results.by_case()[Case("counting", "msgspec-frombuffer", "images-1")]
    assert "visit 0 fails on purpose" in failed.error and not failed.error.startswith("failed in")
    assert failed.rounds is None
    assert len((counting.folder / "msgspec-frombuffer").read_text()) == 1
    assert run.results.by_case()[Case("counting", "pickle", "images-1")].rounds == 3


def test_an_interrupted_run_keeps_the_rounds_so_far_and_stays_incomplete(
    tmp_path: Path, counting: Counting
) -> None:
    path = tmp_path / "results.json"
    counting.failing = ""

    def interrupt_at_the_fifth_visit(index: int, total: int, case: Case) -> None:
        if index == 4:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _execute(Plan(BACKENDS, ["images-1"], ["counting"]), path, interrupt_at_the_fifth_visit)
    data = results.load(path)
    assert data.complete is False
    # visits so far: pickle, msgspec-frombuffer, flat-mmk; then round 2 began with msgspec-frombuffer
    assert {r.backend: r.rounds for r in data.records} == {
        "pickle": 1,
        "msgspec-frombuffer": 2,
        "flat-mmk": 1,
    }
    twice = data.by_case()[Case("counting", "msgspec-frombuffer", "images-1")]
    assert twice.metrics["wire_bytes"].rounds == [2, 2]


class _Client:
    """The gate's end of a measurer's channel, scripted: ``answers`` in turn, then closed."""

    def __init__(self, answers: list[object]) -> None:
        self.answers, self.sent = answers, []

    def send(self, message: object) -> None:
        self.sent.append(message)

    def receive(self) -> object:
        return self.answers.pop(0) if self.answers else None


def test_the_gates_measurer_measures_each_case_whole(tmp_path: Path, counting: Counting) -> None:
    counting.failing = ""
    case = Case("counting", "pickle", "images-1")
    checked = protocol.Backends(_trusted(BACKENDS[:2]))
    client = _Client([checked, protocol.Measure(str(tmp_path / "a"), case)])
    work(Plan(BACKENDS[:2], ["images-1"], ["counting"]), QUICK3, ["run"], client, ask_backends=True)
    (rec,) = results.load(tmp_path / "a" / "results.json").records
    assert rec.case == case and rec.rounds is None  # one visit: the gate pairs its own rounds
    assert rec.metrics["wire_bytes"].values == [100.0, 200.0]
    assert isinstance(client.sent[-1], protocol.Measured)


def _ipc_visit(samples: dict[str, list[float]]) -> results.Record:
    """One ipc visit's record of these samples, with its info as the scenario makes it."""
    measured = {name: metrics.measured(name, values) for name, values in samples.items()}
    info = results.IpcInfo(
        payload_bytes=1,
        serving=results.Serving.of(samples["ttft_s"], samples["itl_s"], samples["e2e_s"]),
        duration_s=sum(samples["ttft_s"]),
        output_tokens=len(samples["ttft_s"]),
        settings={},
        local_engine=True,
        **results.ipc_ratios(measured),
    )
    return results.record(Case("ipc", "pickle", "images-4", transport="ipc"), metrics=measured, info=info)


def test_merged_visits_summarize_every_rounds_latencies_as_the_serving_benchmark_does() -> None:
    def visit(ttft: list[float]) -> results.Record:
        return _ipc_visit({"ttft_s": ttft, "itl_s": ttft, "e2e_s": ttft, "floor_rtt_s": [0.001]})

    first, second = [0.010, 0.012, 0.011], [0.030, 0.031, 0.029]
    combined = results.merge(
        [results.Results(records=[visit(first)]), results.Results(records=[visit(second)])]
    )
    (rec,) = combined.records
    assert rec.info.serving == results.Serving.of(first + second, first + second, first + second)
    assert rec.info.serving.ttft.median_ms == pytest.approx(20.5)  # both rounds, not the first alone
    # the benchmark's duration and output tokens: every round's load
    assert rec.info.duration_s == pytest.approx(sum(first + second))
    assert rec.info.output_tokens == len(first + second)


def test_merged_visits_ratios_are_of_every_rounds_medians_not_the_first_visits() -> None:
    """TTFT and ingress over the floor, the payload rate over its references: each describes the
    merged samples beside it."""

    def visit(ttft: list[float], unix: list[float]) -> results.Record:
        times = {name: ttft for name in ("ttft_s", "itl_s", "e2e_s", "ingress_s")}
        rates = {"payload_gb_per_s": [1.0] * 3, "unix_gb_per_s": unix, "memcpy_gb_per_s": [8.0] * 3}
        return _ipc_visit({**times, **rates, "floor_rtt_s": [0.001] * 3})

    first = visit([0.010, 0.011, 0.012], [0.4, 0.4, 0.4])
    combined = results.merge(
        [results.Results(records=[first]), results.Results(records=[visit([0.030, 0.031, 0.032], [3.3] * 3)])]
    )
    (rec,) = combined.records
    assert first.info.ttft_over_floor == pytest.approx(11.0)
    assert rec.info.ttft_over_floor == pytest.approx(21.0)  # the median of six: (12 + 30) / 2 ms
    assert rec.info.ingress_over_floor == pytest.approx(21.0)
    assert first.info.payload_vs_unix == pytest.approx(2.5)
    assert rec.info.payload_vs_unix == pytest.approx(1 / 1.85)
    assert rec.info.payload_vs_memcpy == pytest.approx(1 / 8.0)


def test_a_p99_of_a_cases_visits_is_taken_over_all_their_requests() -> None:
    """Three visits of four requests each: none has a p99 of its own (fewer than five), the merged
    record has the p99 of all twelve — not the median of per-visit values."""
    case = Case("ipc", "pickle", "images-4", transport="ipc")
    shares = [[0.1, 0.2, 0.3, 0.4], [0.5, 0.6, 0.7, 0.8], [0.9, 1.0, 1.1, 5.0]]
    visited = [results.record(case, metrics={"ttft_s": metrics.measured("ttft_s", s)}) for s in shares]
    whole = merged(visited)
    everything = [t for share in shares for t in share]
    assert whole.metrics["ttft_p99_s"].values == [pytest.approx(float(np.percentile(everything, 99)))]
    assert whole.metrics["ttft_s"].rounds == [4, 4, 4]
    assert "ttft_p99_s" not in merged(visited[:1]).metrics  # four samples: no p99


class Together(Counting):
    """``Counting`` with each round of its group measured in one child: each case's visit notes
    that child's pid; ``crashing`` aborts the child it runs in."""

    name = "together"
    together = True
    crashing = ""

    def run(self, case: Case, profile: Profile) -> Outcome:
        with (self.folder / f"{case.backend}.pid").open("a") as pids:
            pids.write(f"{os.getpid()}\n")
        if case.backend == self.crashing:
            os.abort()
        return dataclasses.replace(super().run(case, profile), seconds=0.25)

    def run_together(self, cases: list[Case], profile: Profile) -> list[Outcome | str]:
        outcomes: list[Outcome | str] = []
        for case in cases:
            try:
                outcomes.append(self.run(case, profile))
            except RuntimeError as exc:
                outcomes.append(str(exc))
        return outcomes


@pytest.fixture
def together(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Together:
    return _registered(Together(), tmp_path, monkeypatch)


def _pids(scenario: Counting, backend: str) -> list[int]:
    return [int(line) for line in (scenario.folder / f"{backend}.pid").read_text().split()]


def test_a_group_measured_together_shares_one_child_a_round_and_a_failing_backend_fails_alone(
    tmp_path: Path, together: Together
) -> None:
    run = _execute(Plan(BACKENDS, ["images-1"], ["together"]), tmp_path / "results.json")
    by_backend = {r.backend: r for r in run.results.records}
    pickle, flat = _pids(together, "pickle"), _pids(together, "flat-mmk")
    assert len(set(pickle)) == 3 and pickle == flat  # one child a round, both backends in it
    assert _pids(together, "msgspec-frombuffer") == pickle[:2]  # failed in its second round, alone
    assert "visit 1 fails on purpose" in by_backend["msgspec-frombuffer"].error
    for backend in ("pickle", "flat-mmk"):
        assert by_backend[backend].error is None and by_backend[backend].rounds == 3
        assert by_backend[backend].duration_s == pytest.approx(0.75)  # its own seconds, not the child's


def test_a_child_of_a_group_that_crashes_measures_each_backend_again_alone(
    tmp_path: Path, together: Together
) -> None:
    together.failing, together.crashing = "", "flat-mmk"
    run = _execute(Plan(BACKENDS, ["images-1"], ["together"]), tmp_path / "results.json")
    by_backend = {r.backend: r for r in run.results.records}
    assert "crashed (SIGABRT)" in by_backend["flat-mmk"].error
    assert by_backend["flat-mmk"].rounds is None  # its first visit failed: no more
    for backend in ("pickle", "msgspec-frombuffer"):
        assert by_backend[backend].error is None and by_backend[backend].rounds == 3
    # round 1: the three together (crashed), then each alone; rounds 2 and 3: the two together
    pickle = _pids(together, "pickle")
    assert len(set(pickle)) == 4 and pickle[2:] == _pids(together, "msgspec-frombuffer")[2:]


def test_micro_times_a_rounds_backends_in_one_child_and_a_backend_that_raises_fails_alone() -> None:
    """The real micro: each backend's timings marked as taken in turn, with its own seconds."""
    workload = "images-8:profile=llava"
    backends = ["msgspec-frombuffer", "misbehaving_backends:misbehaving:mode=raise", "numpy-intermediate"]
    cases = [Case("micro", backend, workload) for backend in backends]
    profile = dataclasses.replace(QUICK3, samples=3, min_sample_s=0.0005, split=3)
    first, failed, last = run_isolated(runner.run_together, (cases, profile), 120)
    assert isinstance(failed, str) and "misbehaving backend raised on purpose" in failed
    for outcome in (first, last):
        roundtrip = outcome.metrics["roundtrip_s"]
        assert roundtrip.in_turn and roundtrip.n == profile.share(profile.samples)
        assert not outcome.metrics["wire_bytes"].in_turn  # a count, not a timing
        assert outcome.seconds is not None and outcome.seconds > 0


def test_a_round_whose_backends_are_all_unsupported_measures_nothing_together(
    together: Together, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(Together, "unsupported", lambda self, case, profile: "not here")

    def refuse(self, cases, profile):
        raise AssertionError(f"asked to measure {cases}")

    monkeypatch.setattr(Together, "run_together", refuse)
    cases = [Case("together", backend, "images-1") for backend in BACKENDS]
    assert runner.run_together(cases, QUICK3) == [runner.Unsupported("not here")] * len(cases)


class Planned(Counting):
    """``Counting`` planning six rounds where the profile asks three: room to stop early."""

    name = "planned"
    min_rounds = 6
    failing = ""


@pytest.fixture
def planned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Planned:
    return _registered(Planned(), tmp_path, monkeypatch)


def _stopped_at(
    tmp_path: Path, settled_from: int, profile: Profile = QUICK3, closed: frozenset[str] = frozenset()
) -> tuple[dict[str, int], list]:
    """Each backend's visits under a rule that leaves every backend but the ``closed`` ones open
    until every record has ``settled_from`` visits, then none, and the rounds of the records each
    call was asked with, beside the growth it was handed (the rounds planned over those made)."""
    asked: list[tuple[list[int | None], float]] = []

    def still_open(group: results.Results, growth: float) -> frozenset[str]:
        asked.append(([rec.rounds for rec in group.records], growth))
        assert set(group.backends) == set(BACKENDS)  # the run's backends, for which are safe
        if all((rec.rounds or 1) >= settled_from for rec in group.records):
            return frozenset()
        return frozenset(BACKENDS) - closed

    plan = Plan(BACKENDS, ["images-1"], ["planned"])
    run = execute(plan, profile, tmp_path / "results.json", ["run"], check=_trusted, stop_rule=still_open)
    return {r.backend: r.rounds for r in run.results.records}, asked


def test_a_settled_group_is_visited_no_more_but_never_before_the_profiles_rounds(
    tmp_path: Path, planned: Planned
) -> None:
    """The rule is asked once a round from the profile's rounds on, of every case's visits so
    far; a group it finds settled stops there, and one it never does takes every round planned."""
    assert QUICK3.rounds < Planned.min_rounds
    visits, asked = _stopped_at(tmp_path / "four", settled_from=4)
    assert visits == dict.fromkeys(BACKENDS, 4)
    planned_rounds = Planned.min_rounds
    assert asked == [([3, 3, 3], planned_rounds / 3), ([4, 4, 4], planned_rounds / 4)]
    tallies = {p.name: len(p.read_text()) for p in planned.folder.iterdir()}
    assert tallies == dict.fromkeys(BACKENDS, 4)
    visits, asked = _stopped_at(tmp_path / "at-once", settled_from=0)  # settled from the first
    assert visits == dict.fromkeys(BACKENDS, QUICK3.rounds) and [a for a, _ in asked] == [[3, 3, 3]]
    visits, asked = _stopped_at(tmp_path / "never", settled_from=99)
    assert visits == dict.fromkeys(BACKENDS, Planned.min_rounds) and len(asked) == 3


def test_a_backend_whose_comparison_is_closed_is_visited_no_more_while_the_others_go_on(
    tmp_path: Path, planned: Planned
) -> None:
    """pickle's comparison closed from the profile's rounds on: it keeps its three visits, the
    other two take every round planned, and each visit is still its own child (the tallies)."""
    visits, _ = _stopped_at(tmp_path, settled_from=99, closed=frozenset({"pickle"}))
    assert visits == {"pickle": QUICK3.rounds, "msgspec-frombuffer": 6, "flat-mmk": 6}
    tallies = {p.name: len(p.read_text()) for p in planned.folder.iterdir()}
    assert tallies == {"pickle": QUICK3.rounds, "msgspec-frombuffer": 6, "flat-mmk": 6}


def test_a_backend_once_closed_stays_closed_though_the_rule_names_it_again(
    tmp_path: Path, planned: Planned
) -> None:
    """Its visits stay its group's first rounds, which the analysis pairs with the others'."""
    calls: list[int] = []

    def still_open(group: results.Results, growth: float) -> frozenset[str]:
        calls.append(len(calls))
        return frozenset(BACKENDS) - ({"pickle"} if len(calls) == 1 else set())

    plan = Plan(BACKENDS, ["images-1"], ["planned"])
    run = execute(plan, QUICK3, tmp_path / "results.json", ["run"], check=_trusted, stop_rule=still_open)
    assert {r.backend: r.rounds for r in run.results.records} == {
        "pickle": QUICK3.rounds,
        "msgspec-frombuffer": 6,
        "flat-mmk": 6,
    }


def test_the_full_profile_takes_every_round_planned_whatever_the_rule(
    tmp_path: Path, planned: Planned
) -> None:
    full = dataclasses.replace(QUICK3, sequential=False)
    assert PROFILES["quick"].sequential and not PROFILES["full"].sequential
    visits, asked = _stopped_at(tmp_path, settled_from=0, profile=full)
    assert visits == dict.fromkeys(BACKENDS, Planned.min_rounds) and asked == []
