"""scripts/gate_quality.py, the gate's measuring instrument: scoring stored trials."""

from __future__ import annotations

import json
from pathlib import Path

import by_path
import pytest
from builders import doc, metric, rec, samples

from serbench.model import results
from serbench.model.results import Results

gate_quality = by_path.load("scripts/gate_quality.py", "gate_quality")

BACKEND = "msgspec-frombuffer"


SLOTS = [gate_quality.slot_spec(BACKEND, slot, 1) for slot in range(2)]


def round_doc(seed: int, scales: list[float]) -> Results:
    """One round: a case per slot, its times scaled by ``scales``."""
    return doc(
        [
            rec({"encode_s": metric(samples(seed + slot, scale, n=15))}, spec)
            for slot, (spec, scale) in enumerate(zip(SLOTS, scales, strict=True))
        ]
    )


def store_trial(folder: Path, factor: float, slowed_rounds: list[bool]) -> None:
    """A trial as run_trial leaves it (raw rounds, merged sides, trial.json); head's slot 1
    is ``factor`` times slower in the rounds marked True."""
    for r, slowed in enumerate(slowed_rounds, start=1):
        sides = {"base": [1.0, 1.0], "head": [1.0, factor if slowed else 1.0]}
        for label, scales in sides.items():
            path = folder / f"{label}-{r}" / "results.json"
            results.save(path, round_doc(100 * r, scales))
    for label in ("base", "head"):
        rounds = [
            results.load(folder / f"{label}-{r}" / "results.json") for r in range(1, len(slowed_rounds) + 1)
        ]
        results.save(folder / f"{label}.json", results.merge(rounds))
    meta = {
        "backend": BACKEND,
        "factors": [factor],
        "slots": SLOTS,
        "load_before": 1.0,
        "load_after": 1.0,
        "cpus": 2,
    }
    (folder / "trial.json").write_text(json.dumps(meta))


def test_a_trial_alarms_on_the_slowed_slot_and_not_on_the_identical_one(tmp_path: Path) -> None:
    store_trial(tmp_path / "trial-01", 1.3, [True] * 3)
    flagged = gate_quality.evaluate(tmp_path / "trial-01", 0.10)
    assert flagged[1.0] == []
    assert [flag.metric for flag in flagged[1.3]] == ["encode_s"]


def test_the_report_counts_trials_and_can_score_only_the_first_rounds(tmp_path: Path) -> None:
    """Trial 1's head is slowed in its first two rounds only: flagged when only those are scored."""
    store_trial(tmp_path / "trial-01", 1.3, [True, True, False, False, False])
    store_trial(tmp_path / "trial-02", 1.3, [True] * 5)
    every_round = gate_quality.report(tmp_path, 0.10)
    assert every_round["trials"] == 2 and every_round["false_alarms_aa"] == 0
    assert every_round["detections"] == {"1.3": 1}
    first_two = gate_quality.report(tmp_path, 0.10, rounds=2)
    assert first_two["detections"] == {"1.3": 2} and first_two["rounds_scored"] == 2
    assert json.loads((tmp_path / "summary.json").read_text())["rounds_scored"] == 2


def test_the_report_counts_inconclusive_rows_and_never_an_overclaimed_one(tmp_path: Path) -> None:
    """Head's slot 1 slowed in one round of three: too few rounds to tell, so inconclusive, and
    nothing that could not have seen 10 % is labelled no change."""
    store_trial(tmp_path / "trial-01", 1.3, [True, False, False])
    summary = gate_quality.report(tmp_path, 0.10)
    labels = summary["labels"]
    assert labels["1"]["rows"] == labels["1.3"]["rows"] == 1
    assert labels["1.3"]["inconclusive"] == 1 and labels["1.3"]["cleared"] == 0
    assert labels["1"]["overclaimed"] == labels["1.3"]["overclaimed"] == 0


