"""What every workload offers: deterministic requests and the outputs an engine returns."""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import msgspec

from serbench.model.specs import Spec, SpecError
from serbench.workloads.messages import (
    EngineCoreOutput,
    EngineCoreOutputs,
    EngineCoreRequest,
    FlatEngineCoreOutputs,
)

VOCAB_SIZE = 32_000


def output_token(request_id: str, position: int) -> int:
    """The token a simulated engine emits at ``position`` for ``request_id``.

    A pure function of both, so the frontend can account for every token.
    """
    return zlib.crc32(f"{request_id}#{position}".encode()) % VOCAB_SIZE


class About(NamedTuple):
    """What the harness reads of a request, whatever its type: its id, its prompt's token ids and
    how many tokens it asks for (``Workload.about``)."""

    request_id: str
    prompt_token_ids: Sequence[int]
    max_tokens: int


class Running(NamedTuple):
    """A request in an engine step: its id, the position of the token it gets, whether it is the last."""

    request_id: str
    position: int
    last: bool


class Workload:
    """A deterministic stream of requests; subclasses build ``request(index)``.

    ``kind`` says what the workload is about: ``"request"`` (the frontend →
    engine request is the message; micro times ``request(0)``) or
    ``"outputs"`` (the engine's step is the message; micro times
    ``message(0)``, ipc streams ``step``s to a frontend holding a batch).
    """

    name: str
    description: str
    output_len: int
    seed: int
    kind = "request"
    tensors = True  # its messages carry tensors: a process that will build them imports torch first
    message_type: type = EngineCoreOutputs  # what the engine's steps decode as
    request_type: type = EngineCoreRequest  # what the engine decodes a request as (a plugin's own type)

    def request(self, index: int) -> EngineCoreRequest:
        raise NotImplementedError

    def payload_bytes(self) -> int:
        """Tensor bytes in one request (0 for text)."""
        raise NotImplementedError

    def about(self, request: Any) -> About:
        """What the harness reads of ``request``, one of this workload's as sent or decoded: by
        serbench's field names (vLLM's too); a layout of another library's type reads its own."""
        return About(request.request_id, request.prompt_token_ids, request.sampling_params.max_tokens)

    def unsupported_by(self, serializer: Any) -> str | None:
        """Why ``serializer`` cannot carry this workload's messages (a layout whose types only
        some backends encode), or None: serbench's own messages are every backend's to declare."""
        return None

    def renamed(self, request: Any, request_id: str) -> Any:
        """``request`` under another id (a repeat of it sent again), by serbench's field name."""
        return msgspec.structs.replace(request, request_id=request_id)

    def broadcast(self, requests: list[Any]) -> Any:
        """What an engine core of this layout's library broadcasts to its tensor-parallel ranks in
        a step that schedules ``requests`` (fan-out's step), where the library has a form of its
        own; None: it has none, and fan-out sends serbench's model of vLLM's ``SchedulerOutput``."""
        return None

    def broadcast_requests(self, message: Any) -> list[Any]:
        """The new requests of a fan-out step as sent or decoded: by serbench's field name
        (``new_requests``); a layout whose ``broadcast`` is its own reads its own."""
        return message.new_requests

    def in_model(self, message: Any) -> EngineCoreOutputs | FlatEngineCoreOutputs:
        """A step as decoded, as serbench's own model of it, whose ``entries()`` the frontend
        accounts token by token: serbench's own steps as they are; a layout of another library's
        type converts its own."""
        return message

    def request_id(self, index: int) -> str:
        return f"{self.name}-{self.seed}-{index}"

    def requests(self, count: int) -> Iterator[EngineCoreRequest]:
        """The first ``count`` requests, the same on every call."""
        return (self.request(i) for i in range(count))

    def message(self, index: int = 0) -> Any:
        """The message a case of this workload is about: here the request."""
        return self.request(index)

    def step(self, running: Sequence[Running]) -> Any:
        """One engine step: one new token for each running request."""
        return EngineCoreOutputs(
            outputs=[
                EngineCoreOutput(r.request_id, [output_token(r.request_id, r.position)], _reason(r.last))
                for r in running
            ]
        )

    def outputs(self, request_ids: list[str], position: int, finished: bool = False) -> EngineCoreOutputs:
        """One engine step at one ``position`` for every request in ``request_ids``."""
        return self.step([Running(rid, position, finished) for rid in request_ids])

    def check(self, message: Any) -> None:
        """ValueError if a step's contents beyond its tokens are not what this workload sends (none here)."""


class Relaid(Workload):
    """The workload ``model`` with its requests as another library's own message type (a layout
    plugin's, e.g. ``layout=vllm-native``): its name, seed, steps, checks and extras are the
    model's; the plugin builds ``request`` and says what the engine decodes (``request_type``)."""

    model_layout: str | None = None  # the layout of serbench's model whose content it carries

    def __init__(self, model: Workload, description: str, request_type: type) -> None:
        self.model = model
        self.description = description
        self.output_len = model.output_len
        self.seed = model.seed
        self.kind = model.kind
        self.message_type = model.message_type
        self.request_type = request_type

    @property
    def name(self) -> str:  # one name for both: the model's request ids are this workload's
        return self.model.name

    @name.setter
    def name(self, value: str) -> None:
        self.model.name = value

    def __getattr__(self, name: str) -> Any:  # the model's extras (image keys, repeats, batch) pass through
        return getattr(self.__dict__["model"], name)

    def request_id(self, index: int) -> str:
        return self.model.request_id(index)

    def payload_bytes(self) -> int:
        return self.model.payload_bytes()

    def step(self, running: Sequence[Running]) -> Any:
        return self.model.step(running)

    def check(self, message: Any) -> None:
        self.model.check(message)


def _reason(last: bool) -> str | None:
    return "length" if last else None


def relaid(
    spec: Spec,
    build: Callable[[Spec], Workload],
    name: str,
    natives: Mapping[str, type[Relaid]],
    built_for: str,
) -> Workload:
    """A layout plugin's workload of ``spec`` (``layout=name``): the class ``natives`` holds for the
    spec's family (``images`` of ``images-4``) around serbench's own workload of the spec, which
    ``build`` makes with the class's ``model_layout`` (None: the family's default); SpecError,
    naming the workloads it is ``built_for``, for a family it holds none for."""
    native = natives.get(spec.name.partition("-")[0])
    if native is None:
        raise SpecError(f"layout={name} is built for {built_for} only, not {spec.name!r}")
    options = {k: v for k, v in spec.options.items() if k != "layout"}
    if native.model_layout is not None:
        options["layout"] = native.model_layout
    return native(build(Spec(spec.name, options)))
