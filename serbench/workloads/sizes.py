"""``tensor-N``: a request carrying one tensor of N bytes, for the size sweep.

vLLM #46121 asks for a model-free sweep from bytes to megabytes straddling the
two thresholds a message meets on its way: the backends' 256 B inline
threshold (smaller arrays travel inside the header, larger ones as their own
zero-copy frame) and pyzmq's 64 KiB ``zmq.COPY_THRESHOLD`` (smaller frames are
copied even with ``copy=False``). ``SIZES`` are the default sweep, one byte
either side of each threshold. The tensor is seeded random uint8, inside a
one-item ``MultiModalKwargs`` as an image's ``pixel_values``, beside a 16-token
prompt.
"""

from __future__ import annotations

from serbench.runtime import lazy
from serbench.workloads.base import Workload
from serbench.workloads.messages import (
    EngineCoreRequest,
    MultiModalFieldElem,
    MultiModalKwargs,
    MultiModalKwargsItem,
    SamplingParams,
)

torch = lazy.torch(__name__)  # imported on first use: `serbench list` describes workloads without it

# The default sweep, one byte either side of each threshold; asv's suite (benchmarks/outputs.py)
# reads it here, in every commit.
SIZES = (64, 255, 256, 4 << 10, (64 << 10) - 1, 64 << 10, 1 << 20, 4 << 20, 64 << 20)
MAX_BYTES = 1 << 32
PROMPT_TOKENS = 16


class TensorSize(Workload):
    """One request with one uint8 tensor of ``size`` bytes."""

    output_len = 4

    def __init__(self, size: int, seed: int | str = 0) -> None:
        if not 0 <= size <= MAX_BYTES:
            raise ValueError(f"tensor size must be in [0, {MAX_BYTES}] bytes, got {size}")
        self.size = size
        self.seed = int(seed)
        self.name = f"tensor-{size}"
        self.description = f"one request with one {size}-byte tensor (size sweep)"

    def payload_bytes(self) -> int:
        return self.size

    def request(self, index: int) -> EngineCoreRequest:
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + index)
        data = torch.randint(0, 256, (self.size,), dtype=torch.uint8, generator=gen)
        item = MultiModalKwargsItem({"pixel_values": MultiModalFieldElem("image", "pixel_values", data)})
        return EngineCoreRequest(
            request_id=self.request_id(index),
            prompt_token_ids=[1 + (index + i) % 1000 for i in range(PROMPT_TOKENS)],
            sampling_params=SamplingParams(temperature=0.0, max_tokens=self.output_len, ignore_eos=True),
            arrival_time=0.0,
            mm_inputs=MultiModalKwargs({"image": [item]}),
            eos_token_id=2,
        )
