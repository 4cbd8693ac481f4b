"""The steps a fan-out core broadcasts: vLLM's ``SchedulerOutput``, cut to the fields with bytes.

A step (``StepInput``) carries, at prefill, the newly scheduled request of the workload with its
multimodal tensors, and for the running batch the last token ids, positions, each request's block
table and the tokens scheduled. A workload whose requests are a plugin's own type
(``layout=vllm-native``: vLLM's own ``EngineCoreRequest``) is carried as that type
(``step_type``), so every typed decoder decodes the new requests as the engine would. A workload
whose library broadcasts a form of its own (``Workload.broadcast``: SGLang's scheduler sends its
ranks only the requests it received) is sent in that form, which carries no running batch.

A case's steps (``Schedule``) are deterministic from its specs, so a remote worker rebuilds them
from the case alone: each round is one prefill step followed by decode steps of the running batch,
whose context is the workload's prompt plus the tokens generated so far, in blocks of
``BLOCK_SIZE`` = 16 tokens (vLLM's default KV block size on CUDA): a text-sonnet request in decode
holds 35-45 block ids. ``Prefills`` builds each prefill step's request outside the timing.
``step_checksum`` is what a worker must find in what it decoded (``check_step``). The requests a
step carries are read through the workload's hooks (``Workload.about``, ``broadcast_requests``),
whatever their type.
"""

from __future__ import annotations

import functools
import zlib
from array import array
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

from serbench.links import cache
from serbench.workloads import Workload, get_workload
from serbench.workloads.messages import EngineCoreRequest
from serbench.workloads.tree import is_array, payload_checksum

BLOCK_SIZE = 16  # tokens per KV block: vLLM's default on CUDA
DISTINCT_REQUESTS = 2  # prefill steps alternate between this many requests of the workload


class StepInput(msgspec.Struct):
    """One step as the core broadcasts it (vLLM's ``SchedulerOutput``, the fields with bytes)."""

    step: int
    new_requests: list[EngineCoreRequest]  # scheduled for the first time, multimodal tensors and all
    new_block_ids: list[list[int]]
    running_ids: list[str]
    token_ids: list[int]  # the last token sampled for each running request
    positions: list[int]
    block_ids: list[list[int]]  # each running request's block table
    num_scheduled_tokens: list[int]
    finished_ids: list[str]


@functools.cache
def step_type(request_type: type) -> type[StepInput]:
    """The step that carries ``request_type``'s requests: ``StepInput`` for serbench's own, else a
    subclass whose ``new_requests`` are that type (a plugin's, as vLLM's own ``EngineCoreRequest``),
    so that a typed decoder (vLLM's ``MsgpackDecoder``, msgspec's) decodes them as the engine's
    would. Made once per type and named in this module, where pickle finds it."""
    if request_type is EngineCoreRequest:
        return StepInput
    name = f"StepInput_{request_type.__module__}_{request_type.__qualname__}".replace(".", "_")
    made = msgspec.defstruct(
        name, [("new_requests", list[request_type])], bases=(StepInput,), module=__name__
    )
    globals()[name] = made
    return made


def _shape_of(obj: Any) -> Any:
    """``_skeleton``'s stand-in for what msgpack has no form of: an array's dtype and shape, a
    slice's bounds (vLLM's flat fields), a mapping class's items (vLLM's MultiModalKwargsItem), an
    ``array.array``'s type code and bytes (SGLang's prompt ids)."""
    if is_array(obj):
        return f"{obj.dtype}{tuple(obj.shape)}"
    if isinstance(obj, array):
        return [obj.typecode, obj.tobytes()]
    if isinstance(obj, slice):
        return [obj.start, obj.stop, obj.step]
    if isinstance(obj, Mapping):
        return dict(obj)
    raise TypeError(f"a step cannot hold a {type(obj).__name__}")


def _skeleton(step: Any) -> bytes:
    """A step as msgpack, its arrays' dtype and shape in place of their bytes: serbench's
    Structs and a plugin's dataclasses and mappings alike. msgspec walks it in C: a worker
    checks every step it decodes, and a walk in Python took many times longer
    (docs/measurements/2026-12-06-step-check.md)."""
    return msgspec.msgpack.encode(step, enc_hook=_shape_of)


def step_checksum(step: Any, payload_crc: int | None = None) -> int:
    """CRC of every field of a step, its arrays' dtype, shape and bytes included."""
    crc = payload_checksum(step) if payload_crc is None else payload_crc
    return zlib.crc32(_skeleton(step), crc)


def check_step(decoded: Any, checksum: int, kind: type = StepInput) -> None:
    """ValueError unless ``decoded`` is the step, of type ``kind``, whose checksum the core sent."""
    if not isinstance(decoded, kind):
        raise ValueError(f"decoded a {type(decoded).__name__}, not a step ({kind.__name__})")
    if step_checksum(decoded) != checksum:
        raise ValueError("the step decoded differs from the one sent (checksum mismatch)")


