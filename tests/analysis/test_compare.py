"""serbench.analysis.compare on synthetic samples with known distributions and fixed seeds (no timings)."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import msgspec
import numpy as np
import pytest
from builders import SCHEMA_1_FIXTURE, doc, metric, one, rec, samples, schema_1_and_2
from scipy.stats import trim_mean

from serbench.analysis import estimates, verdicts
from serbench.analysis.summary import summarize_comparison
from serbench.analysis.verdicts import Verdict
from serbench.model import results
from serbench.model.metrics import compared
from serbench.model.metrics import metric as metric_facts
from serbench.model.results import Case, Results, record
from serbench.model.stats import Measurement, summarize
from serbench.present import terminal


def test_same_distribution_is_no_change() -> None:
    row = one({"encode_s": metric(samples(1))}, {"encode_s": metric(samples(2))})["encode_s"]
    assert row.verdict == Verdict.NO_CHANGE
    assert row.ci_low < 1 < row.ci_high
    assert row.ratio == pytest.approx(1.0, abs=0.02)


def test_ten_percent_slower_is_a_significant_regression() -> None:
    row = one({"encode_s": metric(samples(1))}, {"encode_s": metric(samples(2, 1.10))})["encode_s"]
    assert row.verdict == Verdict.REGRESSION
    assert row.ratio == pytest.approx(1.10, abs=0.02)
    assert 1 < row.ci_low < 1.10 < row.ci_high
    assert not row.exact


def test_a_significant_slowdown_shown_below_the_threshold_passes() -> None:
    rows = one(
        {"encode_s": metric(samples(1, sigma=0.005))}, {"encode_s": metric(samples(2, 1.03, sigma=0.005))}
    )
    assert rows["encode_s"].ci_low > 1  # significant ...
    assert rows["encode_s"].ci_high < 1.10  # ... but surely within tolerance
    assert rows["encode_s"].verdict == Verdict.SLOWER_TOLERATED  # seen, and let through


def test_a_large_but_insignificant_difference_is_inconclusive() -> None:
    """An interval that straddles 1 but could not have excluded a 10 % slowdown says nothing:
    inconclusive, not "no change"."""
    base = metric(samples(1, n=5, sigma=0.5))
    head = metric(samples(2, 1.2, n=5, sigma=0.5))
    row = one({"encode_s": base}, {"encode_s": head})["encode_s"]
    assert row.ci_low < 1
    assert row.detectable > 0.10
    assert row.verdict == Verdict.INCONCLUSIVE


def test_faster_is_an_improvement() -> None:
    row = one({"decode_s": metric(samples(1))}, {"decode_s": metric(samples(2, 0.8))})["decode_s"]
    assert row.verdict == Verdict.IMPROVEMENT
    assert row.ci_high < 1


@pytest.mark.parametrize("name", ["req_per_s", "payload_gb_per_s", "output_tokens_per_s"])
def test_higher_is_better_metrics_flip_direction(name: str) -> None:
    assert metric_facts(name).higher_is_better
    base = {name: metric(samples(1), "GB/s"), "encode_s": metric(samples(1))}
    lower = one(base, {name: metric(samples(2, 0.8), "GB/s"), "encode_s": metric(samples(2, 0.8))})
    assert lower[name].verdict == Verdict.REGRESSION  # less throughput is worse
    assert lower["encode_s"].verdict == Verdict.IMPROVEMENT  # less time is better
    assert lower[name].slowdown == pytest.approx(1 / lower[name].ratio)
    higher = one(base, {name: metric(samples(2, 1.25), "GB/s")})
    assert higher[name].verdict == Verdict.IMPROVEMENT


def test_a_throughput_drop_equal_to_the_threshold_is_caught() -> None:
    """10 % more time is 1/1.1 of the throughput: the same slowdown, the same verdict."""
    rows = one({"req_per_s": metric(samples(1), "1/s")}, {"req_per_s": metric(samples(2, 1 / 1.10), "1/s")})
    assert rows["req_per_s"].verdict == Verdict.REGRESSION


@pytest.mark.parametrize(
    ("name", "base", "head", "verdict"),
    [
        ("wire_bytes", 1712, 1713, Verdict.REGRESSION),  # one byte more is flagged
        ("wire_bytes", 1712, 1712, Verdict.NO_CHANGE),
        # in-band pickle of images-4 in two processes: tensor addresses as digits in the message
        ("wire_bytes", 38_542_444, 38_542_438, Verdict.NO_CHANGE),
        ("wire_bytes", 38_542_438, 38_542_444, Verdict.NO_CHANGE),
        ("wire_bytes", 38_542_444, 38_543_444, Verdict.REGRESSION),  # a kB more is a change
        ("frames", 5, 6, Verdict.REGRESSION),
        ("frames", 5, 1, Verdict.IMPROVEMENT),
        ("copies", 1.0, 1.004, Verdict.NO_CHANGE),  # below the resolution of RSS readings
        ("copies", 1.0, 3.0, Verdict.REGRESSION),
        ("hit_ratio", 0.94, 0.0, Verdict.REGRESSION),  # higher is better: a cache that stopped hitting
        ("hit_ratio", 0.5, 0.94, Verdict.IMPROVEMENT),
        ("hit_ratio", 0.94, 0.945, Verdict.NO_CHANGE),
    ],
)
def test_machine_independent_metrics_are_compared_exactly(name: str, base: float, head: float, verdict: str):
    row = one({name: metric([base], "bytes")}, {name: metric([head], "bytes")})[name]
    assert row.exact
    assert row.verdict == verdict
    assert row.ci_low == row.ci_high == row.ratio == pytest.approx(head / base)


def test_failed_in_head_is_a_regression_and_fixed_in_head_is_listed() -> None:
    ok = {"encode_s": metric(samples(1))}
    base = doc([rec(ok, "a"), rec({}, "b", error="boom"), rec({}, "c", error="old"), rec(ok, "d")])
    head = doc([rec({}, "a", error="crash"), rec(ok, "b"), rec({}, "c", error="still"), rec(ok, "d")])
    comparison = verdicts.compare(base, head)
    by_backend = {(r.backend, r.metric): r.verdict for r in comparison.rows}
    assert by_backend[("a", verdicts.CASE_METRIC)] == Verdict.FAILED_IN_HEAD
    assert by_backend[("b", verdicts.CASE_METRIC)] == Verdict.FIXED_IN_HEAD
    assert not any(backend == "c" for backend, _ in by_backend)  # failed on both sides: nothing to compare
    assert [r.backend for r in comparison.regressions] == ["a"]
    assert comparison.head_errors[Case("micro", "a", "w")] == "crash"


def test_a_case_neither_side_could_measure_is_not_a_failure_in_head() -> None:
    """Unsupported on both sides (torch-dist under instruction counts, say): listed as not
    measured with why, not as "failed in head"; unsupported in head alone still fails it."""
    why = "instructions: not counted here"
    never = record(Case("micro", "c", "w"), error=f"unsupported: {why}", unsupported=why)
    dropped = record(Case("micro", "d", "w"), error=f"unsupported: {why}", unsupported=why)
    base = doc([never, rec({"encode_s": metric(samples(1))}, "d")])
    comparison = verdicts.compare(base, doc([never, dropped]))
    assert comparison.not_measured == {never.case: why}
    assert set(comparison.head_errors) == {dropped.case}
    shown = terminal.comparison_table(summarize_comparison(comparison, base, base)).splitlines()
    assert f"not measured on either side: micro c w: {why}" in shown
    assert not any(line.startswith("failed in head: micro c") for line in shown)


def test_regressions_are_worst_first_with_failures_on_top() -> None:
    base = doc([rec({"encode_s": metric(samples(1))}, name) for name in ("x", "y", "z")])
    head = doc(
        [
            rec({"encode_s": metric(samples(2, 1.2))}, "x"),
            rec({"encode_s": metric(samples(3, 1.5))}, "y"),
            rec({}, "z", error="crash"),
        ]
    )
    assert [r.backend for r in verdicts.compare(base, head, strict=True).regressions] == ["z", "y", "x"]
    assert [r.backend for r in verdicts.compare(base, head).regressions] == ["z"]  # plain runs: indicative


def test_added_and_removed_cases_are_listed() -> None:
    m = {"encode_s": metric(samples(1))}
    comparison = verdicts.compare(doc([rec(m, "old"), rec(m, "both")]), doc([rec(m, "both"), rec(m, "new")]))
    assert comparison.added == [Case("micro", "new", "w")]
    assert comparison.removed == [Case("micro", "old", "w")]
    assert {r.backend for r in comparison.rows} == {"both"}


def test_environment_differences_name_the_keys() -> None:
    base, head = doc([]), doc([], cpu="Intel Xeon", cpu_count=8, git_commit="b" * 40)
    assert verdicts.compare(base, head).environment_differences == {
        "cpu": ("AMD EPYC", "Intel Xeon"),
        "cpu_count": (2, 8),
    }


def test_per_metric_threshold_overrides_the_default() -> None:
    base = {"encode_s": metric(samples(1, sigma=0.005)), "decode_s": metric(samples(1, sigma=0.005))}
    head = {
        "encode_s": metric(samples(2, 1.04, sigma=0.005)),
        "decode_s": metric(samples(2, 1.04, sigma=0.005)),
    }
    default = one(base, head)
    assert default["encode_s"].verdict == default["decode_s"].verdict == Verdict.SLOWER_TOLERATED
    strict = one(base, head, overrides={"encode_s": 0.02})
    assert strict["encode_s"].verdict == Verdict.REGRESSION
    assert strict["decode_s"].verdict == Verdict.SLOWER_TOLERATED


def test_rounds_turn_process_to_process_shifts_into_width() -> None:
    """Five head rounds shifted by process (0.95 … 1.25): pooled they look like a tight 15 %
    regression; resampled by round, the interval covers 1."""
    shifts = [0.95, 1.0, 1.15, 1.2, 1.25]
    head_values = [v for i, s in enumerate(shifts) for v in samples(10 + i, s, n=15, sigma=0.01)]
    base_values = [v for i in range(5) for v in samples(20 + i, n=15, sigma=0.01)]
    pooled = one({"encode_s": metric(base_values)}, {"encode_s": metric(head_values)})["encode_s"]
    by_round = one(
        {"encode_s": metric(base_values, rounds=[15] * 5)}, {"encode_s": metric(head_values, rounds=[15] * 5)}
    )["encode_s"]
    assert pooled.verdict == Verdict.REGRESSION
    assert by_round.ci_low < 1 < by_round.ci_high
    assert by_round.detectable > 0.10  # as wide as the shifts between processes
    assert by_round.verdict == Verdict.INCONCLUSIVE


def test_the_same_files_always_give_the_same_interval() -> None:
    base, head = {"encode_s": metric(samples(1))}, {"encode_s": metric(samples(2, 1.05))}
    first, second = one(base, head)["encode_s"], one(base, head)["encode_s"]
    assert (first.ci_low, first.ci_high) == (second.ci_low, second.ci_high)


def test_a_single_sample_gives_no_interval_and_is_inconclusive() -> None:
    row = one({"encode_s": metric([1.0])}, {"encode_s": metric([3.0])})["encode_s"]
    assert row.ratio == 3.0
    assert row.ci_low is None and row.detectable is None and row.verdict == Verdict.INCONCLUSIVE


@pytest.mark.parametrize(("text", "value"), [("10%", 0.10), ("2.5%", 0.025), ("0.2", 0.2), ("0", 0.0)])
def test_parse_tolerance(text: str, value: float) -> None:
    assert verdicts.parse_tolerance(text) == pytest.approx(value)


@pytest.mark.parametrize("text", ["ten", "-5%", "nan", ""])
def test_parse_tolerance_rejects_nonsense(text: str) -> None:
    with pytest.raises(ValueError):
        verdicts.parse_tolerance(text)


@pytest.mark.parametrize("yardstick", ["copy_s", "floor_rtt_s", "unix_gb_per_s"])
def test_measurements_of_the_machine_are_not_compared(yardstick: str) -> None:
    rows = one(
        {yardstick: metric(samples(1)), "encode_s": metric(samples(1))},
        {yardstick: metric(samples(2, 2.0)), "encode_s": metric(samples(2))},
    )
    assert set(rows) == {"encode_s"}


def test_interleaved_pairs_cancel_drift_that_hits_both_sides() -> None:
    """Load that comes and goes moves base round i and head round i together (they ran
    back to back): paired, a 10 % slowdown stands out; unpaired, the drift hides it."""
    drift = [1.0, 1.5, 0.8, 1.3, 1.0]
    base_values = [v for i, d in enumerate(drift) for v in samples(30 + i, d, n=15)]
    head_values = [v for i, d in enumerate(drift) for v in samples(40 + i, d * 1.10, n=15)]
    base, head = metric(base_values, rounds=[15] * 5), metric(head_values, rounds=[15] * 5)
    paired = one({"decode_s": base}, {"decode_s": head})["decode_s"]
    assert paired.verdict == Verdict.REGRESSION
    assert paired.ratio == pytest.approx(1.10, abs=0.02)
    unpaired = one({"decode_s": base}, {"decode_s": msgspec.structs.replace(head, rounds=[75])})["decode_s"]
    assert unpaired.ci_low < 1 and unpaired.verdict == Verdict.INCONCLUSIVE  # the drift hides it: cannot tell


def test_a_runs_visits_are_compared_by_pooled_medians_with_their_rounds_kept_paired() -> None:
    """A run's interleaved visits hold a few requests each (``pooled``, what rankings and the
    decision use): the ratio is that of the medians of every sample, not the middle visit's;
    the bootstrap still draws a visit of both sides together, so drift that moved both stays
    out of the interval, and drawn apart it does not."""
    drift = [1.0, 1.5, 0.8]
    base_values = [v for i, d in enumerate(drift) for v in samples(30 + i, d, n=5)]
    head_values = [v for i, d in enumerate(drift) for v in samples(40 + i, d * 1.10, n=5)]
    base, head = metric(base_values, rounds=[5] * 3), metric(head_values, rounds=[5] * 3)
    ratio, low, high = estimates.ratio_estimate(base, head, pooled=True)
    assert ratio == pytest.approx(np.median(head_values) / np.median(base_values))
    assert 1 < low < ratio < high < 1.2
    _, apart_low, _ = estimates.ratio_estimate(base, head, side_by_side=False, pooled=True)
    assert apart_low < 1
    assert estimates.geometric_ratio([(base, head)]).ratio == pytest.approx(ratio)


def test_a_round_of_no_samples_in_a_hand_written_file_is_no_round() -> None:
    """Rounds of 3, 0 and 2 samples are compared as rounds of 3 and 2, as the same file without
    the empty one: not dropped as unpairable, not resampled into an empty median."""
    base, head = [1.0, 1.1, 0.9, 1.0, 1.05], [1.2, 1.3, 1.1, 1.2, 1.25]
    with_empty = [metric(values, rounds=[3, 0, 2]) for values in (base, head)]
    without = [metric(values, rounds=[3, 2]) for values in (base, head)]
    for pooled in (False, True):
        estimate = estimates.ratio_estimate(*with_empty, pooled=pooled)
        assert estimate == estimates.ratio_estimate(*without, pooled=pooled)
        assert estimate[0] == pytest.approx(1.2, rel=0.01)


# The machine's state, pair by pair: on the shared 2-core VM a case runs 1.6x slow
# most of the time and normal now and then, flipping every second or so. Both
# halves of most pairs see the same state; four straddle a flip, three of them
# against head's interest and one in its favour.
BASE_STATES = [1.6, 1.6, 1.0, 1.6, 1.6, 1.6, 1.6, 1.6, 1.0, 1.6, 1.6, 1.6, 1.6, 1.6, 1.6]
HEAD_STATES = [1.6, 1.0, 1.0, 1.6, 1.6, 1.0, 1.6, 1.6, 1.6, 1.6, 1.6, 1.0, 1.6, 1.6, 1.6]


@pytest.mark.parametrize(("factor", "verdict"), [(1.0, Verdict.NO_CHANGE), (1.10, Verdict.REGRESSION)])
def test_many_pairs_outvote_the_few_that_straddle_a_change_of_the_machine(factor: float, verdict: str):
    base_values = [v for i, s in enumerate(BASE_STATES) for v in samples(50 + i, s, n=15)]
    head_values = [v for i, s in enumerate(HEAD_STATES) for v in samples(70 + i, s * factor, n=15)]
    rounds = [15] * len(BASE_STATES)
    row = one(
        {"decode_s": metric(base_values, rounds=rounds)}, {"decode_s": metric(head_values, rounds=rounds)}
    )
    assert row["decode_s"].verdict == verdict
    assert row["decode_s"].ratio == pytest.approx(factor, abs=0.02)


@pytest.mark.parametrize(
    ("ratio", "low", "high", "verdict"),
    [
        (1.12, 1.05, 1.20, Verdict.REGRESSION),
        (1.06, 1.01, 1.15, Verdict.REGRESSION),  # estimated above half the threshold, reaching it
        (1.03, 1.01, 1.15, Verdict.SLOWER_TOLERATED),  # lopsided interval around a 3 % shift
        (1.06, 1.05, 1.07, Verdict.SLOWER_TOLERATED),  # significant but shown within tolerance
        (1.084, 1.068, 1.094, Verdict.SLOWER_TOLERATED),  # issue 16: seen, labelled, let through
        (1.30, 0.95, 1.60, Verdict.NO_CHANGE),  # not significant
        (0.85, 0.80, 0.90, Verdict.IMPROVEMENT),
        (0.97, 0.95, 0.99, Verdict.FASTER_TOLERATED),
    ],
)
def test_statistical_verdict_rules(ratio: float, low: float, high: float, verdict: str) -> None:
    assert verdicts.statistical_verdict(ratio, low, high, 0.10, higher_is_better=False) == verdict
    # the same numbers for a throughput are the inverse slowdown
    mirrored = verdicts.statistical_verdict(1 / ratio, 1 / high, 1 / low, 0.10, higher_is_better=True)
    assert mirrored == verdict


def test_plain_runs_give_indicative_verdicts_that_do_not_fail() -> None:
    """One process a side: beyond tolerance is indicative, within it no change; exact metrics
    and failures are judged as ever."""
    base = {"encode_s": metric(samples(1)), "decode_s": metric(samples(1)), "wire_bytes": metric([10])}
    head = {
        "encode_s": metric(samples(2, 1.3)),
        "decode_s": metric(samples(2, 1.03, sigma=0.005)),
        "wire_bytes": metric([11]),
    }
    comparison = verdicts.compare(doc([rec(base)]), doc([rec(head)]))
    found = {r.metric: r.verdict for r in comparison.rows}
    assert found == {
        "encode_s": Verdict.SLOWER_INDICATIVE,
        "decode_s": Verdict.NO_CHANGE,
        "wire_bytes": Verdict.REGRESSION,
    }
    assert [r.metric for r in comparison.regressions] == ["wire_bytes"]
    assert [r.metric for r in comparison.indicative] == ["encode_s"]


def test_rounds_measured_side_by_side_are_decisive_and_two_runs_rounds_are_not() -> None:
    rounds = [20, 20, 20]
    base = {"encode_s": metric(samples(1), rounds=rounds)}
    head = {"encode_s": metric(samples(2, 1.3), rounds=rounds)}
    (row,) = verdicts.compare(doc([rec(base)]), doc([rec(head)]), side_by_side=True).rows
    assert row.verdict == Verdict.REGRESSION and row.rounds == 3
    (row,) = verdicts.compare(doc([rec(base)]), doc([rec(head)])).rows  # two runs' interleaved rounds
    assert row.verdict == Verdict.SLOWER_INDICATIVE and row.rounds is None


def test_a_derived_metric_does_not_count_twice() -> None:
    """roundtrip_s is encode + decode: its regression counts only when neither of them regressed."""
    base = {"encode_s": metric(samples(1)), "roundtrip_s": metric(samples(1))}
    both = {"encode_s": metric(samples(2, 1.3)), "roundtrip_s": metric(samples(2, 1.3))}
    alone = {"encode_s": metric(samples(2)), "roundtrip_s": metric(samples(2, 1.3))}
    twice = verdicts.compare(doc([rec(base)]), doc([rec(both)]), strict=True)
    assert [r.metric for r in twice.regressions] == ["encode_s"]
    assert {r.metric for r in twice.changes} == {"encode_s", "roundtrip_s"}  # shown all the same
    once = verdicts.compare(doc([rec(base)]), doc([rec(alone)]), strict=True)
    assert [r.metric for r in once.regressions] == ["roundtrip_s"]


def test_a_schema_1_file_keeps_its_transports_as_case_fields(tmp_path: Path) -> None:
    raw = json.loads(SCHEMA_1_FIXTURE.read_text())
    assert raw["schema"] == results.SCHEMA_1
    assert {"pickle@shm", "msgspec-frombuffer@shm"} <= {r["backend"] for r in raw["records"]}
    for path in schema_1_and_2(tmp_path):
        cases = [r.case for r in results.load(path).records]
        assert len(cases) == len(raw["records"]) == len(set(cases))
        assert not any("@" in c.backend for c in cases)
        shm = {(c.scenario, c.backend) for c in cases if c.transport == "shm"}
        assert shm == {
            ("ipc", "pickle"),
            ("ipc", "msgspec-frombuffer"),
            ("memory", "pickle"),
            ("memory", "msgspec-frombuffer"),
            ("memory", "msgspec-frombuffer:threshold=inf"),
        }
        assert {c.transport for c in cases if c.scenario == "micro"} == {None}
        assert {c.transport for c in cases if c.scenario != "micro"} == {"ipc", "shm"}


@functools.cache
def _schema_1_against_itself() -> list[tuple]:
    """The numbers of the schema-1 fixture compared with itself (the bootstrap takes seconds)."""
    data = results.load(SCHEMA_1_FIXTURE)
    return [(r.case, r.metric, r.ratio, r.ci_low, r.ci_high) for r in verdicts.compare(data, data).rows]


@pytest.mark.parametrize(("base_schema", "head_schema"), [(1, 1), (1, 2), (2, 1)])
def test_a_schema_1_file_compares_with_itself_and_as_schema_2(
    tmp_path: Path, base_schema: int, head_schema: int
) -> None:
    """Every case of the old file is found on both sides, shm cases included: nothing added or
    removed, every metric compared, the same numbers whichever schema a side was read from."""
    paths = dict(zip((1, 2), schema_1_and_2(tmp_path), strict=True))
    base, head = results.load(paths[base_schema]), results.load(paths[head_schema])
    comparison = verdicts.compare(base, head)
    assert comparison.added == comparison.removed == []
    assert comparison.environment_differences == {}
    ok = {r.case: r for r in base.of()}
    failed = {r.case: r.error for r in base.records if not r.ok and r.unsupported is None}
    unsupported = {r.case: r.unsupported for r in base.records if r.unsupported is not None}
    assert {r.case for r in comparison.rows} == set(ok)
    assert comparison.head_errors == failed  # failed on both sides: nothing else to say
    assert comparison.not_measured == unsupported
    assert len(comparison.rows) == sum(len(list(filter(compared, r.metrics))) for r in ok.values())
    # a file against itself: no change where the row could have seen its tolerance, else
    # inconclusive (a single value a side, or a noisy run), never anything else
    assert {r.verdict for r in comparison.rows} == {Verdict.NO_CHANGE, Verdict.INCONCLUSIVE}
    for row in comparison.rows:
        powered = row.exact or (row.detectable is not None and row.detectable <= row.threshold)
        assert row.verdict == (Verdict.NO_CHANGE if powered else Verdict.INCONCLUSIVE), row
    assert not comparison.regressions
    shm = {r.case for r in comparison.rows if r.case.transport == "shm"}
    assert Case("ipc", "pickle", "images-4", "shm") in shm
    assert Case("memory", "msgspec-frombuffer:threshold=inf", "outputs-8", "shm") in shm
    numbers = [(r.case, r.metric, r.ratio, r.ci_low, r.ci_high) for r in comparison.rows]
    assert numbers == _schema_1_against_itself()


@pytest.mark.parametrize("n", [1, 2, 9, 10, 11, 30, 54])
def test_medians_and_lower_quartiles_are_numpys_with_nan_as_a_missing_sample(n: int) -> None:
    values = np.random.default_rng(n).lognormal(0.0, 0.3, n)
    rows = np.full((2, 60), np.nan)
    rows[0, :n], rows[1, :n] = values, values[::-1] * 2
    for center, q in ((estimates.medians, 0.5), (estimates.lower_quartiles, estimates.LOWER)):
        expected = np.quantile(values, q)
        assert center(rows) == pytest.approx([expected, 2 * expected])
        assert center(values) == pytest.approx(expected)


@pytest.mark.parametrize("n", [1, 2, 9, 10, 11, 30, 54])
def test_trimmed_means_cut_as_scipy_does_with_nan_as_a_missing_sample(n: int) -> None:
    """A row of the bootstrap holds as many samples as its drawn rounds: NaN pads the rest."""
    values = np.random.default_rng(n).lognormal(0.0, 0.3, n)
    rows = np.full((2, 60), np.nan)
    rows[0, :n], rows[1, :n] = values, values[::-1] * 2
    expected = trim_mean(values, estimates.TRIM)
    assert estimates.trimmed_means(rows) == pytest.approx([expected, 2 * expected])
    assert estimates.trimmed_means(values) == pytest.approx(expected)


def test_samples_taken_in_turn_pair_sample_by_sample_through_a_slow_spell() -> None:
    """Nine rounds of two samples a side, the machine 1-2x slower from sample to sample and
    alike for both sides of a pair: taken in turn, the ratio holds at 1.1 with a narrow interval;
    the same samples not marked so are compared by lower quartiles and the spells widen it."""
    rng = np.random.default_rng(7)
    speed = rng.choice([1.0, 1.0, 1.5, 2.0], size=18) * rng.normal(1, 0.005, size=18)
    base_values, head_values = list(10e-6 * speed), list(11e-6 * speed)
    in_turn = [
        msgspec.structs.replace(summarize(v, "s", [2] * 9), in_turn=True) for v in (base_values, head_values)
    ]
    ratio, low, high = estimates.ratio_estimate(*in_turn, pooled=True, center=estimates.lower_quartiles)
    assert ratio == pytest.approx(1.1, rel=0.01) and high - low < 0.03
    apart = [summarize(v, "s", [2] * 9) for v in (base_values, head_values)]
    _, low_apart, high_apart = estimates.ratio_estimate(*apart, pooled=True, center=estimates.lower_quartiles)
    assert high_apart - low_apart > 3 * (high - low)
    # rounds that differ are not pairs: back to the centers
    other_rounds = msgspec.structs.replace(in_turn[1], rounds=[3, 1] + [2] * 7)
    assert estimates.ratio_estimate(in_turn[0], other_rounds, pooled=True) == estimates.ratio_estimate(
        apart[0], msgspec.structs.replace(apart[1], rounds=[3, 1] + [2] * 7), pooled=True
    )


def test_a_side_with_fewer_rounds_pairs_with_the_other_sides_first_rounds() -> None:
    """A run's backend visited no more after three rounds took its group's first three: taken in
    turn, those pair with the first three of a backend visited six times, and the ratio keeps
    the narrow interval of pairs; compared unpaired, six rounds against three, the spells widen it."""
    rng = np.random.default_rng(3)
    speed = rng.choice([1.0, 1.0, 1.5, 2.0], size=12) * rng.normal(1, 0.005, size=12)
    six = msgspec.structs.replace(summarize(list(10e-6 * speed), "s", [2] * 6), in_turn=True)
    three = msgspec.structs.replace(summarize(list(11e-6 * speed[:6]), "s", [2] * 3), in_turn=True)
    ratio, low, high = estimates.ratio_estimate(six, three, pooled=True, center=estimates.lower_quartiles)
    assert ratio == pytest.approx(1.1, rel=0.01) and high - low < 0.03
    _, low_apart, high_apart = estimates.ratio_estimate(
        six, three, pooled=True, side_by_side=False, center=estimates.lower_quartiles
    )
    assert high_apart - low_apart > 3 * (high - low)


def test_the_rounds_that_pair_are_those_both_sides_took() -> None:
    six, three = (summarize([1.0] * 2 * n, "s", [2] * n) for n in (6, 3))
    assert estimates.paired_rounds(six, three) == estimates.paired_rounds(three, six) == 3
    assert estimates.paired_rounds(six, summarize([1.0, 2.0], "s")) == 0  # one round: none pair


def test_merged_rounds_are_in_turn_only_where_every_round_was() -> None:
    taken = msgspec.structs.replace(summarize([1.0, 2.0], "s"), in_turn=True)
    alone = summarize([1.5, 2.5], "s")

    def merged(*rounds: Measurement) -> Measurement:
        recs = [record(Case("micro", "pickle", "images-4"), metrics={"decode_s": m}) for m in rounds]
        return results.merge([Results(records=[rec]) for rec in recs]).records[0].metrics["decode_s"]

    assert merged(taken, taken).in_turn and merged(taken, taken).rounds == [2, 2]
    assert not merged(taken, alone).in_turn
