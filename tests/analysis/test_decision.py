"""The decision of a run (serbench.analysis.decision) on synthetic results documents: who is named, who
ties, who is set apart as unsafe, and how the terminal and the report show it (no timings)."""

from __future__ import annotations

import msgspec
import numpy as np
import pytest
from builders import BASE_S, doc, memory_info, metric, rec, samples
from scipy.stats import trim_mean

from serbench.analysis import decision, estimates, ranking
from serbench.analysis.summary import summarize_run
from serbench.model.results import Backend, Case, Record, Results, record
from serbench.model.stats import summarize
from serbench.present import terminal
from serbench.present.html import run_page

SAFE, UNSAFE = Backend(safe=True), Backend(safe=False)


def ipc_doc(factors: dict[str, float], safety: dict[str, Backend], workload: str = "images-4") -> Results:
    """One ipc case per backend on ``workload``: TTFT samples around ``factor`` (a seed each)."""
    records = [
        rec({"ttft_s": metric(samples(seed, factor))}, backend, workload, scenario="ipc", transport="ipc")
        for seed, (backend, factor) in enumerate(factors.items(), 1)
    ]
    data = doc(records)
    data.backends = {name: safety[name] for name in factors}
    return data


def only(data: Results) -> decision.Decision:
    (found,) = decision.decisions(data)
    return found


def chosen(found: decision.Decision) -> list[str]:
    return [s.row.backend for s in found.chosen]


@pytest.mark.parametrize(
    ("workload", "shape"),
    [
        ("text-sonnet", "text"),
        ("images-8", "few images"),
        ("images-9:profile=qwen2-vl", "many images"),
        ("outputs-1024:logprobs=5,layout=flat", "outputs"),
        ("tensor-4096", "tensor"),
        ("mine", "mine"),
    ],
)
def test_a_workload_spec_has_a_shape(workload: str, shape: str) -> None:
    assert decision.shape(workload) == shape


def test_a_clear_winner_is_named_alone_with_the_runner_up_set_apart() -> None:
    found = only(ipc_doc({"fast": 1.0, "slow": 1.5}, {"fast": SAFE, "slow": SAFE}))
    assert (found.shape, found.scenario, found.metric) == ("few images", "ipc", "ttft_s")
    assert chosen(found) == ["fast"] and not found.tie
    assert found.runner_up.row.backend == "slow"
    assert found.runner_up.estimate.ratio == pytest.approx(1.5, rel=0.02)
    assert found.runner_up.estimate.low > 1  # told apart by its interval
    why = "; ".join(decision.reasons(found, Results(records=[])))
    assert why.startswith("TTFT: fast median 10") and "n=60" in why and "next slow ×1.5" in why


def test_two_backends_within_noise_are_named_as_a_tie() -> None:
    found = only(ipc_doc({"a": 1.0, "b": 1.003, "c": 2.0}, {"a": SAFE, "b": SAFE, "c": SAFE}))
    assert sorted(chosen(found)) == ["a", "b"] and found.tie
    tied = found.chosen[1].estimate
    assert tied.low <= 1 <= tied.high
    assert found.runner_up.row.backend == "c"
    assert " = " in decision.chosen_text(found, Results(records=[]))


def test_a_faster_unsafe_backend_is_listed_apart_and_never_chosen() -> None:
    data = ipc_doc({"risky": 0.5, "ok": 1.0, "same": 1.002}, {"risky": UNSAFE, "ok": SAFE, "same": UNSAFE})
    found = only(data)
    assert chosen(found) == ["ok"]
    assert [s.row.backend for s in found.unsafe] == ["risky"]  # "same" is not faster beyond noise
    block = terminal.decision_block(summarize_run(data))
    assert "faster but unsafe: risky ×0.5" in block


