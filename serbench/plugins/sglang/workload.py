"""``layout=sglang-native``: serbench's deterministic content as SGLang's own message objects.

``text-sonnet:layout=sglang-native`` is ``text-sonnet`` (the same 550/200/150 prompts) with each
request built as SGLang's tokenizer manager sends it to the scheduler: a
``TokenizedGenerateReqInput`` carrying the prompt's text and its ids (an ``array("q")``) and
SGLang's ``SamplingParams``. ``images-N:layout=sglang-native`` is ``images-N:layout=vllm`` (the same
pixels, hashes, placeholders and prompt, every other option too) with each request's ``mm_inputs``
a ``MultimodalProcessorOutput`` holding one ``MultimodalDataItem`` per image, as SGLang's processor
hands them over (``adapter.image_item``); those requests carry no prompt text, the model's having
none. ``outputs-B:layout=sglang-native`` is ``outputs-B`` (the same tokens, logprob rows and
finish pattern; ``logprobs=``, ``seed=``, ``steps=`` pass through). Every one's engine steps are
the model's as SGLang's scheduler streams them to its detokenizer, a ``BatchTokenIDOutput``
(``native_outputs``), since SGLang's msgspec path decodes only its own types. Only SGLang's
backends and pickle's carry these types (``CARRIERS``). Registered under the entry-point group
``serbench.layouts`` (``serbench.workloads.get_workload``); version differences live in ``adapter``.
"""

from __future__ import annotations

import functools
from array import array
from collections.abc import Callable, Sequence
from typing import Any

import msgspec
import numpy as np

from serbench.model.specs import Spec, SpecError
from serbench.plugins.sglang import adapter
from serbench.workloads import Running, Workload
from serbench.workloads.base import About, Relaid, relaid
from serbench.workloads.messages import (
    EngineCoreOutput,
    EngineCoreOutputs,
    EngineCoreRequest,
    Logprobs,
    MultiModalFeatureSpec,
)
from serbench.workloads.outputs import PROMPT_TOKENS, logprob_rows

NAME = "sglang-native"
# The backends that carry SGLang's types (``array`` ids, its own Structs and wrappers): its own
# paths, and pickle's, which it defaults to; serbench's msgpack backends encode neither.
CARRIERS = frozenset({"sglang", "sglang-pickle", "sglang-oob", "pickle", "pickle-oob", "cloudpickle"})
# A decode step's read_offset: SGLang's scheduler starts incremental detokenization this many
# prompt tokens back (schedule_batch.INIT_INCREMENTAL_DETOKENIZATION_OFFSET) and keeps the offset.
READ_OFFSET = 5


def layout(spec: Spec, build: Callable[[Spec], Workload]) -> Workload:
    """The ``serbench.layouts`` entry point: ``spec`` with ``layout=sglang-native``; ``build`` makes
    serbench's own workload of a spec. SpecError (one line: what to install) without SGLang."""
    try:
        adapter.load()
    except adapter.Missing as exc:
        raise SpecError(str(exc)) from None
    return relaid(spec, build, NAME, NATIVE, "text-sonnet, images-N and outputs-B")


class Native(Relaid):
    """serbench's workload ``model`` with its requests as SGLang's own ``TokenizedGenerateReqInput``
    and the engine's steps as SGLang's ``BatchTokenIDOutput``; the content is the model's.
    ``model_layout`` is the model's layout whose content it carries."""

    model_words = ""  # what the model's description says of its layout, left out of this one's

    def __init__(self, model: Workload) -> None:
        description = f"{model.description.replace(self.model_words, '')}, SGLang's own message types"
        super().__init__(model, description, adapter.load().TokenizedGenerateReqInput)  # the scheduler's
        self.message_type = adapter.load().BatchTokenIDOutput  # what the detokenizer decodes

    def about(self, request: Any) -> About:
        """SGLang's names for what the harness reads: ``rid``, ``input_ids``, ``max_new_tokens``."""
        return About(request.rid, request.input_ids, request.sampling_params.max_new_tokens)

    def renamed(self, request: Any, request_id: str) -> Any:
        return msgspec.structs.replace(request, rid=request_id)

    def broadcast(self, requests: list[Any]) -> Any:
        """What SGLang's scheduler broadcasts to its tensor-parallel ranks each iteration: the
        requests it received (``broadcast_pyobj`` of their list, pickled, over gloo), here as
        SGLang's ``BatchTokenizedGenerateReqInput`` of them, so its msgspec path carries them too."""
        return batch_type()(batch=requests)

    def broadcast_requests(self, message: Any) -> list[Any]:
        return message.batch

    def unsupported_by(self, serializer: Any) -> str | None:
        if serializer.name in CARRIERS:
            return None
        carriers = ", ".join(sorted(CARRIERS))
        return f"layout={NAME} is SGLang's own types (array ids, its Structs); carried by {carriers}"

    def step(self, running: Sequence[Running]) -> Any:
        return native_outputs(self.model.step(running), [r.position for r in running])

    def in_model(self, message: Any) -> EngineCoreOutputs:
        return model_outputs(message)

    def check(self, message: Any) -> None:
        """ValueError unless the step's content is the model's (for outputs-B, every logprob row
        the one its sampled token implies)."""
        self.model.check(model_outputs(message))


class NativeText(Native):
    """``text-sonnet`` as SGLang's ``TokenizedGenerateReqInput``s: the prompt's text and ids."""

    model_layout = None

    def request(self, index: int) -> Any:
        return native_request(self.model.request(index), " ".join(self.model.prompt_words(index)), None)


