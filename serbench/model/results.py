"""The results model: typed cases, measurements and records, and the file that holds a run.

Everything a run produces is one of these ``msgspec.Struct``s, from the
scenario that measures a case to the report that draws it: ``Case`` (what was
measured), ``stats.Measurement`` (one metric's samples and summary),
``Record`` (a case, its metrics and its scenario's typed ``Info``) and
``Results`` (the run: environment, backends, records). No module outside
this one reads a record by string key; msgspec validates a file as it
decodes it.

The file is ``Results`` as JSON, schema ``serbench-results/2``, rewritten
atomically (temp file + rename) after every case, so an interrupted run leaves
a valid file with ``complete: false`` and the cases finished so far. A
schema-1 file (serbench before the typed model: the transport folded into the
backend as ``spec@transport``, free-form ``info``) is converted on load
(``_from_schema_1``), so report, compare and a gate against an older base
read both. The versioning policy is in docs/architecture.md, "Results".
"""

from __future__ import annotations

import math
import os
import secrets
import statistics
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from serbench.model.errors import ResultsError
from serbench.model.specs import Spec, SpecError, format_spec, parse_spec
from serbench.model.stats import Measurement, summarize

SCHEMA = "serbench-results/2"
SCHEMA_1 = "serbench-results/1"
# The link between processes that a case runs over unless ``--transport`` says otherwise;
# tables show it unmarked.
DEFAULT_TRANSPORT = "ipc"


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


# ---------------------------------------------------------------- what was measured


@dataclass(frozen=True)
class Check:
    """One setting: what it is, whether it suits benchmarking (None: unknown), and why."""

    name: str
    value: str
    ok: bool | None
    advice: str = ""


class Case(msgspec.Struct, frozen=True, order=True, omit_defaults=True):
    """One measured case: a scenario run on one backend and one workload, and the
    dimensions beyond those that the scenario varies.

    ``transport``: the link between the case's processes (``ipc``, ``tcp``,
    ``shm``); None for a scenario that links none (micro). ``workers``: how
    many worker processes the engine fans out to (None: none). A new dimension
    is one more optional field here: results, compare, the gate and every
    table key and label cases by the whole struct (``dimensions``).
    """

    scenario: str
    backend: str  # the backend spec
    workload: str  # the workload spec
    transport: str | None = None
    workers: int | None = None
    cache: str | None = None  # the multimodal cache (``lru``, ``shm``); None: none (docs/cache.md)

    def dimensions(self) -> dict[str, Any]:
        """The dimensions beyond scenario, backend and workload that this case sets."""
        extra = Case.__struct_fields__[3:]
        return {k: getattr(self, k) for k in extra if getattr(self, k) is not None}

    @property
    def row(self) -> str:
        """The backend as a table row shows it: its spec, ``@transport`` unless the default,
        then ``key=value`` for every other dimension set."""
        text = self.backend
        for key, value in self.dimensions().items():
            if key == "transport":
                text += "" if value == DEFAULT_TRANSPORT else f"@{value}"
            else:
                text += f" {key}={value}"
        return text

    @property
    def label(self) -> str:
        return f"{self.scenario} {self.row} × {self.workload}"

    @property
    def link(self) -> str:
        """The transport to run over: the case's own, else the default one."""
        return self.transport or DEFAULT_TRANSPORT

    def cell(self) -> tuple[str, str]:
        """Where the case sits in a scenario's table: (row, column)."""
        return self.row, self.workload


# ---------------------------------------------------------------- what a scenario adds


class Verification(msgspec.Struct, omit_defaults=True):
    """The round trip of a case's messages before they were timed (``conformance.verify``)."""

    messages: int
    of: int
    seconds: float
    earlier: int  # already round-tripped by an earlier case of the run
    keys: list[list[Any]] | None = None  # the messages verified now; the runner takes them out


