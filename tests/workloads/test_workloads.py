"""Workloads are deterministic, shaped like the models they imitate, and account for outputs."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from serbench.model.specs import SpecError
from serbench.workloads import available_workloads, default_workloads, get_workload, output_token
from serbench.workloads.text import OUTPUT_TOKENS, PREFIX_TOKENS, PROMPT_TOKENS
from serbench.workloads.tree import arrays, is_array, iter_leaves, payload_bytes, payload_checksum


def test_builtin_workloads() -> None:
    assert default_workloads() == ["text-sonnet", "images-4", "images-32"]
    assert payload_bytes(get_workload("images-8").request(0)) == 2 * payload_bytes(
        get_workload("images-4").request(0)
    )
    assert set(default_workloads()) < set(available_workloads())


def test_text_sonnet_lengths_and_shared_prefix() -> None:
    workload = get_workload("text-sonnet")
    first, second = workload.request(0), workload.request(1)
    assert len(first.prompt_token_ids) == PROMPT_TOKENS
    assert first.sampling_params.max_tokens == OUTPUT_TOKENS
    assert first.prompt_token_ids[:PREFIX_TOKENS] == second.prompt_token_ids[:PREFIX_TOKENS]
    assert first.prompt_token_ids[PREFIX_TOKENS:] != second.prompt_token_ids[PREFIX_TOKENS:]


def test_requests_are_deterministic_per_seed() -> None:
    for spec in ("text-sonnet", "images-4:profile=llava"):
        a, b = get_workload(spec).request(3), get_workload(spec).request(3)
        assert a.prompt_token_ids == b.prompt_token_ids
        assert payload_checksum(a) == payload_checksum(b)
    one, other = get_workload("images-4:profile=llava,seed=1"), get_workload("images-4:profile=llava,seed=2")
    assert payload_checksum(one.request(0)) != payload_checksum(other.request(0))


@pytest.mark.parametrize(
    ("spec", "shape", "dtype"),
    [
        ("images-4", (3, 896, 896), torch.float32),
        ("images-4:profile=llava", (3, 336, 336), torch.float32),
        ("images-4:profile=qwen2-vl,dtype=bfloat16", (72 * 72, 1176), torch.bfloat16),
    ],
)
def test_image_profiles(spec: str, shape: tuple, dtype: torch.dtype) -> None:
    workload = get_workload(spec)
    request = workload.request(0)
    items = request.mm_inputs.items_by_modality["image"]
    assert len(items) == 4
    pixels = [item.fields["pixel_values"].data for item in items]
    assert all(p.shape == shape and p.dtype == dtype for p in pixels)
    assert len({payload_checksum(p) for p in pixels}) == 4  # every image distinct
    assert payload_bytes(request) == workload.payload_bytes()
    assert len(request.mm_placeholders) == 4


def test_qwen2_vl_carries_every_field_kind_leaf() -> None:
    item = get_workload("images-4:profile=qwen2-vl").request(0).mm_inputs.items_by_modality["image"][0]
    assert item.fields["pixel_values"].kind == "flat"
    assert item.fields["image_grid_thw"].data.tolist() == [1, 72, 72]
    assert item.fields["second_per_grid_ts"].data == 1.0


def test_gemma_32_images_is_about_300_mb() -> None:
    assert get_workload("images-32").payload_bytes() == 32 * 3 * 896 * 896 * 4


def test_outputs_account_for_every_token() -> None:
    workload = get_workload("text-sonnet")
    step = workload.outputs(["a", "b"], 7, finished=True)
    assert [o.new_token_ids for o in step.outputs] == [[output_token("a", 7)], [output_token("b", 7)]]
    assert all(o.finish_reason == "length" for o in step.outputs)
    assert output_token("a", 7) != output_token("a", 8) or output_token("a", 8) != output_token("a", 9)


def test_any_image_count_on_request() -> None:
    request = get_workload("images-1:profile=llava").request(0)
    assert len(request.mm_inputs.items_by_modality["image"]) == 1


@pytest.mark.parametrize(
    "spec",
    [
        "images-0",
        "images-1000",
        "images-x",
        "images-4:profile=nope",
        "images-4:dtype=int8",
        "text-sonnet:x=1",
    ],
)
def test_bad_workload_specs(spec: str) -> None:
    with pytest.raises(SpecError):
        get_workload(spec)


def test_vllm_layout_carries_the_same_tensors_with_vllms_metadata() -> None:
    compact = get_workload("images-3:profile=qwen2-vl,layout=compact").request(0)
    vllm = get_workload("images-3:profile=qwen2-vl,layout=vllm").request(0)
    assert vllm.mm_inputs is None and compact.mm_features is None
    assert payload_checksum(vllm) == payload_checksum(compact)
    features = vllm.mm_features
    assert [len(f.identifier) for f in features] == [len(h) for h in compact.mm_hashes] == [64] * 3
    assert [f.mm_position.offset for f in features] == [p.offset for p in compact.mm_placeholders]
    pixels = features[1].data[0]
    assert (pixels.modality, pixels.key, pixels.field[0]) == ("image", "pixel_values", "flat")
    assert len(pixels.field[1]) == 3  # the slices of every image, in every image's field
    assert get_workload("images-2:layout=vllm").request(0).mm_features[0].data[0].field == ["batched"]


def test_an_unknown_layout_is_refused() -> None:
    with pytest.raises(ValueError, match="layouts: compact, vllm"):
        get_workload("images-2:layout=dense")


@pytest.mark.parametrize(
    "spec",
    ["text-sonnet", "images-3:profile=qwen2-vl", "images-2:layout=vllm", "outputs-4:logprobs=2,layout=flat"],
)
def test_arrays_are_the_array_leaves_in_order(spec: str) -> None:
    message = get_workload(spec).message(0)
    every = [leaf for leaf in iter_leaves(message) if is_array(leaf)]
    found = list(arrays(message))
    assert [id(a) for a in found] == [id(a) for a in every]
    assert len(found) > 0 or spec == "text-sonnet"


def test_text_content_is_the_same_under_any_hash_seed() -> None:
    """Counting perturbs PYTHONHASHSEED to move the interpreter's layout; the workload's content
    must not move with it."""
    script = (
        "from serbench.workloads import get_workload; "
        "print(get_workload('text-sonnet').request(3).prompt_token_ids)"
    )
    runs = {
        subprocess.run(
            [sys.executable, "-c", script],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in ("0", "1", "2")
    }
    assert len(runs) == 1 and runs.pop().startswith("[")


def test_what_the_harness_reads_of_a_request_is_the_workloads_to_say() -> None:
    """serbench's own requests are read by their field names; a repeat is the same request under
    another id; steps are already the model the frontend accounts; every backend may carry them."""
    workload = get_workload("text-sonnet")
    request = workload.request(1)
    about = workload.about(request)
    assert about.request_id == request.request_id == workload.request_id(1)
    assert list(about.prompt_token_ids) == request.prompt_token_ids and about.max_tokens == OUTPUT_TOKENS
    again = workload.renamed(request, "again")
    assert workload.about(again).request_id == "again" and again.prompt_token_ids == request.prompt_token_ids
    step = workload.outputs([about.request_id], 0)
    assert workload.in_model(step) is step
    assert workload.unsupported_by(object()) is None
