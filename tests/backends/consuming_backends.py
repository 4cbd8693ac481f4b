"""A backend whose decode consumes its frames, as SGLang's shm transport's does, to prove micro
gives every decode a frame of its own and gives back every frame it makes.

``consumed_once`` pickles the message behind a token of its own per encode; its decode takes
the token, and refuses one already taken (a frame decoded twice) with a DecodeError.
``held`` holds the tokens made and not yet taken: what a shm transport would
leave in /dev/shm. ``interrupt_at=N``: the Nth decode is ended (``Terminated``, as SIGTERM ends
a case) before it takes its token, which is then left for the harness to give back.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

from serbench.model.errors import Terminated
from serbench.serializers import DecodeError
from serbench.serializers.pickle_backend import PickleSerializer

held: set[int] = set()
_TOKENS = itertools.count()


class ConsumedOnce(PickleSerializer):
    name = "consumed-once"
    consumes_frames = True

    def __init__(self, interrupt_at: int = 0) -> None:
        self.interrupt_at, self.decodes = int(interrupt_at), 0

    def encode(self, obj: Any) -> list:
        token = next(_TOKENS)
        held.add(token)
        return [token.to_bytes(8, "little"), *super().encode(obj)]

    def decode(self, frames: Sequence[Any], type_: Any) -> Any:
        self.decodes += 1
        if self.decodes == self.interrupt_at:
            raise Terminated
        token = int.from_bytes(frames[0], "little")
        if token not in held:
            raise DecodeError(f"frame {token} decoded again: its first decode took it")
        held.discard(token)
        return super().decode(frames[1:], type_)


def consumed_once(interrupt_at: int = 0) -> ConsumedOnce:
    return ConsumedOnce(interrupt_at)
