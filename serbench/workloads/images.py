"""``images-N``: one prompt with N images, as three vision models lay them out.

Profiles (docs/architecture.md, "History"):

* ``gemma``: ``pixel_values`` float ``(3, 896, 896)`` per image (9.6 MB in float32);
* ``qwen2-vl``: flattened patches ``(t·h·w, 1176)`` per image (flat field with
  slices), ``image_grid_thw`` int64 ``(3,)`` and a ``second_per_grid_ts`` float;
  about 24 MB per 1-Mpix image in float32;
* ``llava``: ``pixel_values`` ``(3, 336, 336)``.

Layouts (``layout=``):

* ``compact`` (the default): serbench's own ``MultiModalKwargs``, items by
  modality, each field one small array-like record;
* ``vllm``: the shape of vLLM's ``MultiModalKwargsItems`` as its msgpack
  codec writes them: per item a ``MultiModalFeatureSpec`` (hash, placeholder)
  whose data is a list of field maps, each repeating modality and key and
  carrying its field, a flat field with the slices of every item.

The default stays compact so that results stay comparable with earlier runs;
``layout=vllm`` shows what the real metadata adds (docs/conformance.md).

Pixel values are seeded random numbers, so a stale or corrupted buffer never
passes for the real one.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import torch

from serbench.workloads.base import Workload
from serbench.workloads.messages import (
    EngineCoreRequest,
    MultiModalFeatureSpec,
    MultiModalFieldElem,
    MultiModalKwargs,
    MultiModalKwargsItem,
    PlaceholderRange,
    SamplingParams,
    VllmFieldElem,
    VllmPlaceholderRange,
)

IMAGE_COUNTS = (4, 32)  # the default matrix: both ends; payload costs are linear between (docs/workloads.md)
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
LAYOUTS = ("compact", "vllm")
TEXT_TOKENS = 64
IMAGE_TOKEN = 262_144


@dataclass(frozen=True)
class Profile:
    """How one model lays out an image: tensor shape and prompt tokens per image."""

    name: str
    pixel_shape: tuple[int, ...]
    tokens_per_image: int
    grid_thw: tuple[int, int, int] | None = None


# Qwen2-VL: a 1008x1008 image is a 72x72 grid of 14-pixel patches, 1176 values each
# (2 frames x 3 channels x 14 x 14), merged 2x2 into one token.
PROFILES = {
    "gemma": Profile("gemma", (3, 896, 896), 256),
    "qwen2-vl": Profile("qwen2-vl", (72 * 72, 1176), 72 * 72 // 4, (1, 72, 72)),
    "llava": Profile("llava", (3, 336, 336), 576),
}


class Images(Workload):
    """One request with ``count`` images of a model profile."""

    output_len = 16

    def __init__(
        self,
        count: int,
        profile: str = "gemma",
        dtype: str = "float32",
        seed: int | str = 0,
        layout: str = "compact",
    ) -> None:
        if profile not in PROFILES:
            raise ValueError(f"unknown profile {profile!r}; profiles: {', '.join(PROFILES)}")
        if dtype not in DTYPES:
            raise ValueError(f"unknown dtype {dtype!r}; dtypes: {', '.join(DTYPES)}")
        if layout not in LAYOUTS:
            raise ValueError(f"unknown layout {layout!r}; layouts: {', '.join(LAYOUTS)}")
        self.layout = layout
        self.count = count
        self.profile = PROFILES[profile]
        self.dtype = DTYPES[dtype]
        self.seed = int(seed)
        self.name = f"images-{count}"
        self.description = (
            f"{count} images, {profile} profile {self.profile.pixel_shape} {dtype}, {layout} layout"
        )

    def payload_bytes(self) -> int:
        per_image = self.dtype.itemsize
        for dim in self.profile.pixel_shape:
            per_image *= dim
        if self.profile.grid_thw:
            per_image += 3 * 8
        return per_image * self.count

    def request(self, index: int) -> EngineCoreRequest:
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + index)
        base = torch.rand(self.profile.pixel_shape, generator=gen)
        # One random draw per request, shifted per image: distinct bytes for
        # every image at memory speed rather than at random-number speed.
        pixels = [(base + image / self.count).to(self.dtype) for image in range(self.count)]
        hashes = [
            hashlib.sha256(f"{self.request_id(index)}/{i}".encode()).hexdigest() for i in range(self.count)
        ]
        offsets = [TEXT_TOKENS + i * self.profile.tokens_per_image for i in range(self.count)]
        prompt = [1 + (index + i) % 1000 for i in range(TEXT_TOKENS)]
        prompt += [IMAGE_TOKEN] * (self.count * self.profile.tokens_per_image)
        request = EngineCoreRequest(
            request_id=self.request_id(index),
            prompt_token_ids=prompt,
            sampling_params=SamplingParams(temperature=0.0, max_tokens=self.output_len, ignore_eos=True),
            arrival_time=0.0,
            eos_token_id=1,
        )
        if self.layout == "vllm":
            request.mm_features = [
                MultiModalFeatureSpec(
                    self._vllm_fields(image, pixels),
                    "image",
                    hashes[image],
                    VllmPlaceholderRange(offsets[image], self.profile.tokens_per_image),
                )
                for image in range(self.count)
            ]
        else:
            request.mm_inputs = MultiModalKwargs({"image": [self._item(p) for p in pixels]})
            request.mm_hashes = hashes
            request.mm_placeholders = [PlaceholderRange(o, self.profile.tokens_per_image) for o in offsets]
        return request

    def _item(self, pixels: torch.Tensor) -> MultiModalKwargsItem:
        grid = self.profile.grid_thw
        if grid is None:
            return MultiModalKwargsItem(
                {"pixel_values": MultiModalFieldElem("image", "pixel_values", pixels)}
            )
        rows = pixels.shape[0]
        return MultiModalKwargsItem(
            {
                "pixel_values": MultiModalFieldElem(
                    "image", "pixel_values", pixels, "flat", slices=[[0, rows]]
                ),
                "image_grid_thw": MultiModalFieldElem(
                    "image", "image_grid_thw", torch.tensor(grid, dtype=torch.int64)
                ),
                "second_per_grid_ts": MultiModalFieldElem("image", "second_per_grid_ts", 1.0),
            }
        )

    def _vllm_fields(self, image: int, pixels: list[torch.Tensor]) -> list[VllmFieldElem]:
        """Image ``image``'s fields as vLLM's codec writes them: each with modality, key and its
        whole field (a flat field lists the slices of every image of the request)."""
        grid = self.profile.grid_thw
        if grid is None:
            return [VllmFieldElem("image", "pixel_values", pixels[image], ["batched"])]
        rows = pixels[image].shape[0]
        slices = [[i * rows, (i + 1) * rows, None] for i in range(len(pixels))]
        return [
            VllmFieldElem("image", "pixel_values", pixels[image], ["flat", slices, 0]),
            VllmFieldElem("image", "image_grid_thw", torch.tensor(grid, dtype=torch.int64), ["batched"]),
            VllmFieldElem("image", "second_per_grid_ts", 1.0, ["batched"]),
        ]
