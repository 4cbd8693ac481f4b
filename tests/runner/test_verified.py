"""Nothing is timed that was not verified on its own bytes (docs/reliability.md, "Verified before timed").

A backend that returns wrong objects for a case's messages, or declares
everything unsupported, gets no timing metric in any scenario, and the case
says why; a case that is timed carries the verification's cost in ``info``.
"""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path

import pytest

from serbench.model.errors import EngineError, VerificationError
from serbench.model.profiles import PROFILES
from serbench.runner.matrix import Plan, execute
from serbench.scenarios.ipc import Settings, measure
from serbench.serializers import conformance, get_serializer
from serbench.workloads import get_workload

FAST = dataclasses.replace(
    PROFILES["quick"], samples=3, min_sample_s=0.0005, max_metric_s=0.05, case_timeout_s=60
)
SMALL = "images-8:profile=llava"
WRONG = "misbehaving_backends:misbehaving:mode=wrong"
STUB = "misbehaving_backends:declares_everything"


def test_wrong_or_unsupported_backends_are_never_timed(tmp_path: Path, ipc_sandbox: Path) -> None:
    plan = Plan([WRONG, STUB, "msgspec-frombuffer"], [SMALL], ["micro", "ipc", "memory"])
    run = execute(plan, FAST, tmp_path / "r.json", ["run"])
    records = {(r.scenario, r.backend): r for r in run.results.records}
    for scenario in ("micro", "ipc", "memory"):
        wrong, stub = records[scenario, WRONG], records[scenario, STUB]
        assert wrong.metrics == {} and stub.metrics == {}
        assert re.search(r"does not round-trip request 0 of \d+, not timed", wrong.error)
        assert "$.mm_inputs.items_by_modality['image'][0].fields['pixel_values'].data: type list" in (
            wrong.error
        )
        assert stub.error == "unsupported: a stub: decodes everything as None"
        assert stub.unsupported == "a stub: decodes everything as None" and stub.info is None
        good = records[scenario, "msgspec-frombuffer"]
        assert good.error is None and good.metrics
        checked = good.info.verification
        assert checked.messages == checked.of >= 1  # every message it timed (few here)
    # Both passed conformance: what kept them untimed is the per-case check.
    for spec in (WRONG, STUB):
        assert not run.results.backends[spec].conformance.failed
    assert run.results.backends[STUB].conformance.passed == 0


def test_verify_names_the_message_and_the_first_difference() -> None:
    messages = list(get_workload(SMALL).requests(3))
    assert conformance.verify(get_serializer("msgspec-frombuffer"), messages).messages == 3
    with pytest.raises(VerificationError, match=r"request 0 of 3.*\['image'\]\[0\]\.fields"):
        conformance.verify(get_serializer(WRONG), messages, "request")


def test_many_messages_are_verified_by_a_deterministic_spread_sample() -> None:
    assert conformance.sample(5) == [0, 1, 2, 3, 4]
    chosen = conformance.sample(1000)
    assert len(chosen) == conformance.VERIFY_SAMPLE and chosen[0] == 0 and chosen[-1] == 999
    assert chosen == conformance.sample(1000)


def test_a_workload_declared_unsupported_by_id_or_glob() -> None:
    serializer = get_serializer("msgspec-frombuffer")
    assert conformance.case_unsupported(serializer, SMALL) is None
    serializer.unsupported = {"workload-images-*": "no images"}
    assert conformance.case_unsupported(serializer, SMALL) == "no images"
    assert conformance.case_unsupported(serializer, "text-sonnet") is None


