"""Fan-out on SGLang's own messages (``layout=sglang-native``, docs/fanout.md): the step is what
SGLang's scheduler broadcasts to its tensor-parallel ranks, the requests it received, as SGLang's
own type; every SGLang backend carries it over every transport, every worker checks every step,
and a backend that cannot carry SGLang's types is recorded unsupported with the layout's reason.

Cases run as the runner runs them (``run_case`` in a forked child), with few rounds; SGLang is
imported before the first test (the ``sglang`` fixture), so no child pays for it. Nothing asserts
a time: bytes, counts and types are exact.
"""

from __future__ import annotations

import pytest
from conftest import NEEDS_SGLANG

from serbench.model.profiles import PROFILES
from serbench.model.results import Case
from serbench.plugins.sglang import adapter
from serbench.plugins.sglang.workload import batch_type
from serbench.runner import matrix as runner
from serbench.runtime.isolation import run_isolated
from serbench.scenarios import fanout
from serbench.scenarios.base import Outcome
from serbench.scenarios.fanout import steps as fanout_steps
from serbench.serializers import get_serializer
from serbench.workloads import get_workload

pytestmark = [NEEDS_SGLANG, pytest.mark.usefixtures("sglang")]

TEXT = "text-sonnet:layout=sglang-native"
IMAGES = "images-2:layout=sglang-native,profile=llava"  # 1.35 MB an image
PROFILE = PROFILES["quick"].with_options(fanout_rounds=2, fanout_decode_steps=1, fanout_timeout_s=20.0)


def _run_hooked(case: Case, hook):
    """The case as the runner runs it, ``hook`` seeing every step each worker decodes."""
    fanout.WORKER_HOOK = hook  # in the case's own child only
    return runner.run_case(case, PROFILE)


def _sglangs_own_broadcast(worker: int, step: int, decoded) -> None:
    """``fanout.WORKER_HOOK``: a step that is not SGLang's batch of its own requests, one on a
    prefill step (even: one decode step a round) and none on a decode step, is a wrong step."""
    requests = decoded.batch if type(decoded) is batch_type() else None
    kind = adapter.load().TokenizedGenerateReqInput
    if requests is None or len(requests) != (step % 2 == 0) or any(type(r) is not kind for r in requests):
        raise ValueError(f"worker {worker}, step {step}: decoded {decoded!r:.200}")


@pytest.mark.parametrize(
    "backend, workload, transport, workers",
    [
        ("sglang-pickle", TEXT, "torch-dist", 2),  # SGLang's own broadcast_pyobj: pickle over gloo
        ("sglang-pickle", IMAGES, "shm-ring", 1),
        ("sglang", TEXT, "zmq-each", 2),
        ("sglang", IMAGES, "torch-dist", 1),
        ("sglang-oob", TEXT, "shm-ring", 1),
        ("sglang-oob", IMAGES, "zmq-pub", 2),
    ],
)
def test_every_sglang_backend_broadcasts_sglangs_own_step_verified_by_every_worker(
    backend: str, workload: str, transport: str, workers: int, clean
) -> None:
    case = Case("fanout", backend, workload, transport=transport, workers=workers)
    outcome = run_isolated(_run_hooked, (case, _sglangs_own_broadcast), 120)
    assert isinstance(outcome, Outcome), outcome
    m, info = outcome.metrics, outcome.info
    assert set(m["encode_calls"].values) == {1.0} and len(m["fanout_s"].values) == 2
    assert info.verification.messages == info.verification.of == 3  # two prefill steps, a decode step
    assert info.batch == 0  # SGLang's ranks schedule for themselves: no running batch travels
    payload = get_workload(workload).payload_bytes()
    assert m["wire_bytes"].median > max(payload, 5000)  # the request, its ids and its tensors
    assert m["decode_wire_bytes"].median < 200  # an empty batch


def test_a_backend_without_sglangs_types_is_unsupported_with_the_layouts_reason() -> None:
    case = Case("fanout", "msgspec-frombuffer", IMAGES, transport="torch-dist", workers=2)
    outcome = runner.run_case(case, PROFILE)
    assert isinstance(outcome, runner.Unsupported)
    assert outcome.reason == get_workload(IMAGES).unsupported_by(get_serializer("msgspec-frombuffer"))


def test_sglangs_shm_features_are_unsupported_a_frame_each_worker_would_take() -> None:
    """features=shm is the frontend's hop: its decode unlinks the segments, so a step's frame
    decodes once, and fan-out's workers each decode it."""
    case = Case("fanout", "sglang:features=shm", IMAGES, transport="shm-ring", workers=2)
    outcome = runner.run_case(case, PROFILE)
    assert isinstance(outcome, runner.Unsupported) and "taken by their first decode" in outcome.reason
    inline = Case("fanout", "sglang", IMAGES, transport="shm-ring", workers=2)
    assert fanout.Fanout().unsupported(inline, PROFILE) is None


def _first_id(step) -> None:
    step.batch[0].input_ids[3] += 1


def _first_pixel(step) -> None:
    item = step.batch[0].mm_inputs.mm_items[1]
    item.feature = item.feature.clone()  # sglang-oob's views its frame
    item.feature.view(-1)[0] += 1


@pytest.mark.parametrize("backend", ["sglang", "sglang-pickle", "sglang-oob"])
@pytest.mark.parametrize("change", [_first_id, _first_pixel])
def test_the_workers_check_covers_sglangs_ids_and_tensors(backend: str, change) -> None:
    prefills, schedule = fanout_steps.case_steps(IMAGES, 4, 1, "none")
    step = schedule.step(0, prefills)
    (request,) = schedule.requests(step)  # a prefill step: the workload's request, as SGLang's own
    assert request is prefills.request(0) and schedule.requests(schedule.step(1, prefills)) == []
    checksum = fanout_steps.step_checksum(step, prefills.crc(0))
    serializer = get_serializer(backend)
    decoded = serializer.decode([bytes(memoryview(f).cast("B")) for f in serializer.encode(step)], type(step))
    fanout_steps.check_step(decoded, checksum, type(step))
    change(decoded)
    with pytest.raises(ValueError, match="checksum mismatch"):
        fanout_steps.check_step(decoded, checksum, type(step))
    with pytest.raises(ValueError, match="not a step"):
        fanout_steps.check_step(decoded.batch, checksum, type(step))
