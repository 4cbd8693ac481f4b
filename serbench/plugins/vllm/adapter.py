"""The one place that knows how vLLM's versions differ (docs/vllm.md).

Everything else in ``serbench.plugins.vllm`` reaches vLLM through ``load()``: the codec
(``MsgpackEncoder`` / ``MsgpackDecoder`` of ``vllm.v1.serial_utils``) and the
message types (``vllm.v1.engine``, ``vllm.multimodal.inputs``,
``vllm.sampling_params``), built the way the installed release builds them.

Tested releases: ``TESTED``. A difference between releases is one branch here,
keyed by what the release has (an attribute, a field), not by its number.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import typing
from functools import cache
from types import SimpleNamespace
from typing import Any

import msgspec
import numpy as np

from serbench.runtime import lazy, provenance, torchvision_ops

TESTED = ("0.33.0", "0.32.0", "0.34.0")  # the pin in constraints.txt first
INSTALL = (
    "the vllm backend and layout=vllm-native need vLLM: "
    "pip install 'serbench[vllm]' && pip install --no-deps -c constraints.txt vllm"
)


class Missing(ImportError):
    """vLLM (or what its codec imports) is not importable here; the message says what to install."""


def version() -> str | None:
    """The vLLM this process imports: its installed version (``+g<commit>`` from an editable git
    checkout), or ``from <folder>`` for a checkout ahead on ``PYTHONPATH``; None without one."""
    return provenance.version("vllm")


@cache
def load() -> SimpleNamespace:
    """vLLM's codec and message types; ``Missing`` (one line: what to install) without vLLM."""
    # vLLM logs at INFO on import; a benchmark's output is its tables (set before the import).
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    torchvision_ops.declare_missing()  # transformers' image utilities import torchvision where installed
    try:
        with lazy.lasting():  # its import makes a great many objects that last
            from vllm.multimodal import inputs
            from vllm.sampling_params import SamplingParams
            from vllm.v1 import engine, serial_utils
    except ImportError as exc:
        raise Missing(f"{INSTALL} (import failed: {exc})") from None
    return SimpleNamespace(
        version=version(),
        MsgpackEncoder=serial_utils.MsgpackEncoder,
        MsgpackDecoder=serial_utils.MsgpackDecoder,
        EngineCoreRequest=engine.EngineCoreRequest,
        EngineCoreOutputs=engine.EngineCoreOutputs,
        EngineCoreOutput=engine.EngineCoreOutput,
        FinishReason=engine.FinishReason,
        SamplingParams=SamplingParams,
        MultiModalFeatureSpec=inputs.MultiModalFeatureSpec,
        MultiModalFieldElem=inputs.MultiModalFieldElem,
        MultiModalKwargsItem=inputs.MultiModalKwargsItem,
        MultiModalFieldConfig=inputs.MultiModalFieldConfig,
        PlaceholderRange=inputs.PlaceholderRange,
        inputs=inputs,
    )


def encoder(threshold: float | None, oob_tensor_consumer: Any = None) -> Any:
    """vLLM's encoder; ``threshold`` in bytes (None: vLLM's default, ``VLLM_MSGPACK_ZERO_COPY_THRESHOLD``);
    ``oob_tensor_consumer`` takes each tensor at or above it where given (vLLM's tensor IPC)."""
    vllm = load()
    oob = {} if oob_tensor_consumer is None else {"oob_tensor_consumer": oob_tensor_consumer}
    if threshold is None:
        return vllm.MsgpackEncoder(**oob)
    # msgspec compares ints; vLLM's own values are ints, ``inf`` is "everything inline"
    size = threshold if threshold == float("inf") else int(threshold)
    return vllm.MsgpackEncoder(size_threshold=size, **oob)


def decoder(type_: Any, oob_tensor_provider: Any = None) -> Any:
    """vLLM's decoder of one message type, as its engine and frontend hold one per type;
    ``oob_tensor_provider`` gives it the tensors a frame names by handle (vLLM's tensor IPC)."""
    oob = {} if oob_tensor_provider is None else {"oob_tensor_provider": oob_tensor_provider}
    return load().MsgpackDecoder(type_, **oob)