class Info(msgspec.Struct, tag_field="kind", omit_defaults=True, kw_only=True):
    """What a scenario says about a case beside its metrics; each scenario has its kind."""

    payload_bytes: int | None = None
    verification: Verification | None = None


class MicroInfo(Info, tag="micro"):
    loops: dict[str, int] | None = None  # per operation, calls per timed sample (wall time)
    samples: int | None = None
    calls_per_window: dict[str, int] | None = None  # counted instructions: calls per window
    instructions: str | None = None  # why instructions were not counted, when asked


class ServingStat(msgspec.Struct):
    """A latency as the serving benchmark prints it, in milliseconds."""

    mean_ms: float
    median_ms: float
    p99_ms: float

    @classmethod
    def of(cls, values: Sequence[float]) -> ServingStat:
        """Mean, median and p99 of latencies in seconds."""
        p99 = float(np.percentile(values, 99))
        return cls(statistics.fmean(values) * 1e3, statistics.median(values) * 1e3, p99 * 1e3)


class Serving(msgspec.Struct):
    ttft: ServingStat
    itl: ServingStat
    e2e: ServingStat

    @classmethod
    def of(cls, ttft: Sequence[float], itl: Sequence[float], e2e: Sequence[float]) -> Serving:
        """The serving benchmark's summary of a load's latencies, in seconds."""
        return cls(ServingStat.of(ttft), ServingStat.of(itl), ServingStat.of(e2e))


class SweepPoint(msgspec.Struct):
    """One offered rate of a sweep (``scenarios.load.sweep_point``)."""

    rate: float | str  # "inf": everything at once (JSON has no infinity)
    offered_per_s: float | None
    admitted_per_s: float | None
    goodput_per_s: float
    ttft_slo_s: float
    metrics: dict[str, Measurement]


class Sweep(msgspec.Struct):
    points: list[SweepPoint]
    saturated_at: float | None
    capacity_per_s: float | None
    keep_up: float


class IpcInfo(Info, tag="ipc"):
    serving: Serving
    duration_s: float
    output_tokens: int
    settings: dict[str, Any]
    local_engine: bool
    ttft_over_floor: float
    ingress_over_floor: float | None = None
    sweep: Sweep | None = None
    shm_region_bytes: int | None = None
    payload_vs_unix: float | None = None
    payload_vs_memcpy: float | None = None
    cache: dict[str, Any] | None = None  # a cached case: mode, capacity, defined hit ratio (docs/cache.md)


# ``IpcInfo``'s ratios of two metrics' medians: the request's times over the transport's floor,
# the payload rate over its two references.
IPC_RATIOS = {
    "ttft_over_floor": ("ttft_s", "floor_rtt_s"),
    "ingress_over_floor": ("ingress_s", "floor_rtt_s"),
    "payload_vs_unix": ("payload_gb_per_s", "unix_gb_per_s"),
    "payload_vs_memcpy": ("payload_gb_per_s", "memcpy_gb_per_s"),
}


def ipc_ratios(measured: Mapping[str, Measurement]) -> dict[str, float]:
    """``IPC_RATIOS`` of ``measured``, each where it has both metrics: one function for a
    visit's info and for the record merged from every visit, so that the ratios describe the
    same samples as the metrics beside them."""
    return {
        name: measured[top].median / measured[bottom].median
        for name, (top, bottom) in IPC_RATIOS.items()
        if top in measured and bottom in measured
    }


class IpcCountedInfo(Info, tag="ipc-counted"):
    """An ipc case counted (``--measure instructions``): both sides' instructions per request in
    one counting process (``serbench.scenarios.ipc.counted``), over the case's transport."""

    transport: str
    calls_per_window: dict[str, int] | None = None


class FanoutCountedInfo(Info, tag="fanout-counted"):
    """A fan-out case counted (``--measure instructions``): the core's and a worker's
    instructions per step in one counting process (``serbench.scenarios.fanout.counted``)."""

    transport: str
    workers: int
    calls_per_window: dict[str, int] | None = None


