"""The fanout scenario (engine core → N workers): what it counts, and how it fails.

Cases run in a forked child (``run_isolated``) as the runner runs them, with
few rounds. Nothing here asserts a time or a memory reading: the counts
(encode calls, bytes the core copied) are exact, and the faults must end the
case in one line with no process and no shared-memory segment left.
"""

from __future__ import annotations

import os
import time

import psutil
import pytest
from conftest import children, failing_in_background

from serbench.analysis import verdicts
from serbench.analysis.verdicts import Verdict
from serbench.links import shm
from serbench.links.transport import IPC_PREFIX
from serbench.model.errors import CaseFailed
from serbench.model.profiles import PROFILES
from serbench.model.results import Case, Environment, Results, record
from serbench.runner.matrix import Plan
from serbench.runtime.isolation import run_isolated
from serbench.scenarios import fanout
from serbench.scenarios.base import TRANSPORT
from serbench.scenarios.fanout import broadcast

PROFILE = PROFILES["quick"].with_options(fanout_rounds=2, fanout_decode_steps=1, fanout_timeout_s=5.0)
PAYLOAD = "tensor-1000000"  # one 1 MB tensor: large frames, quick to build


def _run(case: Case, profile=PROFILE):
    return fanout.Fanout().run(case, profile)


def measure(transport: str, workers: int, workload: str = PAYLOAD, backend: str = "msgspec-frombuffer"):
    case = Case("fanout", backend, workload, transport=transport, workers=workers)
    return run_isolated(_run, (case,), 120).metrics


@pytest.mark.parametrize("transport", broadcast.KINDS)
def test_every_transport_encodes_once_and_copies_as_it_must(transport: str, clean) -> None:
    one, two = measure(transport, 1), measure(transport, 2)
    for metrics in (one, two):
        assert metrics["encode_calls"].values and set(metrics["encode_calls"].values) == {1.0}
    copied = two["core_copied_bytes"].median / one["core_copied_bytes"].median
    if transport == "shm-ring":
        assert copied == pytest.approx(1.0)  # written once, read in place by every worker
    else:
        assert copied == pytest.approx(2.0, rel=0.01)  # every worker's socket gets its own copy
    # msgspec-frombuffer's tensor frame views the tensor: the encoder copied no payload byte, the
    # transport one copy for one worker
    assert 1_000_000 <= one["core_copied_bytes"].median < 1_100_000


class ReEncodingEach(broadcast.ZmqEach):
    """The seeded fault: a core that serializes the step again for every worker."""

    def publish(self, envelope, encode, alive):
        header = broadcast._encode_envelope(envelope)
        for sock in self.socks:
            sock.send_multipart([header, *encode()], copy=False)
        return 0


def _faulty(case: Case):
    broadcast.SENDERS["zmq-each"] = ReEncodingEach  # in the case's own child only
    return _run(case)


def _doc(records) -> Results:
    env = Environment(machine="x86_64", cpu="cpu", cpu_count=2, python="3.11", git_commit="a" * 40)
    return Results(
        complete=True,
        started="2026-12-01T00:00:00+00:00",
        finished="2026-12-01T00:01:00+00:00",
        profile="quick",
        environment=env,
        backends={},
        records=records,
    )


def test_re_serializing_per_worker_is_caught_and_the_gate_flags_it(clean) -> None:
    case = Case("fanout", "msgspec-frombuffer", "text-sonnet", transport="zmq-each", workers=2)
    good = run_isolated(_run, (case,), 120)
    bad = run_isolated(_faulty, (case,), 120)
    assert set(good.metrics["encode_calls"].values) == {1.0}
    assert set(bad.metrics["encode_calls"].values) == {2.0}  # one encode per worker
    base = _doc([record(case, metrics=good.metrics, info=good.info)])
    head = _doc([record(case, metrics=bad.metrics, info=bad.info)])
    comparison = verdicts.compare(base, head)
    flagged = {row.metric: row.verdict for row in comparison.regressions}
    assert flagged.get("encode_calls") == Verdict.REGRESSION


def _crash(worker, step, decoded):
    if worker == 1 and step >= 1:
        os._exit(3)


def _hang(worker, step, decoded):
    if worker == 1 and step >= 1:
        time.sleep(3600)


def _wrong(worker, step, decoded):
    if worker == 1 and step >= 1:
        decoded.token_ids[0] += 1  # the bytes it holds are not the ones sent


def _hooked(case: Case, hook):
    fanout.WORKER_HOOK = hook
    return _run(case)


@pytest.mark.parametrize(
    "hook, expected",
    [
        (_crash, "worker 1 died (exited with code 3)"),
        (_hang, "did not acknowledge"),
        (_wrong, "checksum mismatch"),
    ],
)
@pytest.mark.parametrize("transport", ["shm-ring", "zmq-pub"])
def test_a_faulty_worker_fails_the_case_in_one_line(
    transport: str, hook, expected: str, clean, ipc_sandbox
) -> None:
    case = Case("fanout", "pickle", "text-sonnet", transport=transport, workers=2)
    with pytest.raises(CaseFailed) as failed:
        run_isolated(_hooked, (case, hook), 60)
    message = str(failed.value)
    assert expected in message and "\n" not in message
    if hook is _wrong:
        assert "worker 1" in message


def test_placement_gives_the_core_the_first_cpu_and_each_worker_the_next(monkeypatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {5, 3, 7})
    assert broadcast.placement(1) == (3, 5)
    assert broadcast.placement(4) == (3, 5, 7, 3, 5)  # more processes than CPUs: round again


