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

from serbench.serializers.base import Buffer

_NO_STORAGE_DTYPE = (
    "torch's own tensor pickler cannot rebuild a storage of this dtype "
    "(AttributeError: UntypedStorage has no attribute 'dtype', torch 2.13)"
)


class PickleSerializer:
    """Whole message pickled in-band, one frame."""

    name = "pickle"
    description = "stdlib pickle, highest protocol, whole message in one in-band frame"
    safe = False
    # What torch's tensor reducer, which this backend is, cannot carry.
    unsupported = {
        **{
            pattern: _NO_STORAGE_DTYPE
            for pattern in (
                "dtype-float8_*",
                "dtype-float4_*",
                "dtype-bits*",
                "dtype-complex32",
                "dtype-uint16",
                "dtype-uint32",
                "dtype-uint64",
            )
        },
        "dtype-int[1-7]": "torch's own tensor pickler does not know torch's placeholder dtypes",
        "dtype-uint[1-7]": "torch's own tensor pickler does not know torch's placeholder dtypes",
    }

    dumps: Callable[[Any], bytes] = staticmethod(partial(pickle.dumps, protocol=pickle.HIGHEST_PROTOCOL))

    def encode(self, obj: Any) -> list[Buffer]:
        return [self.dumps(obj)]

    def decode(self, frames: Sequence[Buffer], type_: type) -> Any:
        return pickle.loads(frames[0])