def test_ipc_blames_the_codec_when_the_frames_arrived_intact(ipc_sandbox: Path) -> None:
    """A decoder that reuses its buffer passes the one-message check, then corrupts request 0
    when request 1 is decoded while request 0 still runs (both sent at once; request 0 needs 16
    steps of 5 ms): the engine finds request 0's frames intact and says codec bug. (Sent one at
    a time, request 0 is checked and dropped when it finishes, before request 1 exists: nothing
    live to corrupt, as in an engine that frees finished requests.)"""
    cfg = Settings(num_prompts=2, rates=(math.inf,), max_concurrency=None, floor=5, step_s=0.005)
    with pytest.raises(EngineError, match=r"llava-0-0'.*codec bug: the frames arrived intact"):
        measure("mutants:mutant:bug=reuse-decode-buffer", "images-2:profile=llava", cfg)


def test_an_unsupported_case_reads_unsupported_not_failed() -> None:
    """A case the backend declares unsupported was never timed: the tables and the report say so."""
    from serbench.analysis.summary import summarize_run
    from serbench.model.results import Backend, Case, Results, record
    from serbench.model.stats import summarize
    from serbench.present import html as report
    from serbench.present import terminal

    rec = record(
        Case("micro", "pickle", "text-sonnet"), unsupported="no tensors here", error="unsupported: x"
    )
    timed = {"decode_s": summarize([1e-5] * 5, "s")}
    data = Results(
        complete=True,
        started="",
        finished="",
        profile="quick",
        backends={"pickle": Backend(safe=False)},
        records=[
            rec,
            record(Case("micro", "pickle", "images-4"), error="boom"),
            record(Case("micro", "msgspec-frombuffer", "text-sonnet"), metrics=timed),
        ],
    )
    cells = [
        line.split()[-2:]
        for line in terminal.render(summarize_run(data), verbose=True).splitlines()
        if line.startswith("pickle")
    ]
    assert ["unsupported", "FAILED"] in cells
    page = report.render(summarize_run(data))
    assert ">unsupported</td>" in page and ">failed</td>" in page


class Counting:
    """msgspec-frombuffer, counting its encodes."""

    def __init__(self) -> None:
        self.inner = get_serializer("msgspec-frombuffer")
        self.name = self.inner.name
        self.encodes = 0

    def encode(self, obj):
        self.encodes += 1
        return self.inner.encode(obj)

    def decode(self, frames, type_):
        return self.inner.decode(frames, type_)


def test_a_message_verified_earlier_in_the_run_is_not_round_tripped_again() -> None:
    serializer, messages = Counting(), list(get_workload("text-sonnet").requests(3))
    key = ("msgspec-frombuffer", "text-sonnet")
    conformance.forget()
    first = conformance.verify(serializer, messages[:2], "request", key)
    assert (serializer.encodes, first.earlier) == (2, 0)
    assert first.keys == [[*key, "request", 0], [*key, "request", 1]]
    conformance.remember(first.keys)
    again = conformance.verify(serializer, messages, "request", key)
    assert (serializer.encodes, again.earlier, again.keys) == (3, 2, [[*key, "request", 2]])
    other = conformance.verify(serializer, messages[:1], "request", ("msgspec-frombuffer", "images-4"))
    assert (serializer.encodes, other.earlier) == (4, 0)  # another workload's message 0
    conformance.forget()
    assert conformance.verify(serializer, messages[:1], "request", key).earlier == 0


def test_a_run_verifies_each_message_once_across_scenarios(tmp_path: Path, ipc_sandbox: Path) -> None:
    plan = Plan(["msgspec-frombuffer"], [SMALL], ["micro", "ipc", "memory"])
    run = execute(plan, FAST, tmp_path / "r.json", ["run"])
    verified = {(r.scenario, r.backend): r.info.verification for r in run.results.records}
    assert verified["micro", "msgspec-frombuffer"].earlier == 0
    assert verified["ipc", "msgspec-frombuffer"].earlier == 1  # its request 0 is micro's message
    assert verified["memory", "msgspec-frombuffer"].earlier == 1
    # memory's zero-copy-off variant is another backend: verified on its own
    assert verified["memory", "msgspec-frombuffer:threshold=inf"].earlier == 0
    assert all(v.keys is None for v in verified.values())  # the run's memory, not the record's