def test_variants_are_not_candidates() -> None:
    safety = {"real": SAFE, "real:threshold=inf": SAFE}
    found = only(ipc_doc({"real": 1.0, "real:threshold=inf": 0.5}, safety))
    assert chosen(found) == ["real"] and found.runner_up is None


def test_a_shape_without_a_safe_backend_says_so() -> None:
    data = ipc_doc({"pickle": 1.0, "mystery": 0.9}, {"pickle": UNSAFE, "mystery": Backend()}, "outputs-8")
    found = only(data)
    assert found.chosen == [] and "no safe backend" in found.missing and "mystery" in found.missing
    assert "outputs (outputs-8)" in terminal.decision_block(summarize_run(data))
    assert "no safe backend measured" in terminal.decision_block(summarize_run(data))


def test_paired_rounds_tell_apart_what_unpaired_samples_cannot() -> None:
    """Rounds that visit every backend in turn: a slow phase hits both, and the pairs see b's 15 %."""
    phases = (1.0, 1.6, 0.7, 1.3, 0.9, 1.2)
    rng = np.random.default_rng(7)

    def phased(factor: float) -> list[float]:
        return [v * phase * factor for phase in phases for v in 1e-3 * rng.lognormal(0.0, 0.01, 10)]

    a, b = phased(1.0), phased(1.15)
    rounds = [10] * len(phases)

    def decided(rounds: list[int] | None) -> decision.Decision:
        data = ipc_doc({"a": 1.0, "b": 1.0}, {"a": SAFE, "b": SAFE})
        for r, values in zip(data.records, (a, b), strict=True):
            r.metrics["ttft_s"] = summarize(values, "s", rounds)
        return only(data)

    paired, unpaired = decided(rounds), decided(None)
    assert chosen(paired) == ["a"] and paired.runner_up.estimate.low > 1
    assert paired.runner_up.estimate.ratio == pytest.approx(1.15, rel=0.01)
    assert sorted(chosen(unpaired)) == ["a", "b"]  # the phases drown the 15 % without pairs


@pytest.mark.parametrize(
    ("scenario", "name", "margin"), [("ipc", "ttft_s", 0.10), ("micro", "roundtrip_s", 0.02)]
)
@pytest.mark.parametrize("beyond", [False, True])
def test_a_difference_within_the_metrics_practical_tie_is_a_tie_though_the_interval_excludes_one(
    scenario: str, name: str, margin: float, beyond: bool
) -> None:
    """A steady difference (every pair of rounds agrees: an interval well above 1) within the
    headline metric's ``Metric.practical_tie`` is still a tie, as two runs could not confirm it;
    beyond it, told apart. TTFT through processes ties within 10 %, micro's in-process 2 %."""
    factor = 1 + (1.6 if beyond else 0.6) * margin
    rng = np.random.default_rng(3)
    a = list(1e-3 * rng.lognormal(0.0, 0.002, 60))
    transport = "ipc" if scenario == "ipc" else None
    records = [
        rec(
            {name: summarize(values, "s", [10] * 6)},
            backend,
            "images-4",
            scenario=scenario,
            transport=transport,
        )
        for backend, values in (("a", a), ("b", [v * factor for v in a]))
    ]
    data = doc(records)
    data.backends = {"a": SAFE, "b": SAFE}
    found = only(data)
    assert found.metric == name
    assert chosen(found) == (["a"] if beyond else ["a", "b"])
    b = found.runner_up if beyond else found.chosen[1]
    assert b.estimate.low > 1.0 and b.estimate.ratio == pytest.approx(factor, rel=0.005)


