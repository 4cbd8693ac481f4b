"""SGLang's transports of multimodal features, the ``features=`` option of backend ``sglang``.

SGLang's frontend sends a request's features (each ``MultimodalDataItem``'s ``feature`` and
``precomputed_embeddings``) to its scheduler one of three ways (docs/sglang.md says what each
copies):

* ``inline``: inside the message, as SGLang's tensor ext (``io_struct.msgpack_encode``);
* ``shm``: each tensor in a POSIX shm segment of its own, the message carrying only its name
  (``ShmPointerMMData``, what ``wrap_shm_features`` does on one node); the receiver maps it and
  unlinks it (``unwrap_shm_features``), so a frame's segments are taken by its first decode;
* ``cuda_ipc``: each tensor in a CUDA memory pool shared by IPC handle, which needs a CUDA device
  and SGLang's pool (``MmItemMemoryPool``): serbench records its cases unsupported, with why.

SGLang's own functions do the work, through ``adapter.shm_features``.
"""

from __future__ import annotations

from typing import Any

import msgspec

from serbench.plugins.sglang import adapter
from serbench.runtime import lazy

torch = lazy.torch(__name__)  # imported on first use (serbench.runtime.lazy)

# Each transport, and how backend ``sglang`` describes its features' way with it.
FEATURES = {
    "inline": "tensors in-band",
    "shm": "features in a shm segment per tensor, ShmPointerMMData",
    "cuda_ipc": "features by CUDA IPC",
}


def checked(features: str) -> str:
    """``features`` if it names one of ``FEATURES``; ValueError (the spec's one line) otherwise."""
    if features not in FEATURES:
        raise ValueError(f"features= is one of {', '.join(FEATURES)}, not {features!r}")
    return features


def in_shm(message: Any) -> Any:
    """``message`` with every feature tensor in a shm segment of its own, as SGLang's tokenizer
    manager wraps them, on a copy (serbench sends one message many times; SGLang's wrap is in place)."""
    mm_inputs = getattr(message, "mm_inputs", None)
    if mm_inputs is None:
        return message
    wrap = adapter.shm_features().wrap
    items = [
        msgspec.structs.replace(
            item,
            feature=wrap(item.feature, precomputed_hash=item.hash),
            precomputed_embeddings=wrap(item.precomputed_embeddings, precomputed_hash=item.hash),
        )
        for item in mm_inputs.mm_items
    ]
    return msgspec.structs.replace(message, mm_inputs=msgspec.structs.replace(mm_inputs, mm_items=items))


def out_of_shm(message: Any) -> None:
    """A received ``message``'s features out of their segments, in place, as SGLang's scheduler
    takes them (``unwrap_shm_features``: a private map of each, its segment unlinked). Where one
    fails (its segment gone: taken by an earlier decode), the others are unlinked, then it raises."""
    mm_inputs = getattr(message, "mm_inputs", None)
    if mm_inputs is None:
        return
    shm = adapter.shm_features()
    try:
        for item in mm_inputs.mm_items:
            item.feature = shm.unwrap(item.feature)
            item.precomputed_embeddings = shm.unwrap(item.precomputed_embeddings)
    except Exception as exc:
        shm.discard(message)
        raise ValueError(f"features=shm: {exc} (its first decode unlinks a frame's segments)") from exc


def cuda_ipc_unsupported() -> str:
    """Why serbench does not run SGLang's ``cuda_ipc`` transport here; asks no CUDA driver where
    torch can tell without (a process that forks cases must not initialise CUDA)."""
    why = "SGLang's cuda_ipc feature transport shares tensors from a CUDA memory pool by IPC handle"
    if torch.version.cuda is None:
        return f"{why}: this torch ({torch.__version__}) is a CPU-only build"
    if torch.cuda.device_count() == 0:
        return f"{why}: no CUDA device is visible"
    return f"{why}: serbench does not build SGLang's pool (MmItemMemoryPool) yet"
