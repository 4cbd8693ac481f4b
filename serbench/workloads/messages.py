"""The frontend↔engine message types, modelled on vLLM v1's own.

``EngineCoreRequest`` goes from the frontend to the engine; the engine answers
with ``EngineCoreOutputs``, one per scheduler step. Multimodal inputs travel
in a ``MultiModalKwargs``: items grouped by modality, each item a dict of
field elements whose ``data`` is a nested tensor (a tensor, or a list of
nested tensors) or a plain float/int leaf, tagged with the field kind the
engine batches it by. Tensor-holding fields are typed ``Any`` so that every
backend decides for itself how a tensor crosses the wire.

That compact layout is serbench's own. vLLM's ``MultiModalKwargsItems`` as
its msgpack codec puts them on the wire are larger: one
``MultiModalFeatureSpec`` per item (``EngineCoreRequest.mm_features``), whose
data is a list of field elements, each a map repeating its modality and key
and carrying its whole field (a flat field: the slices of *every* item of the
batch). ``VllmFieldElem``, ``VllmPlaceholderRange`` and
``MultiModalFeatureSpec`` are those maps, keys in vLLM's order.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Literal

import msgspec

FieldKind = Literal["batched", "flat", "shared"]


class SamplingParams(msgspec.Struct, array_like=True, omit_defaults=True):
    """The subset of vLLM's SamplingParams that a request carries on the wire."""

    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    seed: int | None = None
    max_tokens: int = 16
    min_tokens: int = 0
    stop_token_ids: list[int] = []
    logprobs: int | None = None
    ignore_eos: bool = False


class MultiModalFieldElem(msgspec.Struct, array_like=True, omit_defaults=True):
    """One field of one multimodal item.

    ``kind`` says how the engine batches it: ``batched`` stacks items,
    ``flat`` concatenates along dim 0 (``slices`` locate this item's rows),
    ``shared`` is one value for the whole batch (``batch_size`` items).
    """

    modality: str
    key: str
    data: Any
    kind: FieldKind = "batched"
    slices: list[list[int]] | None = None
    batch_size: int | None = None


class MultiModalKwargsItem(msgspec.Struct, array_like=True):
    """All fields of one image (or other multimodal item), by field key."""

    fields: dict[str, MultiModalFieldElem]


class MultiModalKwargs(msgspec.Struct, array_like=True):
    """A request's multimodal inputs: items grouped by modality."""

    items_by_modality: dict[str, list[MultiModalKwargsItem]]


class PlaceholderRange(msgspec.Struct, array_like=True):
    """Where an item's embedding tokens sit in the prompt."""

    offset: int
    length: int


class VllmFieldElem(msgspec.Struct):
    """vLLM's ``MultiModalFieldElem`` on the wire: a map with its element metadata.

    ``field`` is vLLM's field as its codec writes it: ``["batched"]``,
    ``["flat", [[start, stop, step], ...], dim]`` or ``["shared", batch_size]``.
    """

    modality: str
    key: str
    data: Any
    field: list[Any]


class VllmPlaceholderRange(msgspec.Struct):
    """vLLM's ``PlaceholderRange`` dataclass, a map on the wire."""

    offset: int
    length: int
    is_embed: Any = None


class MultiModalFeatureSpec(msgspec.Struct):
    """One multimodal item as vLLM's ``EngineCoreRequest.mm_features`` carries it."""

    data: list[VllmFieldElem] | None
    modality: str
    identifier: str
    mm_position: VllmPlaceholderRange


class EngineCoreRequest(msgspec.Struct, array_like=True, omit_defaults=True):
    """A request as the engine receives it: token ids, not text."""

    request_id: str
    prompt_token_ids: list[int]
    sampling_params: SamplingParams
    arrival_time: float
    mm_inputs: MultiModalKwargs | None = None
    mm_hashes: list[str] | None = None
    mm_placeholders: list[PlaceholderRange] | None = None
    eos_token_id: int | None = None
    cache_salt: str | None = None
    mm_features: list[MultiModalFeatureSpec] | None = None  # the vllm layout, instead of mm_inputs


class Logprobs(msgspec.Struct, array_like=True):
    """One request's logprobs for one step, as vLLM's ``LogprobsLists``: per-request Python lists.

    One row per new token: ``token_ids[i]`` is the sampled token followed by
    the top-K alternatives, ``logprobs[i]`` their logprobs, ``ranks[i]`` the
    sampled token's rank in the vocabulary.
    """

    token_ids: list[list[int]]
    logprobs: list[list[float]]
    ranks: list[int]


class EngineCoreOutput(msgspec.Struct, array_like=True, omit_defaults=True):
    """One step's new tokens for one request (``layout=nested``: everything per request)."""

    request_id: str
    new_token_ids: list[int]
    finish_reason: str | None = None
    new_logprobs: Logprobs | None = None


class EngineCoreOutputs(msgspec.Struct, array_like=True, omit_defaults=True):
    """One step's outputs for every running request."""

    outputs: list[EngineCoreOutput] = []
    timestamp: float = 0.0
    engine_index: int = 0

    def entries(self) -> Iterator[tuple[str, list[int], str | None]]:
        """(request id, new token ids, finish reason) per request: what the frontend accounts."""
        for out in self.outputs:
            yield out.request_id, out.new_token_ids, out.finish_reason


class FlatLogprobs(msgspec.Struct, array_like=True):
    """A whole step's logprobs as three arrays, rows aligned with ``FlatEngineCoreOutputs.new_token_ids``.

    ``token_ids`` int32 ``(rows, K+1)`` (sampled token, then the top K),
    ``logprobs`` float32 ``(rows, K+1)``, ``ranks`` int32 ``(rows,)``.
    """

    token_ids: Any
    logprobs: Any
    ranks: Any


class FlatEngineCoreOutputs(msgspec.Struct, array_like=True, omit_defaults=True):
    """One step's outputs as a few contiguous arrays for the whole batch (``layout=flat``).

    Request ``i``'s new tokens (and logprob rows) are
    ``new_token_ids[token_offsets[i]:token_offsets[i + 1]]``; ``finished``
    maps the index of each request that ended in this step to its reason.
    The arrays are tensors, so the msgpack backends carry them zero-copy.
    """

    request_ids: list[str]
    new_token_ids: Any
    token_offsets: Any
    finished: dict[int, str] = {}
    logprobs: FlatLogprobs | None = None
    timestamp: float = 0.0
    engine_index: int = 0

    def entries(self) -> Iterator[tuple[str, list[int], str | None]]:
        """(request id, new token ids, finish reason) per request, sliced from the arrays."""
        tokens, offsets = self.new_token_ids.tolist(), self.token_offsets.tolist()
        for i, rid in enumerate(self.request_ids):
            yield rid, tokens[offsets[i] : offsets[i + 1]], self.finished.get(i)
