"""``layout=sglang-native``: serbench's deterministic content as SGLang's own message objects.

``text-sonnet:layout=sglang-native`` is ``text-sonnet`` (the same 550/200/150 prompts) with each
request built as SGLang's tokenizer manager sends it to the scheduler: a
``TokenizedGenerateReqInput`` carrying the prompt's text and its ids (an ``array("q")``) and
SGLang's ``SamplingParams``. ``images-N:layout=sglang-native`` is ``images-N:layout=vllm`` (the same
pixels, hashes, placeholders and prompt, every other option too) with each request's ``mm_inputs``
a ``MultimodalProcessorOutput`` holding one ``MultimodalDataItem`` per image, as SGLang's processor
hands them over (``adapter.image_item``); those requests carry no prompt text, the model's having
none. The engine's steps stay serbench's. Registered under the entry-point group
``serbench.layouts`` (``serbench.workloads.get_workload``); version differences live in ``adapter``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from serbench.model.specs import Spec, SpecError
from serbench.plugins.sglang import adapter
from serbench.workloads import Workload
from serbench.workloads.base import Relaid
from serbench.workloads.messages import EngineCoreRequest, MultiModalFeatureSpec

NAME = "sglang-native"


def layout(spec: Spec, build: Callable[[Spec], Workload]) -> Workload:
    """The ``serbench.layouts`` entry point: ``spec`` with ``layout=sglang-native``; ``build`` makes
    serbench's own workload of a spec. SpecError (one line: what to install) without SGLang."""
    try:
        adapter.load()
    except adapter.Missing as exc:
        raise SpecError(str(exc)) from None
    native = NATIVE.get(spec.name.partition("-")[0])
    if native is None:
        raise SpecError(f"layout={NAME} is built for text-sonnet and images-N only, not {spec.name!r}")
    options = {k: v for k, v in spec.options.items() if k != "layout"}
    if native.model_layout is not None:
        options["layout"] = native.model_layout
    return native(build(Spec(spec.name, options)))


class Native(Relaid):
    """serbench's workload ``model`` with its requests as SGLang's own ``TokenizedGenerateReqInput``;
    everything else is the model's. ``model_layout`` is the model's layout whose content it carries."""

    model_layout: str | None

    def __init__(self, model: Workload) -> None:
        description = f"{model.description.split(', vllm layout')[0]}, SGLang's own message types"
        super().__init__(model, description, adapter.load().TokenizedGenerateReqInput)  # the scheduler's


class NativeText(Native):
    """``text-sonnet`` as SGLang's ``TokenizedGenerateReqInput``s: the prompt's text and ids."""

    model_layout = None

    def request(self, index: int) -> Any:
        return native_request(self.model.request(index), " ".join(self.model.prompt_words(index)), None)


class NativeImages(Native):
    """``images-N`` as SGLang's ``TokenizedGenerateReqInput``s with their ``mm_inputs``."""

    model_layout = "vllm"  # serbench's model with one feature per image

    def request(self, index: int) -> Any:
        request = self.model.request(index)
        items = [_item(feature) for feature in request.mm_features or ()]
        processed = adapter.load().MultimodalProcessorOutput
        mm_inputs = processed(mm_items=items, input_ids=request.prompt_token_ids)
        return native_request(request, None, mm_inputs)


NATIVE: dict[str, type[Native]] = {"text": NativeText, "images": NativeImages}


def native_request(request: EngineCoreRequest, text: str | None, mm_inputs: Any) -> Any:
    """serbench's request as SGLang's ``TokenizedGenerateReqInput``, with the prompt ``text``
    (None: none) and ``mm_inputs`` (SGLang's ``MultimodalProcessorOutput``, or None)."""
    sp = request.sampling_params
    return adapter.tokenized_request(
        request.prompt_token_ids,
        rid=request.request_id,
        input_text=text,
        input_embeds=None,
        mm_inputs=mm_inputs,
        token_type_ids=None,
        sampling_params=adapter.sampling_params(
            max_new_tokens=sp.max_tokens,
            min_new_tokens=sp.min_tokens,
            temperature=sp.temperature,
            top_p=sp.top_p,
            n=sp.n,
            stop_token_ids=set(sp.stop_token_ids) or None,
            ignore_eos=sp.ignore_eos,
        ),
        return_logprob=sp.logprobs is not None,
        logprob_start_len=-1,
        top_logprobs_num=sp.logprobs or 0,
        token_ids_logprob=None,
        stream=False,
    )


def _item(feature: MultiModalFeatureSpec) -> Any:
    """One image's feature as SGLang's ``MultimodalDataItem``: ``pixel_values`` its feature."""
    data = {elem.key: elem.data for elem in feature.data or ()}
    pos = feature.mm_position
    return adapter.image_item(
        data.pop("pixel_values"),
        [(pos.offset, pos.offset + pos.length - 1)],
        bytes.fromhex(feature.identifier),
        data,
    )