class StreamInfo(Info, tag="stream"):
    """The ipc scenario's way back (an output workload: the engine streams its steps)."""

    batch: int
    steps: int
    full_steps: int
    step_s: float
    local_engine: bool
    fits_step: bool
    decode_share_of_step: float | None = None
    egress_growth: float | None = None


class Phase(msgspec.Struct):
    t_s: float  # on the timeline's clock
    peak_bytes: int  # the side's peak above baseline by then


class MemoryInfo(Info, tag="memory"):
    repetitions: int
    staging: str | None
    baseline_bytes: dict[str, list[int]]  # per side, per repetition
    uss_above_baseline_bytes: dict[str, list[int | None]]
    phases: dict[str, Phase]
    timeline: dict[str, list[float | None]]  # "t_s", and per side RSS above baseline
    cache: dict[str, Any] | None = None  # a cached case: mode, capacity, hits (docs/cache.md)


class FanoutInfo(Info, tag="fanout"):
    """The fanout scenario (engine core → N workers, docs/fanout.md)."""

    cpu_count: int
    oversubscribed: bool  # workers + core > CPUs: the report marks the case
    warning: str | None
    rounds: int
    decode_steps: int
    batch: int
    block_size: int
    ring_bytes: int | None  # shm-ring: slots + arena, mapped by every process
    worker_peak_bytes: list[int]  # per worker, RSS high-water mark above its baseline
    worker_pss_bytes: list[int]  # per worker, above baseline while holding a prefill step
    worker_uss_bytes: list[int]
    core_pss_bytes: int
    encoder_copied_bytes: int  # of core_copied_bytes, what the encoder built (not viewed)
    worker_hosts: list[str] | None = None  # remote workers (serbench fanout-worker): each one's host
    cpus: list[int] | None = None  # the CPU each process was pinned to, the core's first (None: unpinned)
    cache: dict[str, Any] | None = None  # a cached case: mode, capacity, lookups, hits (docs/cache.md)


ScenarioInfo = MicroInfo | IpcInfo | IpcCountedInfo | StreamInfo | MemoryInfo | FanoutInfo | FanoutCountedInfo


class Record(Case, frozen=True, omit_defaults=False):
    """One case's entry: its metrics, what its scenario says of it, and how it ended.

    ``error`` is set for a case that failed (and for one never timed:
    ``unsupported`` then says why the backend declines its workload); ``rounds``
    is how many runs were merged into it (the gate's), None for one.
    """

    metrics: dict[str, Measurement] = {}
    info: ScenarioInfo | None = None
    error: str | None = None
    unsupported: str | None = None
    duration_s: float = 0.0
    rounds: int | None = None

    @property
    def case(self) -> Case:
        return Case(*(getattr(self, name) for name in Case.__struct_fields__))

    @property
    def ok(self) -> bool:
        return self.error is None


def record(case: Case, **fields: Any) -> Record:
    """``case``'s record with ``fields`` (metrics, info, error, …)."""
    return Record(*(getattr(case, name) for name in Case.__struct_fields__), **fields)


# ---------------------------------------------------------------- the run


class Conformance(msgspec.Struct, omit_defaults=True):
    passed: int = 0
    unsupported: dict[str, str] = {}
    failed: dict[str, str] = {}
    error: str | None = None  # the check itself could not run


class Backend(msgspec.Struct):
    """A backend's declared traits and its conformance results."""

    name: str | None = None
    description: str | None = None
    safe: bool | None = None  # None: undeclared (treated as unsafe)
    conformance: Conformance = msgspec.field(default_factory=Conformance)


class Device(msgspec.Struct):
    name: str
    memory_bytes: int
    capability: str
    pci_bus_id: str | None = None
    host_link: dict[str, str] | None = None  # PCIe generation and width, max and current


class Accelerator(msgspec.Struct, omit_defaults=True):
    """torch's CUDA build and the devices it sees; ``error`` when the probe failed."""

    torch_cuda: str | None = None
    cuda_available: bool = False
    devices: list[Device] = []
    error: str | None = None