class NativeImages(Native):
    """``images-N`` as SGLang's ``TokenizedGenerateReqInput``s with their ``mm_inputs``."""

    model_layout = "vllm"  # serbench's model with one feature per image
    model_words = ", vllm layout"

    def request(self, index: int) -> Any:
        request = self.model.request(index)
        items = [_item(feature) for feature in request.mm_features or ()]
        processed = adapter.load().MultimodalProcessorOutput
        mm_inputs = processed(mm_items=items, input_ids=request.prompt_token_ids)
        return native_request(request, None, mm_inputs)


class NativeOutputs(Native):
    """``outputs-B``'s steps as SGLang's own ``BatchTokenIDOutput``, its requests as
    ``TokenizedGenerateReqInput``s asking for the model's logprobs."""

    model_layout = "nested"  # per-request lists, as SGLang's scheduler holds them
    model_words = ", nested"

    def request(self, index: int) -> Any:
        return native_request(self.model.request(index), None, None)

    def message(self, index: int = 0) -> Any:
        return native_outputs(self.model.message(index), [index] * self.model.batch)


NATIVE: dict[str, type[Native]] = {"text": NativeText, "images": NativeImages, "outputs": NativeOutputs}


@functools.cache
def batch_type() -> type:
    """SGLang's ``BatchTokenizedGenerateReqInput``, the one type its msgpack decoder knows
    (``adapter.load().message_types``) that holds a list of tokenized requests."""
    return next(t for t in adapter.load().message_types if t.__name__ == "BatchTokenizedGenerateReqInput")


def native_outputs(step: EngineCoreOutputs, positions: Sequence[int]) -> Any:
    """serbench's nested step (each request at its token's ``positions``) as SGLang's scheduler
    sends a decode step (``output_streamer``): per request its new ids as ``array("q")`` slices, its
    counts and detokenization settings, and with logprobs the sampled token's value and id and the
    top-K rows as nested lists. The opaque ``time_stats`` (a pickle of the scheduler's objects) is
    left out: serbench's steps have none."""
    outputs = step.outputs
    count = len(outputs)
    logprobs = bool(outputs) and outputs[0].new_logprobs is not None
    ids = [array("q", out.new_token_ids) for out in outputs]
    rows = [out.new_logprobs for out in outputs] if logprobs else []
    empty = [[] for _ in range(count)] if logprobs else None
    return adapter.load().BatchTokenIDOutput(
        rids=[out.request_id for out in outputs],
        http_worker_ipcs=[None] * count,
        finished_reasons=[
            _finish(out.finish_reason, p + 1) for out, p in zip(outputs, positions, strict=True)
        ],
        decoded_texts=[""] * count,
        decode_ids=ids,
        read_offsets=[READ_OFFSET] * count,
        output_ids=[array("q", i) for i in ids],
        skip_special_tokens=[True] * count,
        spaces_between_special_tokens=[True] * count,
        no_stop_trim=[False] * count,
        prompt_tokens=[PROMPT_TOKENS] * count,
        reasoning_tokens=[0] * count,
        completion_tokens=[p + 1 for p in positions],
        cached_tokens=[0] * count,
        input_token_logprobs_val=empty,
        input_token_logprobs_idx=empty,
        output_token_logprobs_val=[[row[0] for row in lp.logprobs] for lp in rows] if logprobs else None,
        output_token_logprobs_idx=[[row[0] for row in lp.token_ids] for lp in rows] if logprobs else None,
        input_top_logprobs_val=empty,
        input_top_logprobs_idx=empty,
        output_top_logprobs_val=[[row[1:] for row in lp.logprobs] for lp in rows] if logprobs else None,
        output_top_logprobs_idx=[[row[1:] for row in lp.token_ids] for lp in rows] if logprobs else None,
        input_token_ids_logprobs_val=empty,
        input_token_ids_logprobs_idx=empty,
        output_token_ids_logprobs_val=empty,
        output_token_ids_logprobs_idx=empty,
        output_token_entropy_val=None,
        output_token_sampling_mask=None,
        output_hidden_states=None,
        routed_experts=None,
        indexer_topk=None,
        placeholder_tokens_idx=None,
        placeholder_tokens_val=None,
        retraction_counts=[0] * count,
        cached_tokens_details=[None] * count,
        image_tokens=[0] * count,
        audio_tokens=[0] * count,
        video_tokens=[0] * count,
        dp_ranks=[0] * count,
    )


def model_outputs(message: Any) -> EngineCoreOutputs:
    """SGLang's ``BatchTokenIDOutput`` as serbench's nested model of it, for the checks after a
    decode. SGLang sends no rank of the sampled token: the rank the model implies is filled in, so
    the check covers what SGLang carries, the ids and logprobs."""
    top = message.output_top_logprobs_idx
    outputs = []
    for i, (rid, tokens) in enumerate(zip(message.rids, message.output_ids, strict=True)):
        new = None
        if top is not None:
            ranks = logprob_rows(np.asarray(tokens, np.int32), 0)[2].tolist()
            new = Logprobs(
                [[t, *alts] for t, alts in zip(message.output_token_logprobs_idx[i], top[i], strict=True)],
                [
                    [v, *alts]
                    for v, alts in zip(
                        message.output_token_logprobs_val[i], message.output_top_logprobs_val[i], strict=True
                    )
                ],
                ranks,
            )
        reason = message.finished_reasons[i]
        outputs.append(EngineCoreOutput(rid, list(tokens), None if reason is None else reason["type"], new))
    return EngineCoreOutputs(outputs=outputs)


def _finish(reason: str | None, length: int) -> dict[str, Any] | None:
    """A finish reason as SGLang's ``BaseFinishReason.to_json()`` sends it."""
    return None if reason is None else {"type": reason, "length": length}


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
