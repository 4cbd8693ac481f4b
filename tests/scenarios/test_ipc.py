"""The ipc scenario end to end: metrics from a real frontend/engine pair, and integrity.

Every case here forks a real engine on a private ipc:// folder; the folder
lives under ``tmp_path`` (``tempfile.tempdir``) so the tests can check that
nothing is left behind.
"""

from __future__ import annotations

import ctypes
import math
import multiprocessing
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import psutil
import pytest
import zmq

from serbench.links import transport
from serbench.model.errors import EngineError, IntegrityError
from serbench.model.profiles import PROFILES
from serbench.model.results import Case, Record, Results, Sweep, SweepPoint, record
from serbench.model.stats import MIN_DISTRIBUTION
from serbench.scenarios import ipc
from serbench.scenarios.engine.protocol import Control
from serbench.scenarios.ipc import Settings, load, measure
from serbench.scenarios.ipc.load import Tracked, account
from serbench.workloads import get_workload, output_token
from serbench.workloads.messages import EngineCoreOutput, EngineCoreOutputs

TEXT = "text-sonnet:output_len=6"
IMAGES = "images-4"  # gemma: four 9.6 MB tensors, one zero-copy frame each


def settings(**changes) -> Settings:
    base = {"num_prompts": 3, "rates": (math.inf,), "max_concurrency": None, "floor": 3}
    return Settings(**{**base, "step_s": 0.001, **changes})


pytestmark = pytest.mark.usefixtures("ipc_sandbox")


def test_text_case_accounts_for_every_token() -> None:
    out = measure("msgspec-frombuffer", TEXT, settings())
    metrics = out.metrics
    assert len(metrics["ttft_s"].values) == 3
    assert len(metrics["itl_s"].values) == 3 * 5
    assert out.info.output_tokens == 18
    assert metrics["floor_rtt_s"].median > 0
    assert metrics["ttft_s"].median <= metrics["e2e_s"].median
    assert "payload_gb_per_s" not in metrics
    assert "ttft_p99_s" not in metrics  # a p99 of 3 requests is not one


def test_ttft_is_decomposed_per_request_from_the_engines_stamps() -> None:
    out = measure("flat-mmk", TEXT, settings(num_prompts=5, rates=(400.0,)))
    m = {name: m.values for name, m in out.metrics.items()}
    for name in ("encode_s", "ingress_s", "queue_s", "first_step_s"):
        assert len(m[name]) == 5, name
    # One clock on both sides: every part is positive, and the parts of each
    # request (its own order as sent) add up to at most its TTFT.
    assert min(m["ingress_s"] + m["queue_s"] + m["first_step_s"] + m["egress_s"]) > 0
    assert all(e < i for e, i in zip(m["encode_s"], m["ingress_s"], strict=True))
    assert all(f >= 0.001 for f in m["first_step_s"])  # the first step sleeps step_s (1 ms) at least
    # Every outputs message was timed on its way back: at least one per token position.
    assert TEXT_OUTPUT_LEN <= len(m["egress_s"]) <= out.info.output_tokens
    assert len(m["ttft_p99_s"]) == 1
    assert out.info.ingress_over_floor > 0


TEXT_OUTPUT_LEN = 6


def test_rate_sweep_runs_every_rate_on_one_session() -> None:
    out = measure("msgspec-frombuffer", TEXT, settings(num_prompts=5, rates=(100.0, math.inf)))
    sweep = out.info.sweep
    assert [p.rate for p in sweep.points] == [100.0, "inf"]
    assert out.info.output_tokens == 5 * TEXT_OUTPUT_LEN  # the record's metrics: the first rate
    for point in sweep.points:
        assert len(point.metrics["ttft_s"].values) == 5
        assert point.goodput_per_s > 0
    assert sweep.points[0].offered_per_s > 0 and sweep.points[1].offered_per_s is None
    assert sweep.capacity_per_s == sweep.points[1].admitted_per_s


def _point(rate, offered, admitted) -> SweepPoint:
    return SweepPoint(rate, offered, admitted, goodput_per_s=1.0, ttft_slo_s=0.1, metrics={})


def test_saturation_is_the_lowest_rate_not_kept_up_with() -> None:
    points = [_point(10.0, 9.5, 9.4), _point(40.0, 41.0, 39.0), _point(160.0, 150.0, 60.0)]
    every = [*points, _point("inf", None, 70.0)]
    assert load.saturation(every) == Sweep(every, saturated_at=160.0, capacity_per_s=70.0, keep_up=0.9)
    assert load.saturation(points[:2]).saturated_at is None
    assert load.saturation(points[:2]).capacity_per_s is None


