"""vLLM's tensor IPC (``--mm-tensor-ipc torch_shm``, vLLM #32104), the ``tensor_ipc=`` option of
backend ``vllm`` (docs/vllm.md).

With it vLLM's frontend hands each tensor at or above the encoder's threshold to
``TensorIpcSender``: the tensor is moved to shared memory (``share_memory_``) and put on a
``torch.multiprocessing`` queue, the msgpack frame carrying only a small handle; the engine's
decoder takes it back off the queue with ``TensorIpcReceiver``, mapping the same memory. The
queue is made before the engine is forked and shared by both: a ``Channel`` here, which a
scenario makes through the backend's ``channel()`` before it forks and gives to the backend of
each process (``attach``; ``serbench.serializers.base``). vLLM's own sender and receiver do the
work; serbench wraps them only to copy (where vLLM moves) and to bound the wait (``Endpoint``).
"""

from __future__ import annotations

import contextlib
import queue as queues
import weakref
from collections.abc import Iterator
from multiprocessing import resource_sharer
from typing import Any

from serbench.plugins.vllm import adapter
from serbench.runtime import lazy
from serbench.runtime.processes import FORK
from serbench.serializers.base import DecodeError

torch = lazy.torch(__name__)  # imported on first use (serbench.runtime.lazy)

# Each transport of ``tensor_ipc=``, and how backend ``vllm`` describes it.
TRANSPORTS = {
    "none": "tensors as out-of-band frames",
    "torch_shm": "tensors in shared memory over a torch.multiprocessing queue "
    "(vLLM's --mm-tensor-ipc torch_shm)",
}
# Shorter than the link's stall timeout (``engine.client.STALL_TIMEOUT_S``), so that an engine
# whose tensors never come says so before its frontend gives up on it (vLLM's own wait is longer).
RECEIVE_TIMEOUT_S = 5.0
DRAIN_S = 0.05  # at close, how long a get waits for what the queue's feeder still writes
# The scenarios that cannot run it, and why: the runner records their cases unsupported.
UNSUPPORTED_SCENARIOS = {
    "fanout": "fan-out broadcasts each step to several workers; vLLM's tensor IPC queue feeds rank 0 "
    "alone (TensorIpcSender has a single queue)",
}


def checked(transport: str) -> str:
    """``transport`` if it names one of ``TRANSPORTS``; ValueError (the spec's one line) otherwise."""
    if transport not in TRANSPORTS:
        raise ValueError(f"tensor_ipc= is one of {', '.join(TRANSPORTS)}, not {transport!r}")
    return transport


class TensorsLost(DecodeError):
    """A frame names tensors that did not come over the queue in time: a frame that cannot be
    decoded, raised inside vLLM's decoder (its tensor provider)."""


_open_channels = [0]  # channels open in this process: the fd sharer is stopped with the last


class Channel:
    """One ``torch.multiprocessing`` queue between a process and those it forks, as vLLM makes its
    tensor queue before it starts the engine.

    A tensor crosses it as torch's reduction of its storage (the ``file_descriptor`` strategy): an
    fd of its unlinked shared memory, which the receiver fetches from the sender's
    ``multiprocessing.resource_sharer`` thread and maps. ``close`` takes what no decode took, ends
    the queue's feeder thread and, with the last channel of the process, the fd sharer (closing
    the fds it still held): nothing stays behind.
    """

    def __init__(self) -> None:
        import torch.multiprocessing  # noqa: F401 (registers torch's reductions: tensors cross as fds)

        self.queue = FORK.Queue()
        self.closed = False
        _open_channels[0] += 1

    def close(self) -> None:
        """Drain, close the queue and join its feeder; the fd sharer with the last channel."""
        if self.closed:
            return
        self.closed = True
        while True:
            try:
                self.queue.get(timeout=DRAIN_S)
            except queues.Empty:
                break
            except Exception:  # its fd's sharer gone with its process: the bytes are taken all the same
                continue
        self.queue.close()
        self.queue.join_thread()
        _open_channels[0] -= 1
        if _open_channels[0] == 0:
            resource_sharer.stop()

    @classmethod
    @contextlib.contextmanager
    def opened(cls) -> Iterator[Channel]:
        """A channel, closed on the way out (also when the body fails)."""
        channel = cls()
        try:
            yield channel
        finally:
            channel.close()


