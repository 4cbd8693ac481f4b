"""A torchvision whose compiled operators cannot load, made importable for the Python modules
vLLM's and SGLang's imports reach (through transformers' image utilities and SGLang's configs).

The registry's torchvision for the pinned torch links torch's CUDA libraries: beside the CPU torch
its operators do not load, and its own import then fails where it registers fakes for two of them.
``declare_missing()`` declares those two first, where the operators did not load; they stay
unavailable (calling one raises), and nothing serbench runs of vLLM or SGLang calls them
(docs/sglang.md). Where torchvision is absent, or its operators load, it does nothing.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

# registered by torchvision._meta_registrations whether its operators loaded or not
FAKED_OPS = ("nms", "qnms")
_libraries: list[Any] = []  # a torch.library.Library lives only as long as it is referenced


def declare_missing() -> None:
    """Before torchvision's first import: declare the operators its import needs, if they did not load."""
    spec = importlib.util.find_spec("torchvision")
    if spec is None or not spec.submodule_search_locations or _libraries:
        return
    import torch

    try:
        torch.ops.load_library(str(Path(spec.submodule_search_locations[0]) / "_C.so"))
    except OSError:
        library = torch.library.Library("torchvision", "FRAGMENT")
        for op in FAKED_OPS:
            library.define(f"{op}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        _libraries.append(library)
