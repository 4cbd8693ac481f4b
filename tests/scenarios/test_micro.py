"""micro's operations: the copy yardstick a round's backends share."""

from __future__ import annotations

from serbench.scenarios.micro import operations, payload_copier
from serbench.serializers import get_serializer
from serbench.workloads import get_workload


def test_backends_timed_together_share_one_payload_copy() -> None:
    """A round times every backend on the same message: one copier (one set of target pages)
    serves them all; a case timed alone makes its own; text has nothing to copy."""
    message = get_workload("images-1").request(0)
    copy = payload_copier(message)
    ops = [operations(get_serializer(name), message, copy) for name in ("pickle", "msgspec-frombuffer")]
    assert all(op["copy_s"] is copy for op in ops)
    assert operations(get_serializer("pickle"), message)["copy_s"] is not copy  # alone: its own
    assert payload_copier(get_workload("text-sonnet").request(0)) is None