def _blocks(tokens: int, first: int) -> list[int]:
    return list(range(first, first + -(-tokens // BLOCK_SIZE)))


@dataclass(frozen=True)
class Schedule:
    """The steps of a case, deterministic: ``rounds`` × (one prefill step, ``decode_steps``)."""

    workload: Workload
    batch: int
    decode_steps: int
    prompt_len: int

    def running(self, step: int) -> dict[str, Any]:
        """The running batch's part of ``step``: ids, last tokens, positions, block tables."""
        ids, tokens, positions, tables = [], [], [], []
        out = max(self.workload.output_len, 1)
        for j in range(self.batch):
            generated = (step + 7 * j) % out
            position = self.prompt_len + generated
            ids.append(f"running-{j}")
            tokens.append(zlib.crc32(f"{j}#{step}".encode()) % 32_000)
            positions.append(position)
            tables.append(_blocks(position + 1, 1 + j * 4096))
        return {
            "running_ids": ids,
            "token_ids": tokens,
            "positions": positions,
            "block_ids": tables,
            "num_scheduled_tokens": [1] * self.batch,
            "finished_ids": [],
        }

    def step(self, index: int, prefills: Prefills) -> Any:
        """Step ``index``: a prefill step (a new request) at the start of each round, else decode;
        in the workload's library's own form (``Workload.broadcast``), else of the type that
        carries the workload's requests (``step_type``)."""
        requests = [prefills.request(index // (1 + self.decode_steps))] if self.prefill(index) else []
        own = self.workload.broadcast(requests)
        if own is not None:
            return own
        made = step_type(self.workload.request_type)
        if not requests:
            return made(index, [], [], **self.running(index))
        prompt = self.workload.about(requests[0]).prompt_token_ids  # a list or an array
        new_blocks = [_blocks(len(prompt), 1 + self.batch * 4096)]
        return made(index, requests, new_blocks, **self.running(index))

    def prefill(self, index: int) -> bool:
        return index % (1 + self.decode_steps) == 0

    def requests(self, step: Any) -> list[Any]:
        """The new requests ``step`` carries, as sent or decoded (``Workload.broadcast_requests``)."""
        return self.workload.broadcast_requests(step)

    def with_requests(self, step: Any, requests: list[Any]) -> Any:
        """``step`` carrying ``requests`` in place of its new requests (a cache's references)."""
        own = self.workload.broadcast(requests)
        return msgspec.structs.replace(step, new_requests=requests) if own is None else own

    @property
    def running_sent(self) -> int:
        """Running requests each step carries: none where the workload's library broadcasts
        only its new requests (``Workload.broadcast``)."""
        return self.batch if self.workload.broadcast([]) is None else 0


class Prefills:
    """The new request of each prefill step and the CRC of its tensors, built outside the timing.

    Uncached, the steps alternate between ``DISTINCT_REQUESTS`` requests of the workload, built
    once. With a cache (``fresh``), prefill step k carries the workload's request k, so that its
    repeats (``images-N:repeat=R``, ``turns=T``) are what the caches meet; each is built when
    its step comes, and the one before dropped. The requests are the workload's type (serbench's
    own, or a plugin's), whose walk the caches learn here (``cache.register``).
    """

    def __init__(self, workload: Workload, fresh: bool) -> None:
        self.workload, self.fresh = workload, fresh
        self.built: dict[int, tuple[Any, int]] = {}
        if fresh:
            cache.register(workload)  # before the workers fork: they resolve the same type

    def _get(self, k: int) -> tuple[Any, int]:
        index = k if self.fresh else k % DISTINCT_REQUESTS
        if index not in self.built:
            if self.fresh:
                self.built.clear()
            request = self.workload.request(index)
            self.built[index] = (request, payload_checksum(request))
        return self.built[index]

    def request(self, k: int) -> Any:
        return self._get(k)[0]

    def crc(self, k: int) -> int:
        """``tree.payload_checksum`` of prefill step k's request."""
        return self._get(k)[1]

    def largest(self, count: int) -> int:
        """Which of the first ``count`` prefill steps carries the most images (the ring's arena is
        sized from its step): where the workload says how many each request has, else the first."""
        keys = getattr(self.workload, "image_keys", None)
        if not self.fresh or keys is None:
            return 0
        return max(range(count), key=lambda k: len(keys(k)))


def case_steps(workload_spec: str, batch: int, decode_steps: int, mode: str) -> tuple[Prefills, Schedule]:
    """A case's prefill requests and schedule (the core's, and a remote worker's warm-up)."""
    workload = get_workload(workload_spec)
    prefills = Prefills(workload, fresh=mode != "none")
    prompt_len = len(workload.about(prefills.request(0)).prompt_token_ids)
    return prefills, Schedule(workload, batch, decode_steps, prompt_len)