class Environment(msgspec.Struct):
    """What produced a run (``environment.collect``)."""

    python: str | None = None
    implementation: str | None = None
    platform: str | None = None
    machine: str | None = None
    cpu: str | None = None
    cpu_count: int | None = None
    memory_bytes: int | None = None
    accelerator: Accelerator | None = None
    libraries: dict[str, str | None] = {}
    git_commit: str | None = None
    command: list[str] = []
    allocator_env: dict[str, str] = {}
    system: list[Check] | None = None

    def comparable(self) -> dict[str, Any]:
        """What two runs must share for their numbers to compare (``COMPARABLE``)."""
        return {key: getattr(self, key) for key in COMPARABLE}


COMPARABLE = ("machine", "cpu", "cpu_count", "python")


class Results(msgspec.Struct, kw_only=True):
    """One run: what produced it, its backends, and a record per case (``records`` a file must
    have; the rest have defaults for documents built in code)."""

    schema: str = SCHEMA
    complete: bool = False
    started: str = msgspec.field(default_factory=now)
    finished: str | None = None
    profile: str = "quick"
    environment: Environment = msgspec.field(default_factory=Environment)
    backends: dict[str, Backend] = {}
    records: list[Record]

    def of(self, scenario: str | None = None) -> Iterator[Record]:
        """Records without an error, optionally of one scenario."""
        return (r for r in self.records if r.ok and scenario in (None, r.scenario))

    def scenarios(self) -> list[str]:
        return list(dict.fromkeys(r.scenario for r in self.records))

    def by_case(self) -> dict[Case, Record]:
        return {r.case: r for r in self.records}

    def backend(self, case: Case) -> Backend:
        return self.backends.get(case.backend) or Backend()

    def row_label(self, case: Case) -> str:
        """How tables and legends name a case's backend: ``Case.row``, except that a factory
        named by dotted path (``mypkg.myser:factory``) shows as the backend's own ``name``
        (options kept)."""
        name = self.backend(case).name
        try:
            parsed = parse_spec(case.backend)
        except SpecError:
            return case.row
        if not name or not parsed.is_dotted_path:
            return case.row
        return msgspec.structs.replace(case, backend=format_spec(Spec(name, parsed.options))).row

    def safety_mark(self, case: Case) -> str:
        """`` (unsafe)`` for a backend declared unsafe, `` (safety undeclared)`` for one that
        made no claim (treated as unsafe all the same), nothing for a safe one."""
        backend = self.backends.get(case.backend)
        safe = True if backend is None else backend.safe
        return "" if safe else " (unsafe)" if safe is False else " (safety undeclared)"


# ---------------------------------------------------------------- files