def test_tcp_transport_and_concurrency_limit() -> None:
    out = measure("pickle", TEXT, settings(transport="tcp", max_concurrency=1, rates=(50.0,)))
    assert out.info.output_tokens == 18
    ttft, e2e = out.metrics["ttft_s"].values, out.metrics["e2e_s"].values
    assert all(t <= e for t, e in zip(ttft, e2e, strict=True))


def test_payload_case_measures_throughput_against_a_unix_socket() -> None:
    cfg = settings(num_prompts=2, max_concurrency=1)
    out = measure("pickle-oob", "images-4:profile=llava", cfg)
    metrics, info = out.metrics, out.info
    assert len(metrics["payload_gb_per_s"].values) == 2
    assert len(metrics["unix_gb_per_s"].values) == 2
    assert info.payload_vs_unix > 0
    assert info.payload_bytes == get_workload("images-4:profile=llava").payload_bytes()


def _mapping_holding(address: int) -> dict[str, str]:
    """The ``/proc/self/smaps`` fields of the mapping that holds ``address``."""
    fields: dict[str, str] | None = None
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head, _, rest = line.partition(" ")
        if not head.endswith(":"):  # a mapping's first line: "start-end perms ..."
            low, high = (int(x, 16) for x in head.split("-"))
            fields = {} if low <= address < high else None
        elif fields is not None:
            fields[head[:-1]] = rest.strip()
            if head == "VmFlags:":
                return fields
    raise AssertionError(f"no mapping holds {address:#x}")


