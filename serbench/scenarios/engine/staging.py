"""The engine's stage after decode: a request's tensors moved to the device that computes on them.

A serving engine does not stop at a decoded CPU tensor: before a request can be scheduled its
tensors are on the GPU. Where the decoder left their bytes decides what that copy costs — from
pageable memory a host-to-device copy runs at a fraction of the link's speed, from pinned memory
at full speed, and getting the bytes into pinned memory has its own cost. A ``Staging`` names
the choice (docs/gpu.md):

* ``device`` — ``cpu`` (the stage runs and its tensors stay put: the code path and its metrics,
  on any machine) or ``cuda[:N]``;
* ``pin`` — ``none``: copy from wherever the decoder left the tensors; ``decode``: copy each
  decoded tensor into pinned memory first (torch's caching host allocator, as vLLM's decoder
  pins its out-of-band tensors); ``receive``: the payload frames are received straight into
  pinned buffers (``zmq`` ``recv_into``), so the decoded tensors are pinned already.

Copies from pinned memory are non-blocking and the device's stream is synchronized before the
stage returns: a request is ready only once its bytes are on the device. CUDA is touched only
at run time, in the engine process, so the module runs on a CPU build of torch too; a process
that forks must not initialise CUDA first, and asks ``unavailable`` in a child
(``serbench.runtime.isolation``).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import zmq

from serbench.model.errors import TransportTimeout
from serbench.runtime import lazy
from serbench.scenarios.engine.protocol import parse_control
from serbench.workloads.tree import is_array, map_leaves

torch = lazy.torch(__name__)  # imported on first use (serbench.runtime.lazy)

clock = time.perf_counter

PIN_MODES = ("none", "decode", "receive")
_DEVICE = re.compile(r"cpu|cuda(:\d+)?")


def parse_device(text: str) -> str:
    """``cpu``, ``cuda`` or ``cuda:N``; ValueError otherwise."""
    if not _DEVICE.fullmatch(text):
        raise ValueError(f"expected cpu, cuda or cuda:N, got {text!r}")
    return text


@dataclass(frozen=True)
class Staging:
    """Where a decoded request's tensors go (``device``) and how they get pinned on the way (``pin``)."""

    device: str
    pin: str = "none"

    def __post_init__(self) -> None:
        parse_device(self.device)
        if self.pin not in PIN_MODES:
            raise ValueError(f"pin must be one of {', '.join(PIN_MODES)}, got {self.pin!r}")

    @property
    def cuda(self) -> bool:
        return self.device.startswith("cuda")

    def describe(self) -> str:
        return self.device if self.pin == "none" else f"{self.device}, pinned at {self.pin}"


def unavailable(staging: Staging) -> str | None:
    """Why this process cannot stage as asked (one line), or None when it can.

    Initialises CUDA's driver where there is one: call it in a process that
    will not fork afterwards.
    """
    if staging.pin != "none" and not staging.cuda:
        return f"--pin {staging.pin} pins host memory for copies to a GPU: it needs --engine-device cuda[:N]"
    if not staging.cuda:
        return None
    if torch.version.cuda is None:
        return (
            f"--engine-device {staging.device} needs CUDA, and this torch ({torch.__version__}) is a "
            "CPU-only build: use --engine-device cpu and --pin none"
        )
    if not torch.cuda.is_available():
        return f"--engine-device {staging.device}: torch {torch.__version__} sees no CUDA device here"
    index = torch.device(staging.device).index or 0
    if index >= torch.cuda.device_count():
        return f"--engine-device {staging.device}: only {torch.cuda.device_count()} CUDA device(s) here"
    return None


@dataclass(frozen=True)
class Staged:
    """A request on its device, how long the stage took, and how many bytes it pinned on the way."""

    request: Any
    seconds: float
    pinned_bytes: int


class Stager:
    """Stages one engine's requests as a ``Staging`` says; ValueError if this process cannot."""

    def __init__(self, staging: Staging) -> None:
        reason = unavailable(staging)
        if reason:
            raise ValueError(reason)
        self.staging = staging
        self.device = torch.device(staging.device)
        if staging.cuda:
            torch.cuda.init()  # the context exists before the first request is timed

    @property
    def receives_pinned(self) -> bool:
        """Whether payload frames are received straight into pinned buffers (needs their sizes)."""
        return self.staging.pin == "receive"

    def stage(self, request: Any) -> Staged:
        """Every tensor of ``request`` on the device; returns once the copies have completed."""
        start = clock()
        pinned = 0

        def move(leaf: Any) -> Any:
            nonlocal pinned
            if not is_array(leaf):
                return leaf
            tensor = torch.from_numpy(leaf) if isinstance(leaf, np.ndarray) else leaf
            if self.staging.pin == "decode" and not tensor.is_pinned():
                tensor = tensor.pin_memory()
                pinned += tensor.nbytes
            return tensor.to(self.device, non_blocking=self.staging.cuda and tensor.is_pinned())

        staged = map_leaves(request, move)
        if self.staging.cuda:
            torch.cuda.current_stream(self.device).synchronize()
        return Staged(staged, clock() - start, pinned)

    def receive(self, sock: zmq.Socket, timeout_s: float) -> list[Any]:
        """One message whose payload frames land straight in pinned buffers, sized by its header.

        Frame 0 is received as usual; a header that carries ``sizes`` (one per
        frame after it; the frontend adds them when the engine's ``ready``
        asked) gets them received into pinned buffers. TransportTimeout if
        nothing arrives; ValueError if the sizes do not match the frames.
        """
        if not sock.poll(int(timeout_s * 1000), zmq.POLLIN):
            raise TransportTimeout(f"nothing received within {timeout_s:g} s")
        header = sock.recv(copy=False)
        if not sock.getsockopt(zmq.RCVMORE):
            return [header]
        try:
            sizes = parse_control(header).data.get("sizes")
        except ValueError:
            sizes = None
        if sizes is None:
            return [header, *_rest(sock)]
        return [header, *recv_pinned(sock, sizes)]


def recv_pinned(sock: zmq.Socket, sizes: Any) -> list[memoryview]:
    """The rest of the message being received, one pinned buffer per frame of the given sizes.

    The buffers come from torch's caching host allocator, so they are reused
    from one request to the next. ValueError (after taking the whole message)
    if ``sizes`` is not a list of byte counts or the frames are not those sizes.
    """
    if not isinstance(sizes, list) or not all(isinstance(s, int) and s >= 0 for s in sizes):
        _rest(sock)
        raise ValueError(f"frame sizes must be a list of byte counts, got {sizes!r}")
    buffers = []
    for index, expected in enumerate(sizes, start=1):
        buffer = memoryview(torch.empty(expected, dtype=torch.uint8, pin_memory=True).numpy())
        got = sock.recv_into(buffer)
        buffers.append(buffer)
        more = sock.getsockopt(zmq.RCVMORE)
        problem = None
        if got != expected:
            problem = f"frame {index} has {got} bytes, its header said {expected}"
        elif not more and index < len(sizes):
            problem = f"{index} frame(s) arrived, the header gave {len(sizes)} sizes"
        if problem:
            _rest(sock)
            raise ValueError(problem)
        if not more:
            return buffers
    extra = len(_rest(sock))
    if extra:
        raise ValueError(f"{extra} frame(s) more than the header's {len(sizes)} sizes")
    return buffers


def _rest(sock: zmq.Socket) -> list[zmq.Frame]:
    """The remaining frames of the message being received."""
    frames = []
    while sock.getsockopt(zmq.RCVMORE):
        frames.append(sock.recv(copy=False))
    return frames
