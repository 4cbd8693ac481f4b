"""``msgspec-frombuffer``: tensor bytes viewed as uint8; decode with ``torch.frombuffer``.

vLLM's last stage: no numpy temporary, nested multimodal tensors encoded
recursively wherever they sit in the message.
"""

from __future__ import annotations

from serbench.serializers.msgpack_backend import MsgpackSerializer
from serbench.serializers.tensors import tensor_buffer, tensor_from_buffer


class MsgspecFrombufferSerializer(MsgpackSerializer):
    """msgpack; tensors as uint8 views, decoded by torch.frombuffer."""

    name = "msgspec-frombuffer"
    description = "msgpack; tensor bytes as uint8 view, decode torch.frombuffer; nested tensors recursive"
    tensor_to_buffer = staticmethod(tensor_buffer)
    tensor_from_buffer = staticmethod(tensor_from_buffer)
