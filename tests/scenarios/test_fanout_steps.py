"""What a fan-out worker checks of every step it decodes (``fanout_steps.check_step``): the step
sent passes, through a backend and back; any change to a field, a key or an array fails."""

from __future__ import annotations

import pickle
from collections.abc import Callable
from typing import Any

import pytest
import torch

from serbench.scenarios.fanout import steps as fanout_steps


def _sent(workload: str, index: int) -> tuple[Any, int]:
    prefills, schedule = fanout_steps.case_steps(workload, 2, 1, "none")
    step = schedule.step(index, prefills)
    return step, fanout_steps.step_checksum(step, prefills.crc(0) if step.new_requests else 0)


def _image(step: Any) -> torch.Tensor:
    return step.new_requests[0].mm_inputs.items_by_modality["image"][0].fields["pixel_values"].data


def _rename_modality(step: Any) -> None:
    by_modality = step.new_requests[0].mm_inputs.items_by_modality
    by_modality["video"] = by_modality.pop("image")


CHANGES: dict[str, Callable[[Any], None]] = {
    "a token id": lambda step: step.new_requests[0].prompt_token_ids.__setitem__(5, 7),
    "a block id": lambda step: step.new_block_ids[0].__setitem__(0, 10**6),
    "an image's bytes": lambda step: _image(step).view(-1)[0].add_(1),
    "an image's dtype": lambda step: setattr(
        step.new_requests[0].mm_inputs.items_by_modality["image"][0].fields["pixel_values"],
        "data",
        _image(step).view(torch.int32),
    ),
    "a mapping's key": _rename_modality,
}


@pytest.mark.parametrize("workload", ["text-sonnet", "images-1"])
@pytest.mark.parametrize("index", [0, 1])  # a prefill step, then a decode step
def test_the_step_sent_passes_after_a_round_trip(workload: str, index: int) -> None:
    step, checksum = _sent(workload, index)
    fanout_steps.check_step(pickle.loads(pickle.dumps(step)), checksum)


@pytest.mark.parametrize("change", CHANGES)
def test_any_change_to_a_prefill_step_fails_the_check(change: str) -> None:
    step, checksum = _sent("images-1", 0)
    decoded = pickle.loads(pickle.dumps(step))
    CHANGES[change](decoded)
    with pytest.raises(ValueError, match="checksum mismatch"):
        fanout_steps.check_step(decoded, checksum)


def test_what_is_not_a_step_is_refused_by_name() -> None:
    _, checksum = _sent("text-sonnet", 1)
    with pytest.raises(ValueError, match="decoded a dict, not a step"):
        fanout_steps.check_step({}, checksum)
