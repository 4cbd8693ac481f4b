"""``layout=vllm-native``: serbench's deterministic content as vLLM's own message objects.

``images-N:layout=vllm-native`` is ``images-N:layout=vllm`` (the same pixels, hashes,
placeholders and prompt, every other option too) with each request built as the
installed vLLM's ``EngineCoreRequest``: its ``SamplingParams``, one
``MultiModalFeatureSpec`` per image whose data is a ``MultiModalKwargsItem`` of
``MultiModalFieldElem``s with vLLM's field objects (batched, flat with slices).
The engine's steps stay serbench's ``EngineCoreOutputs`` (what the ipc frontend
accounts). Registered under the entry-point group ``serbench.layouts``
(``serbench.workloads.get_workload``); version differences live in ``adapter``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from serbench.specs import Spec, SpecError
from serbench.vllm import adapter
from serbench.workloads import Running, Workload
from serbench.workloads.messages import EngineCoreRequest, MultiModalFeatureSpec, VllmFieldElem

NAME = "vllm-native"
MODEL_LAYOUT = "vllm"  # serbench's own model of the same wire shape: the content comes from it


def layout(spec: Spec, build: Callable[[Spec], Workload]) -> Workload:
    """The ``serbench.layouts`` entry point: ``spec`` with ``layout=vllm-native``; ``build`` makes
    serbench's own workload of a spec. SpecError (one line: what to install) without vLLM."""
    try:
        adapter.load()
    except adapter.Missing as exc:
        raise SpecError(str(exc)) from None
    if not spec.name.startswith("images-"):
        raise SpecError(f"layout={NAME} is built for images-N only, not {spec.name!r}")
    return NativeImages(build(Spec(spec.name, {**spec.options, "layout": MODEL_LAYOUT})))


class NativeImages(Workload):
    """``images-N`` as vLLM's own ``EngineCoreRequest``s; everything else is the model workload's."""

    def __init__(self, model: Workload) -> None:
        self.model = model
        self.description = f"{model.description.replace(', vllm layout', '')}, vLLM's own message types"
        self.output_len = model.output_len
        self.seed = model.seed
        self.kind = model.kind
        self.message_type = model.message_type
        self.request_type = adapter.load().EngineCoreRequest  # what the engine decodes

    @property
    def name(self) -> str:  # one name for both: the model's request ids are this workload's
        return self.model.name

    @name.setter
    def name(self, value: str) -> None:
        self.model.name = value

    def __getattr__(self, name: str) -> Any:  # the model's extras (image keys, repeats) pass through
        return getattr(self.__dict__["model"], name)

    def request_id(self, index: int) -> str:
        return self.model.request_id(index)

    def payload_bytes(self) -> int:
        return self.model.payload_bytes()

    def request(self, index: int) -> Any:
        return native_request(self.model.request(index))

    def step(self, running: Sequence[Running]) -> Any:
        return self.model.step(running)

    def check(self, message: Any) -> None:
        self.model.check(message)


def native_request(request: EngineCoreRequest) -> Any:
    """serbench's ``layout=vllm`` request as the installed vLLM's ``EngineCoreRequest``."""
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
