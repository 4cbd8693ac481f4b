"""The one place that imports SGLang and knows how its releases differ (docs/sglang.md).

Everything else in ``serbench.plugins.sglang`` reaches SGLang through ``load()``: its codec
(``msgpack_encode`` / ``msgpack_decode`` of ``sglang.srt.managers.io_struct``) and its message
types (``io_struct``, ``managers.schedule_batch``, ``sampling.sampling_params``).

SGLang reads its IPC switch, ``SGLANG_USE_PICKLE_IPC``, once, when ``io_struct`` is first
imported: ``load()`` sets it (to msgspec, unless the environment already chose) before that import,
so a process that needs SGLang imports it here first. Tested releases: ``TESTED``.
"""

from __future__ import annotations

import os
import warnings
from array import array
from functools import cache
from types import SimpleNamespace
from typing import Any

from serbench.runtime import lazy, provenance, torchvision_ops

TESTED = ("0.5.23",)  # the pin in constraints.txt
SWITCH = "SGLANG_USE_PICKLE_IPC"
INSTALL = (
    "the sglang backends and layout=sglang-native need SGLang: pip install 'serbench[sglang]' && "
    "pip install --no-deps -c constraints.txt sglang torchvision"
)


class Missing(ImportError):
    """SGLang (or what its messages import) is not importable here; the message says what to install."""


def version() -> str | None:
    """The SGLang this process imports (as ``provenance.version`` reports it); None without one."""
    return provenance.version("sglang")


@cache
def load() -> SimpleNamespace:
    """SGLang's codec and message types; ``Missing`` (one line: what to install) without SGLang."""
    os.environ.setdefault(SWITCH, "false")
    try:
        torchvision_ops.declare_missing()  # SGLang's configs import torchvision's transforms
        with lazy.lasting(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # its import warns of every CUDA-only kernel it cannot use
            from sglang.srt.managers import io_struct, schedule_batch
            from sglang.srt.sampling import sampling_params
            from sglang.srt.utils import msgpack_utils
    except ImportError as exc:
        raise Missing(f"{INSTALL} (import failed: {exc})") from None
    return SimpleNamespace(
        version=version(),
        pickle_ipc=io_struct._USE_PICKLE_IPC,
        msgpack_encode=io_struct.msgpack_encode,
        msgpack_decode=io_struct.msgpack_decode,
        TokenizedGenerateReqInput=io_struct.TokenizedGenerateReqInput,
        SamplingParams=sampling_params.SamplingParams,
        MultimodalProcessorOutput=schedule_batch.MultimodalProcessorOutput,
        MultimodalDataItem=schedule_batch.MultimodalDataItem,
        Modality=schedule_batch.Modality,
        # what backend sglang-oob builds its codec of: SGLang's hooks, the Union its decoder knows
        enc_hook=msgpack_utils.enc_hook,
        dec_hook=msgpack_utils.dec_hook,
        ext_hook=msgpack_utils.ext_hook,
        message_types=io_struct._all_types,
        PickleWrapper=io_struct.PickleWrapper,
        buffer_ext_codes=(msgpack_utils._MSGPACK_EXT_ARRAY, msgpack_utils._MSGPACK_EXT_NP_ARRAY),
        BatchTokenIDOutput=io_struct.BatchTokenIDOutput,
    )


def sampling_params(**options: Any) -> Any:
    """SGLang's ``SamplingParams`` as its tokenizer manager hands them on: built, then normalized
    (without a tokenizer: serbench's stop conditions are token ids, not strings)."""
    params = load().SamplingParams(**options)
    params.normalize(None)
    return params


def tokenized_request(input_ids: list[int], **fields: Any) -> Any:
    """``TokenizedGenerateReqInput`` as SGLang's tokenizer manager builds it: the prompt's ids as an
    ``array("q")``, the fields this release has (later ones default)."""
    cls = load().TokenizedGenerateReqInput
    known = {k: v for k, v in fields.items() if k in cls.__struct_fields__}
    return cls(input_ids=array("q", input_ids), **known)


def image_item(pixels: Any, offsets: list[tuple[int, int]], identity: bytes, extra: dict[str, Any]) -> Any:
    """One image's ``MultimodalDataItem`` as SGLang's processor hands it over: its pixels as the
    feature, its placeholder span (ends inclusive), its identity (hash and pad values derived by
    SGLang's ``set_identity``) and the model's other tensors as ``model_specific_data``."""
    sglang = load()
    item = sglang.MultimodalDataItem(
        modality=sglang.Modality.IMAGE, feature=pixels, offsets=offsets, model_specific_data=extra
    )
    item.set_identity(identity)
    return item


@cache
def shm_features() -> SimpleNamespace:
    """SGLang's shm pointer transport of multimodal features (``managers.mm_utils``), per feature:
    ``wrap`` copies each tensor into a POSIX shm segment of its own (``ShmPointerMMData``, falling
    back to inline where /dev/shm is full, as SGLang does), ``unwrap`` maps it privately on receipt
    and unlinks the segment; ``discard`` unlinks a received request's segments not yet unwrapped."""
    load()  # the switch, and the one-line Missing, before mm_utils is imported
    from sglang.srt.managers import mm_utils

    return SimpleNamespace(
        wrap=mm_utils._wrap_tensor_or_list,
        unwrap=mm_utils._unwrap_tensor_or_list,
        discard=mm_utils.discard_shm_features,
    )