@pytest.mark.parametrize(
    ("low", "high", "tie"),
    [
        (0.95, 1.20, True),  # holds 1
        (1.04, 1.30, True),  # excludes 1, its point (about 1.16) beyond 10 %, yet it reaches 1.04
        (1.11, 1.20, False),  # all of it beyond 10 %
        (0.80, 0.92, True),  # faster, reaching within 10 % (1 / 1.1 = 0.909)
        (0.80, 0.90, False),
    ],
)
def test_a_ratio_is_told_apart_only_where_its_whole_interval_lies_beyond_the_practical_tie(
    low: float, high: float, tie: bool
) -> None:
    """One edge, not two: a noisy run whose point ratio crossed the margin while its interval
    still reaches into it ties, as a quieter run of the same code would."""
    ratio = (low * high) ** 0.5
    assert ranking.tied("ttft_s", estimates.Estimate(ratio, low, high, 1)) is tie


def test_a_noisy_difference_beyond_the_tie_whose_interval_reaches_into_it_is_a_tie() -> None:
    """b reads 14 % slower in TTFT with an interval that excludes 1 but reaches within 10 %:
    a run cannot tell it from a difference under the practical tie, so b is named beside a.
    Without the noise the same 14 % is told apart."""
    rng = np.random.default_rng(3)
    a = list(1e-3 * rng.lognormal(0.0, 0.01, 60))

    def decided(noise: float) -> decision.Decision:
        b = [v * 1.14 * rng.lognormal(0.0, noise) for v in a]
        data = ipc_doc({"a": 1.0, "b": 1.0}, {"a": SAFE, "b": SAFE})
        for r, values in zip(data.records, (a, b), strict=True):
            r.metrics["ttft_s"] = summarize(values, "s", [10] * 6)
        return only(data)

    noisy, steady = decided(0.2), decided(0.001)
    estimate = noisy.chosen[1].estimate
    assert chosen(noisy) == ["a", "b"] and 1.0 < estimate.low < 1.10 < estimate.ratio
    assert chosen(steady) == ["a"] and steady.runner_up.estimate.low > 1.10


def test_the_tie_rule_names_a_metric_whose_practical_tie_is_its_own() -> None:
    assert decision.tie_rule(["fanout_s", "copies"]) == "unless the whole interval is more than 5% from 1"
    assert decision.tie_rule(["ttft_s"]) == "unless the whole interval is more than 10% from 1"
    assert decision.tie_rule(["roundtrip_s", "ttft_s", "copies"]).endswith(
        "more than 5% from 1 (encode + decode max(2%, 1% of a payload copy), TTFT 10%)"
    )


def micro_doc(workload: str, copy_s: float | None) -> Results:
    """micro's round trip of three safe backends, the second 10 % and the third 60 % slower than
    the first with narrow intervals, and (unless None) one copy of the payload beside each."""
    records = []
    for seed, (backend, factor) in enumerate({"a": 1.0, "b": 1.1, "c": 1.6}.items(), 1):
        measured = {"roundtrip_s": metric(samples(seed, factor, sigma=0.005))}
        if copy_s is not None:
            measured["copy_s"] = metric(samples(seed + 10, copy_s / BASE_S, sigma=0.005))
        records.append(rec(measured, backend, workload))
    data = doc(records)
    data.backends = dict.fromkeys("abc", SAFE)
    return data


def test_a_micro_difference_under_one_hundredth_of_a_payload_copy_is_a_tie() -> None:
    """b's 10 % is told apart without a payload (the 2 % tie) and tied beside a copy 30x the
    best's round trip, whose 1 % is 30 %; c's 60 % is told apart either way. The ranking ties
    by the same margin."""
    bare = only(micro_doc("text-sonnet", None))
    assert chosen(bare) == ["a"] and bare.runner_up.row.backend == "b" and bare.margin == 0.02
    beside = only(micro_doc("images-4", 30 * BASE_S))
    assert chosen(beside) == ["a", "b"] and beside.runner_up.row.backend == "c"
    assert beside.margin == pytest.approx(0.3, rel=0.02)
    assert "tied within 30%: 1% of a payload copy" in decision.reasons(beside, Results(records=[]))
    both = micro_doc("images-4", 30 * BASE_S)
    both.records += ipc_doc(dict.fromkeys("abc", 1.0), dict.fromkeys("abc", SAFE)).records
    summary = summarize_run(both)  # its rule names both margins; the block fits its width
    assert "1% of a payload" in summary.tie_rule and "TTFT 10%" in summary.tie_rule
    block = terminal.decision_block(summary)
    assert max(map(len, block.splitlines())) <= terminal.DECISION_WIDTH
    for copy_s, tied_with_a in ((None, False), (30 * BASE_S, True)):
        data = micro_doc("images-4", copy_s)
        data.records.append(rec({"roundtrip_s": metric(samples(9, 50.0))}, "pickle", "images-4"))
        places = {r.backend: r.place for r in ranking.ranking(data, "micro")}
        assert (places["b"] == places["a"] == "1=") is tied_with_a and places["c"] == "3"


