"""What every workload offers: deterministic requests and the outputs an engine returns."""

from __future__ import annotations

import zlib
from collections.abc import Iterator

from workloads.messages import EngineCoreOutput, EngineCoreOutputs, EngineCoreRequest

VOCAB_SIZE = 32_000


def output_token(request_id: str, position: int) -> int:
    """The token a simulated engine emits at ``position`` for ``request_id``.

    A pure function of both, so the frontend can account for every token.
    """
    return zlib.crc32(f"{request_id}#{position}".encode()) % VOCAB_SIZE


class Workload:
    """A deterministic stream of requests; subclasses build ``request(index)``."""

    name: str
    description: str
    output_len: int
    seed: int

    def request(self, index: int) -> EngineCoreRequest:
        raise NotImplementedError

    def payload_bytes(self) -> int:
        """Tensor bytes in one request (0 for text)."""
        raise NotImplementedError

    def request_id(self, index: int) -> str:
        return f"{self.name}-{self.seed}-{index}"

    def requests(self, count: int) -> Iterator[EngineCoreRequest]:
        """The first ``count`` requests, the same on every call."""
        return (self.request(i) for i in range(count))

    def outputs(self, request_ids: list[str], position: int, finished: bool = False) -> EngineCoreOutputs:
        """One engine step: one new token for each running request."""
        reason = "length" if finished else None
        return EngineCoreOutputs(
            outputs=[EngineCoreOutput(rid, [output_token(rid, position)], reason) for rid in request_ids]
        )