def tensor_ipc() -> SimpleNamespace:
    """vLLM's tensor IPC ends (``vllm.v1.engine.tensor_ipc``: ``TensorIpcSender``,
    ``TensorIpcReceiver``, vLLM #32104); ``Missing`` (one line) for a release without them."""
    load()  # the one-line Missing, and vLLM's log level, before its modules are imported
    try:
        from vllm.v1.engine import tensor_ipc as ipc
    except ImportError as exc:
        raise Missing(
            f"vLLM {version()} has no tensor IPC (vllm.v1.engine.tensor_ipc, vLLM #32104): {exc}"
        ) from None
    ipc.logger.addFilter(_unformattable)
    return SimpleNamespace(Sender=ipc.TensorIpcSender, Receiver=ipc.TensorIpcReceiver)


def _unformattable(record: logging.LogRecord) -> bool:
    """Whether a tensor IPC log record can be written: 0.33's "Discarding %d stale tensors" is
    given a sender id (a str) for its ``%d``, and logging prints a traceback in its place."""
    try:
        record.getMessage()
    except TypeError:
        return False
    return True


@cache
def _item_codec() -> tuple[Any, Any]:
    vllm = load()
    return encoder(float("inf")), decoder(vllm.MultiModalKwargsItem)


def item_bytes(item: Any) -> np.ndarray:
    """A ``MultiModalKwargsItem`` as one buffer of vLLM's own encoding, every tensor inline: what
    vLLM's shared-memory processor cache writes into its store."""
    (frame,) = _item_codec()[0].encode(item)
    return np.frombuffer(frame, np.uint8)


def item_of(buffer: Any) -> Any:
    """The ``MultiModalKwargsItem`` of ``item_bytes``' buffer (a tensor or array of its bytes); its
    tensors view the buffer, as vLLM's receiver's view its store."""
    return _item_codec()[1].decode(memoryview(np.asarray(buffer)))


def field_elem(modality: str, key: str, data: Any, field: Any) -> Any:
    """A ``MultiModalFieldElem``: releases before the elements lost ``modality`` and ``key`` take them."""
    elem = load().MultiModalFieldElem
    names = {f.name for f in dataclasses.fields(elem)}
    if "modality" in names:
        return elem(modality=modality, key=key, data=data, field=field)
    return elem(data=data, field=field)


def batched_field() -> Any:
    return load().MultiModalFieldConfig.batched("").field


def flat_field(slices: list[slice], dim: int = 0) -> Any:
    return load().MultiModalFieldConfig.flat("", slices, dim).field


def sampling_params(**options: Any) -> Any:
    """vLLM's ``SamplingParams`` as its frontend makes them (``from_optional`` where it exists)."""
    params = load().SamplingParams
    build = getattr(params, "from_optional", None)
    return build(**options) if build else params(**options)


def engine_core_request(**fields: Any) -> Any:
    """``EngineCoreRequest`` with the fields this release has (later ones default, earlier ones
    dropped), the prompt as this release's frontends send it: a list, or where the field is an
    ``np.ndarray`` (0.34) a 32-bit int array (out of band when long)."""
    cls = load().EngineCoreRequest
    types = {f.name: f.type for f in msgspec.structs.fields(cls)}
    prompt = fields.get("prompt_token_ids")
    if prompt is not None and np.ndarray in typing.get_args(types.get("prompt_token_ids")):
        fields["prompt_token_ids"] = np.asarray(prompt, dtype=np.int32)
    return cls(**{k: v for k, v in fields.items() if k in types})


def step_logprobs(token_ids: Any, logprobs: Any, ranks: Any) -> Any:
    """A step's logprob tensors as vLLM's engine turns them into what it sends: its own
    ``LogprobsTensors(...).tolists()``, numpy arrays in 0.33 (Python lists in releases before)."""
    load()  # the one-line Missing, and vLLM's log level, before its modules are imported
    from vllm.v1.outputs import LogprobsTensors

    return LogprobsTensors(token_ids, logprobs, ranks).tolists()


def request_logprobs(step: Any, index: int) -> Any:
    """Request ``index``'s one row of a step's ``LogprobsLists``, as vLLM's scheduler takes it:
    ``slice_request`` where the release has it, ``slice`` in releases before it."""
    if hasattr(step, "slice_request"):
        return step.slice_request(index, 1)
    return step.slice(index, index + 1)