def in_shared_memory(tensor: Any) -> Any:
    """``tensor`` in shared memory as ``share_memory_`` puts it there, one copy into a new segment,
    but on a copy: ``share_memory_`` moves the tensor itself, after which vLLM sends it again for
    nothing, and serbench sends one message many times (vLLM's frontend makes each request's
    tensors anew). A tensor already shared is sent as it is, as vLLM sends it; the copy is a leaf
    needing grad where the tensor does (torch refuses to send a tensor that autograd made)."""
    if tensor.is_shared():
        return tensor
    storage = torch.UntypedStorage._new_shared(tensor.numel() * tensor.element_size())
    with torch.no_grad():
        shared = torch.empty(0, dtype=tensor.dtype).set_(storage, 0, tensor.shape).copy_(tensor)
    return shared.requires_grad_(tensor.requires_grad)


class Endpoint:
    """A backend's end of a channel: vLLM's ``TensorIpcSender`` as its encoder's
    ``oob_tensor_consumer`` and ``TensorIpcReceiver`` as its decoders' ``oob_tensor_provider``.

    The channel is the one ``attach`` gives; until then, one of its own made at the first tensor
    sent (a backend used in one process: the conformance suite's round trips), closed when the
    endpoint goes or is attached. A decode waits ``RECEIVE_TIMEOUT_S`` at most for a tensor
    (``TensorsLost``), and a tensor that is not the dtype and shape its frame says is refused.
    """

    def __init__(self) -> None:
        self._ipc = adapter.tensor_ipc()
        self._channel: Channel | None = None
        self._own: weakref.finalize | None = None
        self._sender: Any = None
        self._receiver: Any = None

    def attach(self, channel: Channel) -> None:
        """Send and receive over ``channel`` from now on (a channel of its own is closed)."""
        if self._own is not None:
            self._own()
            self._own = None
        self._channel = channel
        self._sender = self._ipc.Sender(channel.queue)
        self._receiver = self._ipc.Receiver(_Bounded(channel.queue))

    # vLLM's OOBTensorConsumer: ``new_message`` before each encode, then each tensor.
    def new_message(self) -> None:
        if self._sender is not None:
            self._sender.new_message()

    def __call__(self, tensor: Any) -> dict | None:
        if self._sender is None:
            own = Channel()
            self.attach(own)
            self._own = weakref.finalize(self, own.close)
        return self._sender(in_shared_memory(tensor))

    def receive(self, dtype: str, shape: tuple[int, ...], meta: dict) -> Any:
        """vLLM's ``OOBTensorProvider``: the tensor ``meta`` names, off the queue."""
        if self._receiver is None:
            raise TensorsLost("the frame names a tensor sent by tensor IPC; this backend has no channel")
        tensor = self._receiver(dtype, shape, meta)
        if str(tensor.dtype).removeprefix("torch.") != dtype or tuple(tensor.shape) != tuple(shape):
            raise ValueError(
                f"tensor {meta} is {tensor.dtype} {tuple(tensor.shape)}, "
                f"its frame says {dtype} {tuple(shape)}"
            )
        return tensor


class _Bounded:
    """The queue as ``TensorIpcReceiver`` reads it, each wait at most ``RECEIVE_TIMEOUT_S``, and an
    empty wait said in words (vLLM's receiver lets ``queue.Empty`` through)."""

    def __init__(self, queue: Any) -> None:
        self.queue = queue

    def get(self, timeout: float | None = None) -> Any:
        wait = RECEIVE_TIMEOUT_S if timeout is None else min(timeout, RECEIVE_TIMEOUT_S)
        try:
            return self.queue.get(timeout=wait)
        except queues.Empty:
            raise TensorsLost(
                f"no tensor came over the tensor IPC queue within {wait:g} s: the frame names tensors "
                "never sent, or taken by an earlier decode"
            ) from None