def test_the_text_block_fits_100_columns_and_ends_the_summary() -> None:
    names = {f"a-rather-long-backend-name-number-{i}": 1 + i / 1000 for i in range(6)}
    data = ipc_doc(names, dict.fromkeys(names, SAFE))
    block = terminal.decision_block(summarize_run(data))
    assert block.count(" = ") >= 2  # a tie of several long names, packed
    assert max(map(len, block.splitlines())) <= terminal.DECISION_WIDTH
    assert terminal.render(summarize_run(data)).endswith(block)


def test_memory_decides_on_workloads_with_a_payload_only() -> None:
    def memory(backend: str, workload: str, peak: float, payload: int) -> Record:
        info = memory_info(payload)
        measured = {"copies": summarize([peak / 3e8], "ratio")}
        return record(Case("memory", backend, workload, "ipc"), metrics=measured, info=info)

    text_cases = [memory(b, "text-sonnet", 5e5, 0) for b in ("x", "y")]  # copies of no payload
    data = doc([*text_cases, memory("x", "images-32", 3.09e8, 3e8), memory("y", "images-32", 3.08e8, 3e8)])
    data.backends = {"x": SAFE, "y": SAFE}
    by_shape = {d.shape: d for d in decision.decisions(data)}
    assert "no tensor payload" in by_shape["text"].missing
    assert sorted(chosen(by_shape["many images"])) == ["x", "y"]  # one reading each, within 1 %


def test_the_run_page_opens_with_the_decision() -> None:
    data = ipc_doc({"fast": 1.0, "slow": 1.5, "pickle": 0.5}, {"fast": SAFE, "slow": SAFE, "pickle": UNSAFE})
    page = run_page.render(summarize_run(data), "x.json")
    assert "<figure" in page
    assert 0 < page.index('id="decision"') < page.index("<figure")
    assert page.index('id="decision"') < page.index('id="environment"')
    assert "faster but unsafe" in page and "Decision: what to use" in page


def test_each_worker_count_is_decided_apart() -> None:
    """More workers take longer for every backend: a count is a setting, not a choice."""
    records = [
        record(
            Case("fanout", backend, "images-4", "shm-ring", workers),
            metrics={"fanout_s": metric(samples(workers * 10 + seed, factor * workers))},
        )
        for seed, (backend, factor) in enumerate({"a": 1.0, "b": 1.5}.items())
        for workers in (1, 4)
    ]
    data = doc(records)
    data.backends = {"a": SAFE, "b": SAFE}
    found = decision.decisions(data)
    assert [(d.where, chosen(d)) for d in found] == [("fanout workers=1", ["a"]), ("fanout workers=4", ["a"])]
    assert all(d.runner_up.row.backend == "b" for d in found)
    block = terminal.decision_block(summarize_run(data))
    assert "  fanout workers=1 a" in block and max(map(len, block.splitlines())) <= terminal.DECISION_WIDTH


