"""``layout=vllm-native``: serbench's deterministic content as vLLM's own message objects.

``images-N:layout=vllm-native`` is ``images-N:layout=vllm`` (the same pixels, hashes, placeholders
and prompt, every other option too) with each request built as the installed vLLM's
``EngineCoreRequest``: its ``SamplingParams``, one ``MultiModalFeatureSpec`` per image whose data is
a ``MultiModalKwargsItem`` of ``MultiModalFieldElem``s with vLLM's field objects (batched, flat
with slices). The engine's steps stay serbench's ``EngineCoreOutputs`` (what the ipc frontend
accounts).

``outputs-B:layout=vllm-native`` is ``outputs-B`` (the same tokens, logprob rows, ranks and finish
pattern; ``logprobs=``, ``seed=``, ``steps=`` pass through) with each step built as vLLM's engine
builds it: the step's logprob tensors through vLLM's ``LogprobsTensors.tolists()``, one
``EngineCoreOutput`` per request holding its row of that ``LogprobsLists`` (numpy arrays in 0.33)
and a ``FinishReason``, in an ``EngineCoreOutputs``; its requests are vLLM's ``EngineCoreRequest``s.

The multimodal cache (docs/cache.md) walks vLLM's own requests with ``FeatureWalk``
(``Native.cache_walk``), as vLLM's sender and receiver caches meet them: a whole feature per entry,
a hit sent as the feature with ``data=None``. Registered under the entry-point group
``serbench.layouts`` (``serbench.workloads.get_workload``); version differences live in ``adapter``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import msgspec
import numpy as np

from serbench.model.specs import Spec, SpecError
from serbench.plugins.vllm import adapter
from serbench.workloads import Running, Workload
from serbench.workloads.base import Relaid, relaid
from serbench.workloads.messages import (
    EngineCoreOutput,
    EngineCoreOutputs,
    EngineCoreRequest,
    FlatEngineCoreOutputs,
    Logprobs,
    MultiModalFeatureSpec,
    VllmFieldElem,
)

NAME = "vllm-native"
# vLLM stamps each step with time.monotonic() (a float on the wire either way); a fixed one keeps a
# workload's step deterministic. The ipc engine stamps its steps with the time, as it does serbench's.
STEP_TIMESTAMP = 1.0


def layout(spec: Spec, build: Callable[[Spec], Workload]) -> Workload:
    """The ``serbench.layouts`` entry point: ``spec`` with ``layout=vllm-native``; ``build`` makes
    serbench's own workload of a spec. SpecError (one line: what to install) without vLLM."""
    try:
        adapter.load()
    except adapter.Missing as exc:
        raise SpecError(str(exc)) from None
    return relaid(spec, build, NAME, NATIVE, "images-N and outputs-B")


class FeatureWalk:
    """How serbench's multimodal cache (``serbench.links.cache.Walk``) meets vLLM's own requests, as vLLM's
    processor caches do: a payload is one ``MultiModalFeatureSpec``'s whole item
    (``MultiModalKwargsItem``), keyed by its ``identifier``; a reference travels as vLLM sends a
    hit, the feature with ``data=None``, serbench's reference string in its ``mm_hash`` (the field
    vLLM keys its processor cache by); the receiver fills ``data`` back (and ``mm_hash`` as built:
    None). The shm store holds the item in vLLM's own encoding, as vLLM's shm cache does."""

    def map(self, request: Any, fn: Callable[[str, Any], Any]) -> Any:
        if not request.mm_features:
            return request
        return msgspec.structs.replace(request, mm_features=[_through(f, fn) for f in request.mm_features])

    def stored(self, payload: Any) -> np.ndarray:
        return adapter.item_bytes(payload)

    def loaded(self, array: Any) -> Any:
        return adapter.item_of(array)


def _through(feature: Any, fn: Callable[[str, Any], Any]) -> Any:
    """``feature`` with its item, or the reference sent in its place, through ``fn``."""
    sent = feature.data if feature.data is not None else feature.mm_hash
    value = fn(feature.identifier, sent)
    if value is sent:
        return feature
    if isinstance(value, str):  # a reference: sent as vLLM sends a cached feature
        return dataclasses.replace(feature, data=None, mm_hash=value)
    return dataclasses.replace(feature, data=value, mm_hash=None)


class Native(Relaid):
    """serbench's workload ``model`` with its requests as vLLM's own ``EngineCoreRequest``s; everything
    else is the model's. ``model_layout`` is the model's layout whose content it carries."""

    cache_walk = FeatureWalk()  # how the multimodal cache meets these requests (serbench.links.cache)
    model_words: str  # what the model's description says of its layout, left out of this one's

    def __init__(self, model: Workload) -> None:
        description = f"{model.description.replace(self.model_words, '')}, vLLM's own message types"
        super().__init__(model, description, adapter.load().EngineCoreRequest)  # what the engine decodes

    def request(self, index: int) -> Any:
        return native_request(self.model.request(index))


