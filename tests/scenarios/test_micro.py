"""micro's operations: the copy yardstick a round's backends share; a backend whose decode
consumes its frames timed on a frame of its own per decode, every frame it made given back."""

from __future__ import annotations

import dataclasses
import platform

import consuming_backends
import pytest

from serbench.model.errors import Terminated
from serbench.model.profiles import PROFILES
from serbench.probes import instructions
from serbench.scenarios.base import Case
from serbench.scenarios.micro import Micro, countable, given_back, operations, payload_copier
from serbench.serializers import get_serializer
from serbench.workloads import get_workload

CONSUMED_ONCE = "consuming_backends:consumed_once"
# Five samples whatever the machine's load: the time budget never ends the sampling early.
FIVE = dataclasses.replace(PROFILES["quick"], samples=5, max_metric_s=600.0)


def test_backends_timed_together_share_one_payload_copy() -> None:
    """A round times every backend on the same message: one copier (one set of target pages)
    serves them all; a case timed alone makes its own; text has nothing to copy."""
    message = get_workload("images-1").request(0)
    copy = payload_copier(message)
    ops = [operations(get_serializer(name), message, copy) for name in ("pickle", "msgspec-frombuffer")]
    assert all(op["copy_s"] is copy for op in ops)
    assert operations(get_serializer("pickle"), message)["copy_s"] is not copy  # alone: its own
    assert payload_copier(get_workload("text-sonnet").request(0)) is None


def test_a_decode_that_consumes_its_frames_gets_a_frame_of_its_own_every_call() -> None:
    """The backend refuses a frame decoded twice, so every decode micro timed had one of its own:
    one call a sample, five samples; and every frame made (the check's, the wire's, each
    encode's, each decode's) was decoded once, none left held."""
    before = set(consuming_backends.held)
    outcome = Micro().run(Case("micro", CONSUMED_ONCE, "images-1"), FIVE)
    assert len(outcome.metrics["decode_s"].values) == 5
    assert len(outcome.metrics["encode_s"].values) == len(outcome.metrics["roundtrip_s"].values) == 5
    assert outcome.info.loops["decode_s"] == outcome.info.loops["encode_s"] == 1
    assert outcome.metrics["frames"].median == 2  # its token and the pickle
    assert consuming_backends.held == before


# Every sample one call, so which decode is the Nth is fixed: 1 the check's, 2 the wire's frames
# given back, 3 the calibration's first decode, 4 and 5 its round trips; then per turn of samples
# an encode's frames given back (6), a decode (7), a round trip (8).
ONE_CALL = dataclasses.replace(FIVE, min_sample_s=0.0)


@pytest.mark.parametrize("at", [3, 5, 6, 7, 8])
def test_a_case_ended_midway_gives_back_every_frame_it_made(at: int) -> None:
    """Ended (as SIGTERM ends a case) in a timed decode, in a round trip and in giving an
    encode's frames back, each before the decode took its frame: that frame is given back on
    the way out all the same."""
    before = set(consuming_backends.held)
    with pytest.raises(Terminated):
        Micro().run(Case("micro", f"{CONSUMED_ONCE}:interrupt_at={at}", "images-1"), ONE_CALL)
    assert consuming_backends.held == before


@pytest.mark.skipif(
    platform.machine() not in ("x86_64", "AMD64"), reason="valgrind's client requests are x86-64"
)
def test_counted_calls_decode_a_fresh_frame_each_their_readying_uncounted() -> None:
    """``--measure instructions`` counts what micro times: each decode on a fresh frame, made in
    the call's one uncounted part (``skip_nothing`` subtracts it); run here off valgrind, where
    the client requests do nothing. A backend that consumes nothing counts as it always did."""
    message, before = get_workload("images-1").request(0), set(consuming_backends.held)
    ops = operations(get_serializer(CONSUMED_ONCE), message)
    with given_back(list(ops.values())):
        fns, empty = countable(
            {"decode_instructions": ops["decode_s"], "encode_instructions": ops["encode_s"]}
        )
        assert empty is instructions.skip_nothing
        for _ in range(3):
            fns["decode_instructions"]()
            fns["encode_instructions"]()
    assert consuming_backends.held == before
    plain = operations(get_serializer("pickle"), message)
    assert countable({"decode_instructions": plain["decode_s"]}) == (
        {"decode_instructions": plain["decode_s"]},
        None,
    )
