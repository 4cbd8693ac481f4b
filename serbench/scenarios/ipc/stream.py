"""The ipc output path: an engine streams an output workload's steps to a frontend holding B requests.

For an output workload (``outputs-B``, ``Workload.kind == "outputs"``) the ipc scenario
measures the way back, where logprobs cost serving engines their throughput. The frontend sends
its B requests at once; the engine steps at the step interval and sends each step's outputs,
built by the workload, as one message. Per step the frontend records

* ``step_decode_s`` — its CPU time (``time.thread_time``) to decode the message: the
  frontend's share of the step budget;
* ``egress_s`` — engine clock just before it encoded the message → decoded at the frontend
  (a local engine only; one monotonic clock per host).

Only the steps that carry all B requests count. A frontend whose decode takes longer than the
step cannot keep up: its messages queue and egress grows from step to step; ``info.fits_step``
says whether the median decode fits, ``info.egress_growth`` how much later the last quarter's
egress is than the first's. ``fitting_batches`` reads a run's records for the largest measured
batch per backend whose decode fits the step. Every token is checked as in the load
(``load.account``) and every logprob row against its sampled token (``Workload.check``),
after the decode is timed.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from serbench.model import metrics
from serbench.model.errors import IntegrityError
from serbench.model.results import Record, StreamInfo
from serbench.model.specs import Spec, format_spec, parse_spec
from serbench.scenarios.base import Outcome
from serbench.scenarios.engine.client import STALL_TIMEOUT_S, open_link
from serbench.scenarios.engine.protocol import request_checksum
from serbench.scenarios.ipc.load import Tracked, account
from serbench.serializers import Serializer, get_serializer
from serbench.workloads import Workload, get_workload

clock = time.perf_counter


@dataclass(frozen=True)
class Step:
    """One outputs message as the frontend saw it."""

    requests: int
    decode_cpu_s: float
    egress_s: float


def stream(link: Any, serializer: Serializer, workload: Workload) -> list[Step]:
    """Send the workload's ``batch`` requests, then take and check every step until all finish."""
    tracked: dict[str, Tracked] = {}
    for request in workload.requests(workload.batch):
        link.send("request", serializer.encode(request), checksum=request_checksum(request, workload))
        about = workload.about(request)
        tracked[about.request_id] = Tracked(clock(), about.max_tokens)
    steps: list[Step] = []
    active, last_progress = len(tracked), clock()
    while active:
        got = link.recv(STALL_TIMEOUT_S)
        if got is None:
            if clock() - last_progress > STALL_TIMEOUT_S:
                raise IntegrityError(
                    f"no output for {STALL_TIMEOUT_S:g} s with {active} request(s) unfinished"
                )
            continue
        ctrl, frames = got
        if ctrl is None or ctrl.kind != "outputs":
            raise IntegrityError(
                f"unexpected {ctrl.kind if ctrl else 'empty'!r} message in the output stream"
            )
        cpu = time.thread_time()
        try:
            message = serializer.decode(frames, workload.message_type)
        except Exception as exc:
            raise IntegrityError(f"frontend could not decode a step: {type(exc).__name__}: {exc}") from exc
        cpu, decoded = time.thread_time() - cpu, clock()
        outputs = workload.in_model(message)
        steps.append(Step(sum(1 for _ in outputs.entries()), cpu, decoded - ctrl.data.get("sent", decoded)))
        active -= account(outputs, tracked, decoded)
        try:
            workload.check(message)
        except ValueError as exc:
            raise IntegrityError(f"step {len(steps)}: {exc}") from None
        last_progress = clock()
    return steps


def measure(backend: str, workload_spec: str, step_s: float, engine: str | None, kind: str) -> Outcome:
    """One ipc case of an output workload: per-step decode CPU time and egress of full-batch steps."""
    workload = get_workload(workload_spec)
    serializer = get_serializer(backend)
    with open_link(backend, step_s, engine, kind, workload=workload_spec) as (link, local):
        gc.freeze()  # as a serving frontend does after start-up (see micro)
        steps = stream(link, serializer, workload)
    full = [s for s in steps if s.requests == workload.batch]
    if not full:
        raise IntegrityError(f"no step carried all {workload.batch} requests ({len(steps)} steps)")
    decode = [s.decode_cpu_s for s in full]
    measured = {"step_decode_s": metrics.measured("step_decode_s", decode)}
    quarter = max(1, len(full) // 4)
    info = StreamInfo(
        batch=workload.batch,
        steps=len(steps),
        full_steps=len(full),
        step_s=step_s,
        local_engine=local,
        fits_step=statistics.median(decode) <= step_s,
        decode_share_of_step=statistics.median(decode) / step_s if step_s else None,
    )
    if local:
        egress = [s.egress_s for s in full]
        measured["egress_s"] = metrics.measured("egress_s", egress)
        first, last = statistics.median(egress[:quarter]), statistics.median(egress[-quarter:])
        info.egress_growth = last / first if first > 0 else None
    return Outcome(measured, info)


def family(workload_spec: str) -> tuple[str, int] | None:
    """(spec with the batch taken out, batch) of an ``outputs-B`` spec; None for other workloads.

    ``outputs-256:logprobs=5`` → ``("outputs-B:logprobs=5", 256)``: the runs of one
    family differ in batch only, so they make one line against batch.
    """
    parsed = parse_spec(workload_spec)
    name, _, batch = parsed.name.partition("-")
    if name != "outputs" or not batch.isdigit():
        return None
    return format_spec(Spec("outputs-B", parsed.options)), int(batch)


def fitting_batches(records: Iterable[Record]) -> dict[tuple[str, str], dict[str, int | None]]:
    """Per (backend as a table row shows it, ``Case.row``; workload family): the largest measured batch
    whose median decode per step fits the step (``fits``, None if none did) and the smallest that does
    not (``over``, None if all did)."""
    out: dict[tuple[str, str], dict[str, int | None]] = {}
    for rec in records:
        fam = family(rec.workload)
        decode = rec.metrics.get("step_decode_s")
        if not rec.ok or fam is None or decode is None or not isinstance(rec.info, StreamInfo):
            continue
        cell = out.setdefault((rec.row, fam[0]), {"fits": None, "over": None})
        if decode.median <= rec.info.step_s:
            cell["fits"] = max(cell["fits"] or 0, fam[1])
        else:
            cell["over"] = min(cell["over"] or fam[1], fam[1])
    return out