class NativeImages(Native):
    """``images-N`` as vLLM's own ``EngineCoreRequest``s; the engine's steps stay serbench's."""

    model_layout = "vllm"  # serbench's own model of the same wire shape
    model_words = ", vllm layout"


class NativeOutputs(Native):
    """``outputs-B``'s steps as vLLM's own ``EngineCoreOutputs``, built from the model's flat step
    (the whole step's arrays, which vLLM's engine too holds before it splits them by request)."""

    model_layout = "flat"
    model_words = ", flat"

    def __init__(self, model: Workload) -> None:
        super().__init__(model)
        self.message_type = adapter.load().EngineCoreOutputs  # what the frontend decodes

    def message(self, index: int = 0) -> Any:
        return native_outputs(self.model.message(index))

    def step(self, running: Sequence[Running]) -> Any:
        return native_outputs(self.model.step(running))

    def in_model(self, message: Any) -> EngineCoreOutputs:
        return model_outputs(message)

    def check(self, message: Any) -> None:
        """ValueError unless every logprob row is the one its sampled token implies (the model's check)."""
        self.model.check(model_outputs(message))


NATIVE: dict[str, type[Native]] = {"images": NativeImages, "outputs": NativeOutputs}


def native_outputs(step: FlatEngineCoreOutputs) -> Any:
    """serbench's flat step as the installed vLLM's engine sends it: per request an ``EngineCoreOutput``
    with its new tokens, its row of the step's ``LogprobsLists`` and its ``FinishReason``."""
    vllm = adapter.load()
    rows = step.logprobs
    # vLLM's sampler counts a token's rank with a sum: int64 (serbench's model keeps int32)
    lists = None if rows is None else adapter.step_logprobs(rows.token_ids, rows.logprobs, rows.ranks.long())
    return vllm.EngineCoreOutputs(
        outputs=[
            vllm.EngineCoreOutput(
                request_id=rid,
                new_token_ids=tokens,
                new_logprobs=None if lists is None else adapter.request_logprobs(lists, index),
                finish_reason=None if reason is None else vllm.FinishReason[reason.upper()],
            )
            for index, (rid, tokens, reason) in enumerate(step.entries())
        ],
        timestamp=STEP_TIMESTAMP,
    )


def model_outputs(message: Any) -> EngineCoreOutputs:
    """vLLM's ``EngineCoreOutputs`` as serbench's nested model of it, for the checks after a decode:
    each output's logprob rows stay as vLLM carried them (arrays; lists in older releases), which
    ``Outputs.check`` reads either way."""
    return EngineCoreOutputs(
        outputs=[
            EngineCoreOutput(
                out.request_id,
                out.new_token_ids,
                None if out.finish_reason is None else str(out.finish_reason),
                None if out.new_logprobs is None else Logprobs(*out.new_logprobs[:3]),
            )
            for out in message.outputs
        ]
    )


def native_request(request: EngineCoreRequest) -> Any:
    """serbench's request (``images-N:layout=vllm``'s, ``outputs-B``'s) as the installed vLLM's
    ``EngineCoreRequest``."""
    vllm = adapter.load()
    sp = request.sampling_params
    return adapter.engine_core_request(
        request_id=request.request_id,
        prompt_token_ids=request.prompt_token_ids,
        mm_features=[_feature(f, vllm) for f in request.mm_features] if request.mm_features else None,
        sampling_params=adapter.sampling_params(
            n=sp.n,
            temperature=sp.temperature,
            top_p=sp.top_p,
            top_k=sp.top_k,
            seed=sp.seed,
            max_tokens=sp.max_tokens,
            min_tokens=sp.min_tokens,
            stop_token_ids=sp.stop_token_ids,
            logprobs=sp.logprobs,
            ignore_eos=sp.ignore_eos,
        ),
        pooling_params=None,
        arrival_time=request.arrival_time,
        lora_request=None,
        cache_salt=request.cache_salt,
        data_parallel_rank=None,
    )


def _feature(feature: MultiModalFeatureSpec, vllm: Any) -> Any:
    item = vllm.MultiModalKwargsItem(
        {
            elem.key: adapter.field_elem(elem.modality, elem.key, elem.data, _field(elem))
            for elem in feature.data or ()
        }
    )
    pos = feature.mm_position
    return vllm.MultiModalFeatureSpec(
        data=item,
        modality=feature.modality,
        identifier=feature.identifier,
        mm_position=vllm.PlaceholderRange(offset=pos.offset, length=pos.length),
    )


def _field(elem: VllmFieldElem) -> Any:
    kind = elem.field[0]
    if kind == "batched":
        return adapter.batched_field()
    if kind == "flat":
        return adapter.flat_field([slice(*s) for s in elem.field[1]], elem.field[2])
    raise ValueError(f"field kind {kind!r} has no native counterpart here")
