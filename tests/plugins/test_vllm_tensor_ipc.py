"""Backend ``vllm:tensor_ipc=torch_shm``: vLLM's own tensor IPC (``TensorIpcSender`` /
``TensorIpcReceiver`` over a ``torch.multiprocessing`` queue), shared by the frontend with the
engine it forks (docs/vllm.md).

A request goes through a real forked engine and is checked there; the queue's threads and the fds
of its shared memory are gone after the case, also after a case that failed; a frame whose tensors
never come fails in bounded time with a clear message; micro decodes a fresh frame each call;
fan-out records its cases unsupported, with why. Nothing asserts a time.
"""

from __future__ import annotations

import gc
import math
import threading
from multiprocessing import resource_sharer

import pytest
from conftest import NEEDS_VLLM

from serbench.links import transport
from serbench.model.errors import EngineError
from serbench.model.profiles import PROFILES
from serbench.model.results import Case
from serbench.model.specs import SpecError
from serbench.plugins.vllm import tensor_ipc
from serbench.probes.timing import MIN_SAMPLES
from serbench.runner import matrix as runner
from serbench.runtime.isolation import run_isolated
from serbench.scenarios.base import Outcome
from serbench.scenarios.ipc import Settings, measure
from serbench.serializers import DecodeError, attached, get_serializer, shared_channel
from serbench.workloads import get_workload
from serbench.workloads.tree import arrays

pytestmark = [NEEDS_VLLM, pytest.mark.usefixtures("vllm")]

SPEC = "vllm:tensor_ipc=torch_shm"
NATIVE = "images-2:layout=vllm-native,profile=llava"  # 1.35 MB an image
FAST = Settings(num_prompts=3, rates=(math.inf,), max_concurrency=1, floor=2, step_s=0.001)


@pytest.fixture
def nothing_left():
    """Before and after (``clean``'s children and segments aside): the same threads, no fd held
    for another process by ``multiprocessing.resource_sharer``."""
    before = {t.ident for t in threading.enumerate()}
    yield
    gc.collect()  # a backend's channel of its own goes with the backend
    assert {t.name for t in threading.enumerate() if t.ident not in before} == set()
    assert resource_sharer._resource_sharer._listener is None
    assert resource_sharer._resource_sharer._cache == {}


def test_requests_go_through_a_forked_engine_and_are_checked_there(clean, nothing_left) -> None:
    outcome = measure(SPEC, NATIVE, FAST)
    assert outcome.info.local_engine
    assert outcome.info.verification.messages >= 1
    assert len(outcome.metrics["ttft_s"].values) >= FAST.num_prompts  # every one answered and checked


def test_the_frames_carry_handles_and_the_tensors_come_over_the_queue(nothing_left) -> None:
    request = get_workload(NATIVE).request(0)
    frontend = get_serializer(SPEC)
    with shared_channel(frontend) as channel:
        engine = attached(get_serializer(SPEC), channel)
        frames = frontend.encode(request)
        assert len(frames) == 1  # no out-of-band frame: each tensor went to the queue
        decoded = engine.decode(frames, type(request))
        assert all(t.is_shared() for t in arrays(decoded))
        assert not any(t.is_shared() for t in arrays(request))  # the message sent is left as it was
        with pytest.raises(DecodeError, match="no tensor came over the tensor IPC queue"):
            engine.decode(frames, type(request))  # its tensors were taken by the first decode


def test_a_frame_whose_tensors_never_come_fails_the_case_with_why(monkeypatch, clean, nothing_left) -> None:
    monkeypatch.setattr(tensor_ipc, "RECEIVE_TIMEOUT_S", 0.2)  # the forked engine inherits it
    stray = get_serializer(SPEC)  # a channel of its own: what it sends never reaches the engine
    request = get_workload(NATIVE).request(0)

    def elsewhere(socket, frames) -> None:
        transport.send(socket, [frames[0], *stray.encode(request)])

    with pytest.raises(EngineError, match=r"could not decode a request.*no tensor came over the tensor IPC"):
        measure(SPEC, NATIVE, FAST, sender=elsewhere)


def test_a_frame_naming_queued_tensors_is_refused_by_a_backend_without_a_queue() -> None:
    frames = get_serializer(SPEC).encode(get_workload(NATIVE).request(0))
    with pytest.raises(DecodeError, match="no channel"):
        get_serializer(SPEC).decode(frames, get_workload(NATIVE).request_type)
    with pytest.raises(DecodeError, match="tensor provider is not set"):
        get_serializer("vllm").decode(frames, get_workload(NATIVE).request_type)


def test_the_memory_scenario_measures_it(clean) -> None:
    case = Case("memory", SPEC, NATIVE, transport="ipc")
    outcome = run_isolated(runner.run_case, (case, PROFILES["quick"]), 120)
    assert isinstance(outcome, Outcome), outcome
    assert outcome.info.verification.messages == 1
    assert outcome.metrics["copies_total"].median == pytest.approx(1.0, abs=0.3)  # the shared segments


def test_fanout_records_it_unsupported_with_why() -> None:
    case = Case("fanout", SPEC, NATIVE, transport="shm-ring", workers=1)
    outcome = runner.run_case(case, PROFILES["quick"])
    assert isinstance(outcome, runner.Unsupported)
    assert "rank 0" in outcome.reason


def test_micro_times_it_a_fresh_frame_per_decode(clean, nothing_left) -> None:
    """A decode takes the frame's tensors off the queue (``consumes_frames``): micro decodes a
    frame of its own each call, as it does SGLang's shm features (one visit: its share of samples)."""
    outcome = run_isolated(runner.run_case, (Case("micro", SPEC, NATIVE), PROFILES["quick"]), 120)
    assert isinstance(outcome, Outcome), outcome
    assert len(outcome.metrics["decode_s"].values) >= MIN_SAMPLES
    assert outcome.info.verification.messages == 1


def test_a_separately_started_engine_is_unsupported_with_why() -> None:
    profile = PROFILES["quick"].with_options(ipc_engine="tcp://127.0.0.1:5555")
    outcome = runner.run_case(Case("ipc", SPEC, NATIVE, transport="tcp"), profile)
    assert isinstance(outcome, runner.Unsupported)
    assert "--engine" in outcome.reason


def test_tensor_ipc_names_its_transports_when_given_another() -> None:
    with pytest.raises(SpecError, match=r"tensor_ipc= is one of none, torch_shm, not 'cuda'"):
        get_serializer("vllm:tensor_ipc=cuda")
    assert get_serializer("vllm:tensor_ipc=none").channel() is None  # the default: frames, no queue
