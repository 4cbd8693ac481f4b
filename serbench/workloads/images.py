"""``images-N``: one prompt with N images, as three vision models lay them out.

Profiles (``PROFILES``, docs/architecture.md, "History"): ``gemma`` and ``llava`` send
``pixel_values`` per image; ``qwen2-vl`` flattened patches (a flat field with slices), its
``image_grid_thw`` and a ``second_per_grid_ts``.

Layouts (``layout=``): ``compact`` (the default), serbench's own ``MultiModalKwargs``, items by
modality, each field one small array-like record; ``vllm``, vLLM's ``MultiModalKwargsItems`` as
its msgpack codec writes them: per item a ``MultiModalFeatureSpec`` whose field maps each repeat
modality and key. The default stays compact so that results stay comparable with earlier runs;
``layout=vllm`` shows what the real metadata adds (docs/conformance.md).

Pixel values are seeded random numbers, so a stale or corrupted buffer never passes for the real
one. Every image has a key (the request it first appeared in, its slot there), its pixels and its
hash (``mm_hashes``, or the vllm layout's ``identifier``) functions of the key: the same image is
the same bytes under the same hash in every request that sends it, and two images never share a
hash. ``turns`` and ``repeat`` send images again (``Images``, docs/cache.md); ``repeats(i)`` and
``defined_hit_ratio(n)`` say what an unbounded cache would find, what a measured hit ratio is
checked against.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections import OrderedDict
from dataclasses import dataclass

from serbench.runtime import lazy
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

torch = lazy.torch(__name__)  # imported on first use: `serbench list` describes workloads without it

DTYPE_BYTES = {"float32": 4, "bfloat16": 2}  # a pixel's bytes, known without importing torch
LAYOUTS = ("compact", "vllm")
TEXT_TOKENS = 64
IMAGE_TOKEN = 262_144
PIXEL_MEMO = 16  # generated images kept for the requests that send them again

Key = tuple[int, int]  # an image: (the request it first appeared in, its slot there)


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
    """One request with ``count`` images of a model profile.

    ``turns=T``: conversations of T requests; turn t (1-based) sends ceil(N·t/T) images, the
    earlier turns' images again, in order, then new ones (the last turn has N), the way chat
    clients resend a conversation. ``repeat=R``: request i ≥ 1 sends round(R·N) of the previous
    request's images again (chosen and placed by a seeded draw) and N − round(R·N) new ones;
    request 0 is all new.
    """

    output_len = 16

    def __init__(
        self,
        count: int,
        profile: str = "gemma",
        dtype: str = "float32",
        seed: int | str = 0,
        layout: str = "compact",
        turns: int | str = 1,
        repeat: float | str = 0.0,
    ) -> None:
        if profile not in PROFILES:
            raise ValueError(f"unknown profile {profile!r}; profiles: {', '.join(PROFILES)}")
        if dtype not in DTYPE_BYTES:
            raise ValueError(f"unknown dtype {dtype!r}; dtypes: {', '.join(DTYPE_BYTES)}")
        if layout not in LAYOUTS:
            raise ValueError(f"unknown layout {layout!r}; layouts: {', '.join(LAYOUTS)}")
        self.turns, self.repeat = int(turns), float(repeat)
        if self.turns < 1 or self.turns > count:
            raise ValueError(f"turns must be between 1 and the image count {count}, got {turns}")
        if not 0.0 <= self.repeat <= 1.0:
            raise ValueError(f"repeat must be a fraction in [0, 1], got {repeat}")
        if self.turns > 1 and self.repeat:
            raise ValueError("turns and repeat are exclusive: a conversation already defines its repeats")
        self.layout = layout
        self.count = count
        self.profile = PROFILES[profile]
        self.dtype_name = dtype
        self.seed = int(seed)
        self.name = f"images-{count}"
        self.description = (
            f"{count} images, {profile} profile {self.profile.pixel_shape} {dtype}, {layout} layout"
        )
        if self.turns > 1:
            self.description += f", conversations of {self.turns} turns"
        if self.repeat:
            self.description += f", {self.repeat:g} of each request's images sent before"
        self._keys: dict[int, list[Key]] = {}
        self._pixels: OrderedDict[Key, torch.Tensor] = OrderedDict()

    @property
    def repeating(self) -> bool:
        """Whether a request sends images that an earlier one sent."""
        return self.turns > 1 or self.repeat > 0

    def image_keys(self, index: int) -> list[Key]:
        """The keys of request ``index``'s images, in order (deterministic from the seed)."""
        if self.turns > 1:
            conversation, turn = divmod(index, self.turns)
            return [(conversation * self.turns + self._first_turn(k), k) for k in range(self._shown(turn))]
        if not self.repeat:
            return [(index, slot) for slot in range(self.count)]
        for i in range(len(self._keys), index + 1):
            if i not in self._keys:
                self._keys[i] = self._draw(i)
        return self._keys[index]

    def _shown(self, turn: int) -> int:
        """Images of a conversation's turn ``turn`` (0-based)."""
        return math.ceil(self.count * (turn + 1) / self.turns)

    def _first_turn(self, image: int) -> int:
        return next(t for t in range(self.turns) if self._shown(t) > image)

    def _draw(self, index: int) -> list[Key]:
        if index == 0:
            return [(0, slot) for slot in range(self.count)]
        again = round(self.repeat * self.count)
        rng = random.Random(self.seed * 1_000_003 + index)
        keys = rng.sample(self.image_keys(index - 1), again)
        keys += [(index, slot) for slot in range(again, self.count)]
        rng.shuffle(keys)
        return keys

    def repeats(self, index: int) -> int:
        """How many of request ``index``'s images an earlier request sent (an unbounded cache's hits)."""
        if self.turns > 1:
            turn = index % self.turns
            return self._shown(turn - 1) if turn else 0
        return sum(origin < index for origin, _ in self.image_keys(index))

    def defined_hit_ratio(self, requests: int) -> float:
        """The share of the first ``requests`` requests' images that were sent before."""
        images = sum(len(self.image_keys(i)) for i in range(requests))
        return sum(self.repeats(i) for i in range(requests)) / images if images else 0.0

    def image_hash(self, key: Key) -> str:
        """The hash of an image: of its key, which its bytes are a pure function of."""
        return hashlib.sha256(f"{self.request_id(key[0])}/{key[1]}".encode()).hexdigest()

    def _image(self, key: Key) -> torch.Tensor:
        """An image's pixels: request ``origin``'s seeded draw, shifted by the slot (distinct bytes
        for every image at memory speed rather than at random-number speed)."""
        pixels = self._pixels.get(key)
        if pixels is None:
            origin, slot = key
            gen = torch.Generator().manual_seed(self.seed * 1_000_003 + origin)
            base = torch.rand(self.profile.pixel_shape, generator=gen)
            pixels = (base + slot / self.count).to(getattr(torch, self.dtype_name))
            if self.repeating:
                self._pixels[key] = pixels
                while len(self._pixels) > max(PIXEL_MEMO, 2 * self.count):
                    self._pixels.popitem(last=False)
        return pixels

    def payload_bytes(self) -> int:
        """Tensor bytes of the largest request (with ``turns``, the last turn's)."""
        return self._payload_of(self.count)

    def _payload_of(self, count: int) -> int:
        per_image = DTYPE_BYTES[self.dtype_name]
        for dim in self.profile.pixel_shape:
            per_image *= dim
        if self.profile.grid_thw:
            per_image += 3 * 8
        return per_image * count

    def request(self, index: int) -> EngineCoreRequest:
        keys = self.image_keys(index)
        if self.repeating:
            pixels = [self._image(key) for key in keys]
        else:  # one draw per request, as before keys: the same bytes, no memo
            gen = torch.Generator().manual_seed(self.seed * 1_000_003 + index)
            base = torch.rand(self.profile.pixel_shape, generator=gen)
            dtype = getattr(torch, self.dtype_name)
            pixels = [(base + slot / self.count).to(dtype) for _, slot in keys]
        hashes = [self.image_hash(key) for key in keys]
        count = len(keys)
        offsets = [TEXT_TOKENS + i * self.profile.tokens_per_image for i in range(count)]
        prompt = [1 + (index + i) % 1000 for i in range(TEXT_TOKENS)]
        prompt += [IMAGE_TOKEN] * (count * self.profile.tokens_per_image)
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
                for image in range(count)
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