def _two_modes(low_share: int, seed: int) -> list[float]:
    """30 requests in six visits of five, each near 30 ms or 38 ms (an ipc payload case on the
    shared VM), ``low_share`` of them in the faster mode, spread over the visits."""
    rng = np.random.default_rng(seed)
    levels = [30e-3 if i < low_share else 38e-3 for i in range(30)]
    rng.shuffle(levels)
    return [level * rng.lognormal(0.0, 0.01) for level in levels]


def _decided(
    scenario: str, name: str, a: list[float], b: list[float], rounds: list[int]
) -> decision.Decision:
    """The decision between backends "a" and "b", both safe, of ``scenario`` at images-4."""
    transport = "ipc" if scenario == "ipc" else None
    records = [
        rec(
            {name: summarize(values, "s", rounds)},
            backend,
            "images-4",
            scenario=scenario,
            transport=transport,
        )
        for backend, values in (("a", a), ("b", b))
    ]
    data = doc(records)
    data.backends = {"a": SAFE, "b": SAFE}
    return only(data)


def test_ttft_is_compared_by_trimmed_means_where_its_median_jumps_between_modes() -> None:
    """Two backends whose requests fall in the same two modes, 18 and 12 of 30 in the faster:
    their medians sit in different modes (×1.27), their 10 %-trimmed means 5 % apart, a tie
    within TTFT's 10 % (``Metric.center``)."""
    a, b = _two_modes(18, seed=1), _two_modes(12, seed=2)
    assert np.median(b) / np.median(a) > 1.2
    found = _decided("ipc", "ttft_s", a, b, [5] * 6)
    assert chosen(found) == ["a", "b"]
    assert found.chosen[1].estimate.ratio == pytest.approx(
        trim_mean(b, estimates.TRIM) / trim_mean(a, estimates.TRIM)
    )


def _slowed_visits(cost: float, slow: set[int], seed: int) -> list[float]:
    """Nine visits of two micro samples each at ``cost`` (1 % noise), the visits in ``slow``
    1.7x slower (a slow spell of the shared machine)."""
    rng = np.random.default_rng(seed)
    return [
        cost * (1.7 if visit in slow else 1.0) * rng.lognormal(0.0, 0.01) for visit in range(9) for _ in "ab"
    ]


def test_micro_is_compared_by_lower_quartiles_that_slow_spells_do_not_reach() -> None:
    """b costs 10 % more than a; slow spells hit three of a's visits and two of b's, not the
    same ones. Their medians' interval holds 1, a tie; their lower quartiles read the 10 %
    apart, as two runs back to back did on the VM where medians changed their decision."""
    a = _slowed_visits(1e-4, {0, 4, 7}, seed=1)
    b = _slowed_visits(1.1e-4, {2, 5}, seed=2)
    by_medians = estimates.ratio_estimate(metric(a, rounds=[2] * 9), metric(b, rounds=[2] * 9), pooled=True)
    assert by_medians[1] <= 1  # the interval of the medians' ratio holds 1
    found = _decided("micro", "roundtrip_s", a, b, [2] * 9)
    assert chosen(found) == ["a"]
    told_apart = found.runner_up.estimate
    assert told_apart.ratio == pytest.approx(np.quantile(b, 0.25) / np.quantile(a, 0.25))
    assert 1.05 < told_apart.low <= told_apart.ratio <= told_apart.high < 1.15


def test_a_metric_taken_in_turn_is_said_to_be_compared_so() -> None:
    def run(in_turn: bool) -> Results:
        taken = msgspec.structs.replace(summarize([1e-5, 2e-5], "s"), in_turn=in_turn)
        return Results(records=[record(Case("micro", "pickle", "images-4"), metrics={"roundtrip_s": taken})])

    names = ["roundtrip_s", "ttft_s"]
    in_turn, apart = decision.center_rule(run(True), names), decision.center_rule(run(False), names)
    assert in_turn.startswith("encode + decode's samples taken in turn, TTFT's")
    assert apart.startswith("encode + decode's lower quartiles, TTFT's")
