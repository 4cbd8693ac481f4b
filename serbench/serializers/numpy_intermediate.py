"""``numpy-intermediate``: tensor → ``numpy()`` → buffer; ``np.frombuffer`` → ``torch.from_numpy``.

vLLM's first msgpack stage. A dtype numpy lacks (bfloat16, float8, complex32, ...) travels
as the unsigned integer of its size and is viewed back on decode.
"""

from __future__ import annotations

from serbench.serializers.msgpack_backend import MsgpackSerializer
from serbench.serializers.tensors import tensor_as_numpy_buffer, tensor_via_numpy


class NumpyIntermediateSerializer(MsgpackSerializer):
    """msgpack; tensors through a numpy temporary both ways."""

    name = "numpy-intermediate"
    description = "msgpack; tensor -> numpy -> buffer, decode np.frombuffer -> torch.from_numpy"
    tensor_to_buffer = staticmethod(tensor_as_numpy_buffer)
    tensor_from_buffer = staticmethod(tensor_via_numpy)