def output_folder(out: str | None, prefix: str = "", must_be_empty: bool = False) -> Path:
    """``out``, or ``reports/<prefix><UTC time>``, created and checked writable.

    A folder that cannot be used is a ResultsError (one line, exit 2), raised
    before anything is measured; so is a given ``out`` that already holds
    files when ``must_be_empty`` (``serbench run`` without ``--force``): a
    second run would silently replace the first one's results.
    """
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    folder = Path(out) if out else Path("reports") / f"{prefix}{stamp}"
    if must_be_empty and folder.is_dir() and any(folder.iterdir()):
        held = ", ".join(sorted(p.name for p in folder.iterdir())[:3])
        raise ResultsError(f"output folder {folder} is not empty ({held}...); --force writes into it anyway")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ResultsError(f"cannot create output folder {folder}: {exc.strerror or exc}") from None
    if not os.access(folder, os.W_OK):
        raise ResultsError(f"output folder {folder} is not writable")
    return folder


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` next to ``path``, fsync, and rename it into place: never half-written.

    The temporary file is created as ``open`` would create it (0666 less the
    umask, so 0644 usually), not 0600 as ``tempfile`` makes it: results and
    reports are for reading by others.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_text_atomic(path: Path, text: str) -> None:
    """``text`` as UTF-8, written with ``write_bytes_atomic``."""
    write_bytes_atomic(path, text.encode())


def encode(data: Any) -> bytes:
    """Any model struct as indented JSON; ValueError for a NaN or an infinity (``check_finite``)."""
    check_finite(data)
    return _indented(data)


def _indented(data: Any) -> bytes:
    return msgspec.json.format(msgspec.json.encode(data), indent=1)


def check_finite(data: Any) -> None:
    """ValueError for a NaN or an infinity anywhere in ``data`` (any model struct), which msgspec
    would write as null and a reader would then refuse."""
    _check_finite(msgspec.to_builtins(data))


def _check_finite(value: Any) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError("a results file holds finite numbers only (NaN or infinity found)")
    children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
    for item in children:
        _check_finite(item)


def save(path: Path, data: Results) -> None:
    """``data`` as the results file at ``path``, written atomically."""
    write_bytes_atomic(path, encode(data))


class ResultsFile:
    """A run's results, saved after every change. Each part is checked finite once, as it comes:
    checking the whole file at every save cost the square of the run's length."""

    def __init__(
        self, path: Path, environment: Environment, profile: str, backends: dict[str, Backend]
    ) -> None:
        self.path = path
        self.results = Results(profile=profile, environment=environment, backends=backends, records=[])
        check_finite(self.results)
        self._save()

    def set_backends(self, backends: dict[str, Backend]) -> None:
        check_finite(backends)
        self.results.backends = backends
        self._save()

    def add(self, rec: Record) -> int:
        """``rec`` appended; its index, for ``replace``."""
        check_finite(rec)
        self.results.records.append(rec)
        self._save()
        return len(self.results.records) - 1

    def replace(self, index: int, rec: Record) -> None:
        """The record at ``index`` replaced by ``rec`` (a case's visits merged again)."""
        check_finite(rec)
        self.results.records[index] = rec
        self._save()

    def finish(self) -> None:
        self.results.complete = True
        self.results.finished = now()
        self._save()

    def _save(self) -> None:
        write_bytes_atomic(self.path, _indented(self.results))


def decode(raw: bytes | str, source: str = "results") -> Results:
    """A results document from JSON, schema 1 converted; ResultsError says in one line what
    is wrong."""
    try:
        data = msgspec.json.decode(raw)
    except (msgspec.DecodeError, RecursionError) as exc:
        raise ResultsError(f"{source}: not valid JSON ({exc})") from None
    if not isinstance(data, dict) or "schema" not in data:
        raise ResultsError(f"{source}: not a serbench results file (no 'schema')")
    if data["schema"] == SCHEMA_1:
        data = _from_schema_1(data, source)
    elif data["schema"] != SCHEMA:
        raise ResultsError(f"{source}: schema {data['schema']!r:.80}, this serbench reads {SCHEMA!r}")
    try:
        return msgspec.convert(data, Results)
    except msgspec.ValidationError as exc:
        raise ResultsError(f"{source}: {exc}"[:300]) from None


def load(path: str | Path) -> Results:
    """Read and check a results file (schema 2, or 1 converted)."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ResultsError(f"{path}: {exc.strerror or exc}") from None
    return decode(raw, str(path))


# Schema 1 knew these scenarios to link two processes: their unmarked backends ran over ipc://.
_TWO_PROCESS_SCENARIOS_OF_SCHEMA_1 = ("ipc", "memory")
_INFO_OF_SCHEMA_1 = {"micro": MicroInfo, "ipc": IpcInfo, "memory": MemoryInfo}


def _from_schema_1(data: dict, source: str) -> dict:
    """A schema-1 document in schema 2's shape: ``spec@transport`` split into its fields,
    ``info`` typed by its scenario (what this model does not know of it dropped), the
    unsupported reason and the merged round count taken out of it."""
    records = data.get("records")
    if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
        raise ResultsError(f"{source}: 'records' missing or malformed")
    return {**data, "schema": SCHEMA, "records": [_record_from_schema_1(r) for r in records]}


def _record_from_schema_1(rec: dict) -> dict:
    backend, mark, transport = str(rec.get("backend", "")).rpartition("@")
    if not (mark and backend and transport.isidentifier()):
        backend, transport = rec.get("backend"), None
    scenario = rec.get("scenario")
    if transport is None and scenario in _TWO_PROCESS_SCENARIOS_OF_SCHEMA_1:
        transport = DEFAULT_TRANSPORT
    info = dict(rec.get("info") or {})
    out = {
        **{k: v for k, v in rec.items() if k != "info"},
        "backend": backend,
        "transport": transport,
        "unsupported": info.pop("unsupported", None),
        "rounds": info.pop("rounds", None),
    }
    info_type = StreamInfo if "step_s" in info else _INFO_OF_SCHEMA_1.get(scenario)
    if info and info_type is not None and not out.get("error"):
        kind = info_type.__struct_config__.tag
        out["info"] = {"kind": kind, **{k: v for k, v in info.items() if k in info_type.__struct_fields__}}
    return out


# ---------------------------------------------------------------- merging runs


def _merge_measurements(measurements: list[Measurement]) -> Measurement:
    """One metric from several rounds: samples concatenated, each round's count kept, taken in
    turn where every round's were."""
    values = [v for m in measurements for v in m.values]
    merged = summarize(values, measurements[0].unit, [m.n for m in measurements])
    return msgspec.structs.replace(merged, in_turn=all(m.in_turn for m in measurements))


def _merge_case(recs: list[Record]) -> Record:
    """One record from the same case in several rounds; failed if any round failed."""
    failed = [r.error for r in recs if r.error]
    error = f"failed in {len(failed)} of {len(recs)} rounds: {failed[0]}" if failed else None
    names = [n for n in recs[0].metrics if all(n in r.metrics for r in recs)]
    merged = {} if error else {n: _merge_measurements([r.metrics[n] for r in recs]) for n in names}
    duration = round(sum(r.duration_s for r in recs), 3)
    return msgspec.structs.replace(
        recs[0],
        metrics=merged,
        info=_merged_info([r.info for r in recs], merged),
        error=error,
        duration_s=duration,
        rounds=len(recs),
    )


def _merged_info(infos: list[Info | None], merged: dict[str, Measurement]) -> Info | None:
    """The first round's info; an ipc one with its serving summary and its ratios
    (``ipc_ratios``) recomputed over every round's samples (so that they describe the same
    samples as the merged metrics), and the load's duration and output tokens summed over the
    rounds (the benchmark's, as ``Serving`` counts every round's requests)."""
    info = infos[0]
    if isinstance(info, IpcInfo) and all(n in merged for n in ("ttft_s", "itl_s", "e2e_s")):
        rounds = [i for i in infos if isinstance(i, IpcInfo)]
        return msgspec.structs.replace(
            info,
            serving=Serving.of(merged["ttft_s"].values, merged["itl_s"].values, merged["e2e_s"].values),
            duration_s=sum(i.duration_s for i in rounds),
            output_tokens=sum(i.output_tokens for i in rounds),
            **ipc_ratios(merged),
        )
    return info


def merge(docs: Sequence[Results]) -> Results:
    """One results document from several runs of the same matrix (see ``_merge_case``).

    A case missing from some rounds (an interrupted run) is merged from the
    rounds that have it.
    """
    by_case: dict[Case, list[Record]] = {}
    for doc in docs:
        for rec in doc.records:
            by_case.setdefault(rec.case, []).append(rec)
    return msgspec.structs.replace(
        docs[0],
        complete=all(d.complete for d in docs),
        finished=docs[-1].finished,
        records=[_merge_case(recs) for recs in by_case.values()],
    )
