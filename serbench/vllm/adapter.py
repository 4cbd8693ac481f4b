"""The one place that knows how vLLM's versions differ (docs/vllm.md).

Everything else in ``serbench.vllm`` reaches vLLM through ``load()``: the codec
(``MsgpackEncoder`` / ``MsgpackDecoder`` of ``vllm.v1.serial_utils``) and the
message types (``vllm.v1.engine``, ``vllm.multimodal.inputs``,
``vllm.sampling_params``), built the way the installed release builds them.

Tested releases: ``TESTED``. A difference between releases is one branch here,
keyed by what the release has (an attribute, a field), not by its number.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
from functools import cache
from importlib import metadata
from pathlib import Path
from types import SimpleNamespace
from typing import Any

TESTED = ("0.33.0",)  # the pin in constraints.txt first
INSTALL = (
    "the vllm backend and layout=vllm-native need vLLM: "
    "pip install 'serbench[vllm]' && pip install --no-deps -c constraints.txt vllm"
)


class Missing(ImportError):
    """vLLM (or what its codec imports) is not importable here; the message says what to install."""


def version() -> str | None:
    """The installed vLLM's version, with ``+g<commit>`` when it is a git checkout; None without one."""
    try:
        found = metadata.version("vllm")
    except metadata.PackageNotFoundError:
        return None
    commit = _checkout_commit()
    return f"{found}+g{commit[:12]}" if commit and commit[:12] not in found else found


def _checkout_commit() -> str | None:
    """The commit of an editable vLLM checkout (``pip install -e``), if that is what is installed."""
    try:
        dist = metadata.distribution("vllm")
        direct = dist.read_text("direct_url.json") or ""
    except metadata.PackageNotFoundError:
        return None
    if '"editable": true' not in direct.replace(" ", "").replace(":true", ": true"):
        return None
    origin = Path(str(dist.locate_file("vllm"))).resolve().parent
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=origin, capture_output=True, text=True, timeout=10, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


@cache
def load() -> SimpleNamespace:
    """vLLM's codec and message types; ``Missing`` (one line: what to install) without vLLM."""
    # vLLM logs at INFO on import; a benchmark's output is its tables (set before the import).
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    try:
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


def encoder(threshold: float | None) -> Any:
    """vLLM's encoder; ``threshold`` in bytes (None: vLLM's default, ``VLLM_MSGPACK_ZERO_COPY_THRESHOLD``)."""
    vllm = load()
    if threshold is None:
        return vllm.MsgpackEncoder()
    # msgspec compares ints; vLLM's own values are ints, ``inf`` is "everything inline"
    return vllm.MsgpackEncoder(size_threshold=threshold if threshold == float("inf") else int(threshold))


def decoder(type_: Any) -> Any:
    """vLLM's decoder of one message type, as its engine and frontend hold one per type."""
    return load().MsgpackDecoder(type_)


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
    """``EngineCoreRequest`` with the fields this release has (later ones default, earlier ones dropped)."""
    cls = load().EngineCoreRequest
    known = set(cls.__struct_fields__)
    return cls(**{k: v for k, v in fields.items() if k in known})