def test_the_ring_wakes_workers_on_cpus_of_their_own_before_those_beside_the_core() -> None:
    assert broadcast.wake_order((0, 1, 0), 2) == [0, 1]  # worker 1 shares the core's CPU: last
    assert broadcast.wake_order((0, 1, 0, 1), 3) == [0, 2, 1]
    assert broadcast.wake_order((4, 0, 4, 2, 4), 4) == [0, 2, 1, 3]
    assert broadcast.wake_order((), 3) == [0, 1, 2]  # unpinned: by index


def _on_one_cpu(worker, step, decoded):
    cpus = os.sched_getaffinity(0)
    if len(cpus) != 1:
        raise RuntimeError(f"worker {worker} may run on CPUs {sorted(cpus)}")


def test_the_core_and_every_worker_run_where_the_record_says(clean, ipc_sandbox) -> None:
    case = Case("fanout", "pickle", "text-sonnet", transport="zmq-pub", workers=2)
    outcome = run_isolated(_hooked, (case, _on_one_cpu), 60)  # a worker on several CPUs fails it
    assert outcome.info.cpus == list(broadcast.placement(2))


def _workers_of(core: psutil.Process, count: int, timeout_s: float = 60.0) -> list[psutil.Process]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            found = core.children()
        except psutil.NoSuchProcess:
            found = []
        mapped = [p for p in found if _maps_ring(p)]
        if len(mapped) >= count:
            return mapped
        time.sleep(0.02)
    raise AssertionError("the workers never mapped the ring")


def _maps_ring(proc: psutil.Process) -> bool:
    try:
        with open(f"/proc/{proc.pid}/maps") as maps:
            return any(shm.PREFIX in line and line.rstrip().endswith("(deleted)") for line in maps)
    except OSError:
        return False


def _past_handshake(sandbox, timeout_s: float = 60.0) -> None:
    """Until the core removed its socket folder: every worker connected, steps under way."""
    deadline = time.monotonic() + timeout_s
    while list(sandbox.glob(f"{IPC_PREFIX}*")):
        assert time.monotonic() < deadline, "the core never got past its handshake"
        time.sleep(0.01)


@pytest.mark.parametrize("victim", ["worker", "core"])
def test_kill_9_leaves_nothing_behind(victim: str, clean, ipc_sandbox) -> None:
    case = Case("fanout", "pickle", "text-sonnet", transport="shm-ring", workers=2)
    long = PROFILE.with_options(fanout_rounds=100_000)
    failure = failing_in_background(_run, (case, long))
    deadline = time.monotonic() + 60
    while not (started := children(recursive=False)) and time.monotonic() < deadline:
        time.sleep(0.01)
    core = started[0]
    workers = _workers_of(core, 2)
    _past_handshake(ipc_sandbox)
    (workers[1] if victim == "worker" else core).kill()
    message = failure()
    # a worker: "worker 1 died (killed by SIGKILL)" (or "died during setup (…)" if it was still
    # starting); the core: "process crashed (SIGKILL)"
    assert ("died" in message if victim == "worker" else "crashed" in message) and "SIGKILL" in message


def test_the_default_run_leaves_fanout_out_and_transport_values_split_by_scenario() -> None:
    from serbench.cli import options

    class Args:
        backends = workloads = scenarios = None

    plan = options.plan(Args())
    assert "fanout" not in plan.scenarios and "micro" in plan.scenarios
    chosen = {"transport": ("shm", "zmq-each", "shm-ring"), "workers": (1, 2)}
    cases = Plan(["pickle"], ["text-sonnet"], ["memory", "fanout"], chosen).cases()
    assert {c.transport for c in cases if c.scenario == "memory"} == {"shm"}
    assert {(c.transport, c.workers) for c in cases if c.scenario == "fanout"} == {
        ("zmq-each", 1),
        ("zmq-each", 2),
        ("shm-ring", 1),
        ("shm-ring", 2),
    }
    assert "shm-ring" not in TRANSPORT.choices


def test_the_scaling_table_marks_oversubscribed_cases_and_names_what_scales() -> None:
    info = dict(
        cpu_count=2, rounds=1, decode_steps=0, batch=1, block_size=16, ring_bytes=None, worker_peak_bytes=[0],
        worker_pss_bytes=[0], worker_uss_bytes=[0], core_pss_bytes=0, encoder_copied_bytes=0, warning=None,
    )  # fmt: skip
    from serbench.model.metrics import measured
    from serbench.model.results import FanoutInfo

    records = []
    for transport, times in (("zmq-each", (1.0, 3.0)), ("shm-ring", (1.0, 1.2))):
        for workers, t in zip((1, 2), times, strict=True):
            case = Case("fanout", "pickle", "images-8", transport=transport, workers=workers)
            metrics = {
                "fanout_s": measured("fanout_s", [t]),
                "core_copied_bytes": measured("core_copied_bytes", [1]),
            }
            over = fanout.oversubscribed(workers, 2)
            records.append(record(case, metrics=metrics, info=FanoutInfo(oversubscribed=over, **info)))
    copies, scales = fanout.scaling_tables(_doc(records))
    assert [row[2] for row in copies.rows if row[0] == "pickle@shm-ring"] == ["1", "2 *"]
    assert "pickle@shm-ring scales best" in scales.note