def test_a_bystander_whose_rows_moved_is_named_and_counted(tmp_path: Path) -> None:
    """Cross-case isolation: pickle, unchanged on both sides, reads 1.3x slower in head (another
    case's slowdown moved it); flat-mmk reads the same. Only pickle's row is named."""
    folder = tmp_path / "trial-01"
    for r in range(1, 4):
        for label, scale in (("base", 1.0), ("head", 1.3)):
            records = [
                rec({"encode_s": metric(samples(100 * r, n=15))}, SLOTS[0]),
                rec({"encode_s": metric(samples(200 * r, scale, n=15))}, "pickle"),
                rec({"encode_s": metric(samples(300 * r, n=15))}, "flat-mmk"),
            ]
            results.save(folder / f"{label}-{r}" / "results.json", doc(records))
    for label in ("base", "head"):
        rounds = [results.load(folder / f"{label}-{r}" / "results.json") for r in range(1, 4)]
        results.save(folder / f"{label}.json", results.merge(rounds))
    meta = {"backend": BACKEND, "factors": [], "slots": SLOTS[:1], "bystanders": ["pickle", "flat-mmk"]}
    (folder / "trial.json").write_text(json.dumps({**meta, "load_before": 1.0, "load_after": 1.0, "cpus": 2}))
    moved = gate_quality.disturbed(folder, 0.10)
    assert [entry.split()[:4] for entry in moved] == [["pickle", "encode_s", "w", "regression"]]
    assert gate_quality.report(tmp_path, 0.10)["bystanders_moved_trials"] == 1


def test_the_functions_named_for_flagged_count_rows_are_tallied_per_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What ``_grown`` names for a slowed slot's count rows is tallied by row (without its ratio,
    which differs in the last digits from trial to trial); wall-clock rows and the A/A slot name
    nothing."""
    Flag = gate_quality.Flag
    flagged = {
        1.0: [Flag("receive_instructions", "text-sonnet", 1.0011, ("f (a.so)",))],
        1.02: [
            Flag("receive_instructions", "text-sonnet", 1.0248, ("mpack_decode (m.so)", "g (p.so)")),
            Flag("decode_s", "text-sonnet", 1.04),
        ],
    }
    for t in (1, 2):
        store_trial(tmp_path / f"trial-0{t}", 1.02, [False] * 3)
    monkeypatch.setattr(gate_quality, "evaluate", lambda *args: flagged)
    assert gate_quality.report(tmp_path, 0.10)["grew_most"] == [
        {
            "factor": 1.02,
            "row": "receive_instructions text-sonnet",
            "functions": "mpack_decode (m.so), g (p.so)",
            "trials": 2,
        }
    ]
    assert [str(f) for f in flagged[1.02]] == [
        "receive_instructions text-sonnet 1.0248 [grew most: mpack_decode (m.so), g (p.so)]",
        "decode_s text-sonnet 1.0400",
    ]
    assert str(Flag("send_instructions", "w", 1.02, None)) == "send_instructions w 1.0200 [no profiles]"


def test_both_sides_measure_the_same_cases_and_only_heads_slots_are_slowed(tmp_path: Path) -> None:
    """A trial's sides share one plan, case names included (as in a gate of another package's
    change); each side's own ``gate_quality_slots``, first on its path, decides the factors."""
    plan = gate_quality.Plan([*SLOTS, "pickle"], ["text-sonnet"], ["micro"])
    profile = gate_quality.PROFILES["quick"]
    base = gate_quality.side("base", tmp_path, [1.0, 1.0], plan, profile)
    head = gate_quality.side("head", tmp_path, [1.0, 1.07], plan, profile)
    assert base.plan == head.plan and base.runtime.path != head.runtime.path
    for revision, factors in ((base, [1.0, 1.0]), (head, [1.0, 1.07])):
        module: dict = {}
        exec((revision.runtime.path / "gate_quality_slots.py").read_text(), module)
        built = [module["slot"](BACKEND, spec.rpartition("slot=")[2]) for spec in SLOTS]
        assert [b.factor for b in built] == factors
        assert {b.inner.name for b in built} == {BACKEND}


@pytest.mark.parametrize("change", sorted(gate_quality.LAYOUT_CHANGES))
def test_a_layout_change_goes_into_heads_slots_module_only_and_leaves_the_factors(tmp_path, change) -> None:
    plan = gate_quality.Plan(SLOTS, ["text-sonnet"], ["micro"])
    profile = gate_quality.PROFILES["quick"]
    head = gate_quality.side(
        "head", tmp_path, [1.0, 1.02], plan, profile, gate_quality.LAYOUT_CHANGES[change]
    )
    base = gate_quality.side("base", tmp_path, [1.0, 1.0], plan, profile)
    sources = [(r.runtime.path / "gate_quality_slots.py").read_text() for r in (base, head)]
    assert sources[1] == sources[0].replace("[1.0, 1.0]", "[1.0, 1.02]") + gate_quality.LAYOUT_CHANGES[change]
    module: dict = {}
    exec(sources[1], module)
    assert [module["slot"](BACKEND, spec.rpartition("slot=")[2]).factor for spec in SLOTS] == [1.0, 1.02]