def test_the_unix_reference_receives_into_memory_not_advised_into_huge_pages() -> None:
    """As glibc maps a large block afresh (the engine's receive frames): no huge-page advice
    (``hg``), which a numpy array's body carries and fails this with. (Its resident size is not
    read: the kernel may merge a new mapping with a neighbour of the same flags.)"""
    smaps = Path("/proc/self/smaps")
    if not smaps.exists() or "VmFlags" not in smaps.read_text():
        pytest.skip("no /proc/self/smaps with VmFlags (not Linux): nothing to read")
    size = 64 << 20
    with transport.fresh_mapping(size) as memory:
        start = ctypes.c_char.from_buffer(memory)
        flags = _mapping_holding(ctypes.addressof(start) + size // 2)["VmFlags"].split()
        del start
    assert "hg" not in flags


def test_references_stream_at_most_their_limit_of_the_payload() -> None:
    frames = [np.arange(10, dtype=np.uint8), np.arange(10, 30, dtype=np.uint8)]
    kept = ipc.leading_bytes([memoryview(f) for f in frames], limit=15)
    assert [bytes(k) for k in kept] == [bytes(range(10)), bytes(range(10, 15))]
    assert [bytes(k) for k in ipc.leading_bytes([memoryview(f) for f in frames], limit=100)] == [
        f.tobytes() for f in frames
    ]
    assert ipc.leading_bytes([memoryview(f) for f in frames], limit=10)[-1].nbytes == 10


def test_checked_comes_once_per_finished_request() -> None:
    def checked(rid: str) -> Control:
        return Control("checked", "s", {"request_id": rid})

    tracked = {"a": Tracked(0.0, 1, times=[1.0]), "b": Tracked(0.0, 2, times=[1.0])}
    load.checked(checked("a"), tracked)
    assert tracked["a"].checked
    for rid in ("a", "b", "c"):  # checked twice, not finished, never sent
        with pytest.raises(IntegrityError, match="unexpected 'checked'"):
            load.checked(checked(rid), tracked)


def test_a_requests_payload_rate_is_its_own_bytes_over_its_transfer() -> None:
    """The turns of a conversation carry more images each: a request's GB/s is its own tensor
    bytes over its transfer, not the largest request's."""
    tracked = {
        "turn-1": Tracked(0.0, 1, times=[1.0], acked=0.5, payload_bytes=1_000_000_000),
        "turn-2": Tracked(0.0, 1, times=[1.0], acked=1.0, payload_bytes=4_000_000_000),
    }
    summary = load.load_metrics(tracked, [], 1.0, payload=True, same_clock=False)
    assert sorted(summary.metrics["payload_gb_per_s"].values) == pytest.approx([2.0, 4.0])
    assert "payload_gb_per_s" not in load.load_metrics(tracked, [], 1.0, False, False).metrics


def _writable_payload(frames: list) -> list[np.ndarray]:
    """The frames zmq sends without copying (pyzmq copies those below 64 KiB), as arrays."""
    views = [memoryview(f) for f in frames]
    return [np.frombuffer(v, np.uint8) for v in views if not v.readonly and v.nbytes >= 64 * 1024]


def reusing_sender(sock: zmq.Socket, frames: list) -> None:
    """Sends, then at once builds the next message in the same buffers.

    That is the buffer-reuse regression (docs/architecture.md). The original
    bytes are put back once zmq is done, so only the message in flight can
    be hurt.
    """
    arrays = _writable_payload(frames)
    trackers = transport.send(sock, frames, track=True)
    for arr in reversed(arrays):  # the last bytes to leave are overwritten first
        np.invert(arr, out=arr)
    for tracker in trackers:
        tracker.wait()
    for arr in arrays:
        np.invert(arr, out=arr)


def waiting_sender(sock: zmq.Socket, frames: list) -> None:
    """The fix: reuse a buffer only after the tracker of *every* frame says it was sent."""
    arrays = _writable_payload(frames)
    for tracker in transport.send(sock, frames, track=True):
        tracker.wait()
    for arr in arrays:
        np.invert(arr, out=arr)
        np.invert(arr, out=arr)


def test_sender_reusing_its_buffer_too_early_fails_the_case() -> None:
    with pytest.raises(EngineError, match="bytes changed in flight"):
        measure("msgspec-frombuffer", IMAGES, settings(num_prompts=2, max_concurrency=1), reusing_sender)


def test_sender_waiting_for_every_frame_passes() -> None:
    out = measure("msgspec-frombuffer", IMAGES, settings(num_prompts=2, max_concurrency=1), waiting_sender)
    assert out.info.output_tokens == 2 * get_workload(IMAGES).output_len


def test_lost_request_fails_the_case(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(load, "STALL_TIMEOUT_S", 0.5)
    sent = []

    def dropping_sender(sock: zmq.Socket, frames: list) -> None:
        sent.append(1)
        if len(sent) != 2:
            transport.send(sock, frames)

    with pytest.raises(IntegrityError, match=r"1 request.* unfinished .*messages lost"):
        measure("msgspec-frombuffer", TEXT, settings(), dropping_sender)


def test_duplicated_request_fails_the_case() -> None:
    def doubling_sender(sock: zmq.Socket, frames: list) -> None:
        transport.send(sock, frames)
        transport.send(sock, frames)

    with pytest.raises(EngineError, match="arrived twice"):
        measure("flat-mmk", TEXT, settings(), doubling_sender)


def _outputs(*items: tuple[str, int, str | None]) -> EngineCoreOutputs:
    return EngineCoreOutputs(outputs=[EngineCoreOutput(rid, [tok], reason) for rid, tok, reason in items])


def test_account_checks_value_position_and_end() -> None:
    tracked = {"a": Tracked(0.0, 2)}
    assert account(_outputs(("a", output_token("a", 0), None)), tracked, 1.0) == 0
    with pytest.raises(IntegrityError, match="token 1"):
        account(_outputs(("a", output_token("a", 0), "length")), dict(tracked), 2.0)
    with pytest.raises(IntegrityError, match="finish_reason"):
        account(_outputs(("a", output_token("a", 1), None)), {"a": Tracked(0.0, 2, times=[1.0])}, 2.0)
    assert account(_outputs(("a", output_token("a", 1), "length")), tracked, 2.0) == 1
    with pytest.raises(IntegrityError, match="after the end"):
        account(_outputs(("a", output_token("a", 2), None)), tracked, 3.0)
    with pytest.raises(IntegrityError, match="never sent"):
        account(_outputs(("b", output_token("b", 0), None)), tracked, 3.0)


def test_settings_follow_profile_then_options() -> None:
    text, images = get_workload("text-sonnet"), get_workload("images-8")
    assert ipc.settings_for(PROFILES["full"], text).num_prompts == 1000
    assert ipc.settings_for(PROFILES["full"], text).rates == (40.0,)
    assert ipc.settings_for(PROFILES["quick"], images).max_concurrency == 1
    profile = PROFILES["quick"].with_options(ipc_rates=(2.0,), ipc_step_ms=0.0, ipc_num_prompts=None)
    cfg = ipc.settings_for(profile, text)
    default_prompts = ipc.DEFAULTS[("quick", "text")]["num_prompts"]
    assert (cfg.rates, cfg.step_s, cfg.num_prompts) == ((2.0,), 0.0, default_prompts)
    # A rate given lifts the payload default of one request at a time; --max-concurrency still caps.
    assert ipc.settings_for(profile, images).max_concurrency is None
    capped = profile.with_options(ipc_max_concurrency=2)
    assert ipc.settings_for(capped, images).max_concurrency == 2


def test_quick_profile_measures_every_case_at_least_five_times() -> None:
    for workload in ("text-sonnet", "images-4", "images-32"):
        assert ipc.settings_for(PROFILES["quick"], get_workload(workload)).num_prompts >= MIN_DISTRIBUTION


def test_a_budget_adds_requests_while_one_more_fits_and_never_past_the_maximum() -> None:
    cfg = settings(budget_s=1.0, max_prompts=8)
    assert cfg.more(sent=5, elapsed_s=0.5)  # 0.1 s each: a sixth ends at 0.6 s
    assert not cfg.more(sent=5, elapsed_s=0.9)  # 0.18 s each: a sixth would end at 1.08 s
    assert not cfg.more(sent=8, elapsed_s=0.1)  # the maximum
    assert not settings().more(sent=5, elapsed_s=0.0)  # no budget: exactly num_prompts
    quick = PROFILES["quick"]
    images = get_workload("images-4")
    assert ipc.settings_for(quick, images).budget_s is not None
    # A count or a sweep asked for is what is sent.
    assert ipc.settings_for(quick.with_options(ipc_num_prompts=7), images).budget_s is None
    assert ipc.settings_for(quick.with_options(ipc_rates=(2.0,)), images).budget_s is None


def test_a_payload_sent_alone_shares_one_cpu_with_its_engine_unless_asked_otherwise() -> None:
    quick = PROFILES["quick"]
    images, text = get_workload("images-32"), get_workload("text-sonnet")
    assert ipc.settings_for(quick, images).one_cpu
    assert not ipc.settings_for(quick, text).one_cpu  # a rate's concurrent requests keep both CPUs
    assert not ipc.settings_for(quick.with_options(ipc_engine_cpu="free"), images).one_cpu
    assert not ipc.settings_for(quick, images, "shm").one_cpu  # shm copies on several threads
    assert not ipc.settings_for(quick.with_options(ipc_rates=(40.0,)), images).one_cpu
    assert not ipc.settings_for(quick.with_options(ipc_engine="tcp://127.0.0.1:5555"), images).one_cpu


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no CPU affinity on this platform")
def test_one_cpu_holds_this_thread_and_what_it_forks_then_gives_every_cpu_back() -> None:
    before = os.sched_getaffinity(0)
    reader, writer = multiprocessing.get_context("fork").Pipe(duplex=False)
    with ipc.one_cpu(True):
        pinned = os.sched_getaffinity(0)
        child = multiprocessing.get_context("fork").Process(target=_send_affinity, args=(writer,))
        child.start()
        inherited = reader.recv()
        child.join()
    assert len(pinned) == 1 and pinned <= before
    assert inherited == pinned
    assert os.sched_getaffinity(0) == before
    with ipc.one_cpu(False):
        assert os.sched_getaffinity(0) == before


def _send_affinity(writer) -> None:
    writer.send(os.sched_getaffinity(0))


def _on_init(monkeypatch: pytest.MonkeyPatch, cls: type, note: Callable[[psutil.Process], None]) -> None:
    """``note(this process)`` each time ``cls`` is made, just before it is."""
    plain = cls.__init__

    def init(self, *args) -> None:
        note(psutil.Process())
        plain(self, *args)

    monkeypatch.setattr(cls, "__init__", init)


def test_a_payload_load_on_one_cpu_runs_its_engine_there_and_its_settings_say_so(monkeypatch) -> None:
    placed: list[set[int]] = []  # when the memcpy target is made: inside the placement, after the forks
    _on_init(
        monkeypatch,
        transport.Memcpy,
        lambda me: placed.extend([set(me.cpu_affinity()), *(set(c.cpu_affinity()) for c in me.children())]),
    )
    cfg = settings(num_prompts=2, max_concurrency=1, one_cpu=True)
    out = measure("msgspec-frombuffer", IMAGES, cfg)
    assert len(out.metrics["ingress_s"].values) == 2
    assert out.info.settings["one_cpu"] is True
    assert len(placed) == 3 and len(placed[0]) == 1  # the frontend, its engine and the unix reader
    assert all(cpus == placed[0] for cpus in placed)


def test_the_references_fork_before_zeromq_threads_and_fault_their_target_after_the_engine(
    monkeypatch,
) -> None:
    # A fork after the memcpy target is faulted in makes its pages copy-on-write again: the first
    # copy then measures page faults, not a copy. And a fork is safest before ZeroMQ's threads.
    seen: dict[str, tuple[int, int]] = {}
    for name, cls in (("stream", transport.UnixStream), ("memcpy", transport.Memcpy)):
        _on_init(
            monkeypatch,
            cls,
            lambda me, name=name: seen.update({name: (len(me.children()), me.num_threads())}),
        )
    measure("msgspec-frombuffer", IMAGES, settings(num_prompts=2, max_concurrency=1))
    (children_then, threads_then), (children_now, threads_now) = seen["stream"], seen["memcpy"]
    assert children_now == children_then + 2  # the unix-socket reader and the engine
    assert threads_then < threads_now  # the reader was forked before ZeroMQ's I/O threads started


def test_a_budgeted_payload_load_sends_more_requests_and_a_reference_for_each() -> None:
    cfg = settings(num_prompts=2, max_concurrency=1, budget_s=60.0, max_prompts=4)
    out = measure("msgspec-frombuffer", IMAGES, cfg)
    assert len(out.metrics["ingress_s"].values) == 4
    assert len(out.metrics["unix_gb_per_s"].values) == 4


def test_rate_option_takes_a_sweep() -> None:
    from serbench.cli import build_parser

    args = build_parser().parse_args(["run", "--rate", "10,40,160,inf"])
    assert args.ipc_rates == (10.0, 40.0, 160.0, math.inf)


def test_arrivals_are_seeded_with_the_requested_mean_rate() -> None:
    offsets = load.arrival_offsets(2000, 40.0, 1.0, seed=0)
    assert offsets == load.arrival_offsets(2000, 40.0, 1.0, seed=0)
    assert offsets[0] == 0.0 and offsets == sorted(offsets)
    assert offsets[-1] / 1999 == pytest.approx(1 / 40, rel=0.1)
    assert load.arrival_offsets(3, math.inf, 1.0, seed=0) == [0.0, 0.0, 0.0]


@pytest.mark.parametrize(
    "argv",
    [
        ["--rate", "0"],
        ["--rate", "nan"],
        ["--rate", "10,10"],
        ["--rate", "10,-1"],
        ["--ttft-slo-ms", "0"],
        ["--burstiness", "inf"],
        ["--num-prompts", "0"],
        ["--engine", "ipc://x"],
    ],
)
def test_bad_ipc_options_are_usage_errors(argv: list[str]) -> None:
    from serbench.cli import build_parser

    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(["run", *argv])
    assert exit_info.value.code == 2


def _record(ttft: list[float], workload: str = "images-4") -> Record:
    from serbench.model import metrics as m

    measured = {"ttft_s": m.measured("ttft_s", ttft)}
    if len(ttft) >= MIN_DISTRIBUTION:
        measured["ttft_p99_s"] = m.measured("ttft_p99_s", [max(ttft)])
    return record(Case("ipc", "b", workload, transport="ipc"), metrics=measured)


def test_fewer_than_five_samples_say_n_in_the_terminal_and_the_report() -> None:
    from serbench.analysis.summary import summarize_run
    from serbench.present.html.page import metric_cell
    from serbench.present.terminal import render

    few, enough = _record([0.1, 0.2, 0.3]), _record([0.1, 0.2, 0.3, 0.4, 0.5], "text-sonnet")
    text = render(summarize_run(Results(records=[few, enough])), verbose=True)
    median, p99, *_ = text.split("\n\n")  # the decision block follows
    assert median.splitlines()[3].split() == ["b", "200", "(n=3)", "300"]  # images-4 with its n, then text
    assert p99.startswith("ipc: TTFT p99 (ms, per case)")
    assert p99.splitlines()[3].split() == ["b", "(n=3)", "500"]  # no p99 of three samples
    assert "(n=" not in render(summarize_run(Results(records=[enough])), verbose=True)
    cell = metric_cell(few.metrics["ttft_s"], "ttft_s", "p99", "")
    assert ">n=3<" in cell and "too few for a p99" in cell
    median = metric_cell(few.metrics["ttft_s"], "ttft_s", "median", "")
    assert "(n=3)" in median and "95% CI" not in median
    assert "95% CI" in metric_cell(enough.metrics["ttft_s"], "ttft_s", "median", "")
