"""``pickle``: the whole message pickled in-band at the highest protocol.

What vLLM's engine did first. Tensors go through torch's own reducer, which
serialises their storage into the pickle stream: every payload byte is copied
on both sides. Unpickling runs code named by its input: never safe.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from serializers.base import Buffer


class PickleSerializer:
    """Whole message pickled in-band, one frame."""

    name = "pickle"
    description = "stdlib pickle, highest protocol, whole message in one in-band frame"
    safe = False

    dumps: Callable[[Any], bytes] = staticmethod(partial(pickle.dumps, protocol=pickle.HIGHEST_PROTOCOL))

    def encode(self, obj: Any) -> list[Buffer]:
        return [self.dumps(obj)]

    def decode(self, frames: Sequence[Buffer], type_: type) -> Any:
        return pickle.loads(frames[0])
