"""The results file: one versioned JSON document per run, always valid on disk.

Layout (``SCHEMA`` = ``serbench-results/1``)::

    {"schema": ..., "complete": bool, "started": iso, "finished": iso|null,
     "profile": "quick"|"full", "environment": {...}, "backends": {spec: {...}},
     "records": [{"scenario", "backend", "workload", "metrics": {name: metric},
                  "info": {...}, "error": str|null, "duration_s": float}]}

A metric is ``{"unit", "values", "median", "ci_low", "ci_high"}``
(see ``stats.summarize``). The file is rewritten atomically (temp file +
rename) after every case, so an interrupted run leaves a valid file with
``complete: false`` and the cases finished so far.
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Iterable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from serbench.errors import ResultsError
from serbench.specs import Spec, SpecError, format_spec, parse_spec
from serbench.stats import summarize

SCHEMA = "serbench-results/1"
METRIC_KEYS = ("unit", "values", "median", "ci_low", "ci_high")
CaseKey = tuple[str, str, str]  # scenario, backend, workload: a measured case
TRANSPORT_MARK = "@"  # a record's backend "spec@transport": the case ran over a non-default transport


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


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


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` next to ``path``, fsync, and rename it into place: never half-written.

    The temporary file is created as ``open`` would create it (0666 less the
    umask, so 0644 usually), not 0600 as ``tempfile`` makes it: results and
    reports are for reading by others.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_json_atomic(path: Path, data: Any) -> None:
    """``data`` as JSON, written with ``write_text_atomic``."""
    write_text_atomic(path, json.dumps(data, indent=1, allow_nan=False))


def record(
    scenario: str,
    backend: str,
    workload: str,
    metrics: dict | None = None,
    info: dict | None = None,
    error: str | None = None,
    duration_s: float = 0.0,
) -> dict:
    """One case's entry in ``records``."""
    return {
        "scenario": scenario,
        "backend": backend,
        "workload": workload,
        "metrics": metrics or {},
        "info": info or {},
        "error": error,
        "duration_s": duration_s,
    }


def with_transport(spec: str, transport: str | None = None) -> str:
    """A record's ``backend``: the spec, then ``@transport`` unless the transport is the default (None).

    The transport is part of the case's identity this way, so every table,
    comparison and export keyed by backend shows ``spec@shm`` as a row of its
    own, while results written before transports were a dimension (plain
    specs) still match the default transport's rows.
    """
    return f"{spec}{TRANSPORT_MARK}{transport}" if transport else spec


def split_backend(label: str) -> tuple[str, str | None]:
    """(spec, transport or None) of a record's ``backend``; inverse of ``with_transport``."""
    spec, mark, transport = label.rpartition(TRANSPORT_MARK)
    return (spec, transport) if mark and spec and transport.isidentifier() else (label, None)


def case_key(rec: dict) -> CaseKey:
    return rec["scenario"], rec["backend"], rec["workload"]


class ResultsFile:
    """A run's results, saved after every change."""

    def __init__(self, path: Path, environment: dict, profile: str, backends: dict) -> None:
        self.path = path
        self.data = {
            "schema": SCHEMA,
            "complete": False,
            "started": now(),
            "finished": None,
            "profile": profile,
            "environment": environment,
            "backends": backends,
            "records": [],
        }
        self.save()

    def add(self, rec: dict) -> None:
        self.data["records"].append(rec)
        self.save()

    def finish(self) -> None:
        self.data["complete"] = True
        self.data["finished"] = now()
        self.save()

    def save(self) -> None:
        write_json_atomic(self.path, self.data)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_metric(metric: Any) -> bool:
    """``{"unit", "values", "median", "ci_low", "ci_high"}`` with numbers where numbers belong."""
    return (
        isinstance(metric, dict)
        and set(METRIC_KEYS) <= set(metric)
        and isinstance(metric["values"], list)
        and all(map(_is_number, metric["values"]))
        and all(_is_number(metric[key]) for key in ("median", "ci_low", "ci_high"))
    )


def _validate(data: Any) -> None:
    if not isinstance(data, dict) or "schema" not in data:
        raise ResultsError("not a serbench results file (no 'schema')")
    if data["schema"] != SCHEMA:
        raise ResultsError(f"schema {data['schema']!r:.80}, this serbench reads {SCHEMA!r}")
    for key, kind in (("environment", dict), ("records", list), ("backends", dict), ("complete", bool)):
        if not isinstance(data.get(key), kind):
            raise ResultsError(f"{key!r} missing or not a {kind.__name__}")
    for i, rec in enumerate(data["records"]):
        if (
            not isinstance(rec, dict)
            or not {"scenario", "backend", "workload", "metrics"} <= set(rec)
            or not isinstance(rec["metrics"], dict)
        ):
            raise ResultsError(f"record {i} is malformed")
        for name, metric in rec["metrics"].items():
            if not _is_metric(metric):
                raise ResultsError(f"record {i} metric {name!r:.80} is malformed")


def load(path: str | Path) -> dict:
    """Read and check a results file; ResultsError says in one line what is wrong."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise ResultsError(f"{path}: {exc.strerror or exc}") from None
    except (ValueError, RecursionError) as exc:  # bad JSON or UTF-8, over-long ints, deep nesting
        raise ResultsError(f"{path}: not valid JSON ({type(exc).__name__}: {exc})") from None
    try:
        _validate(data)
    except ResultsError as exc:
        raise ResultsError(f"{path}: {exc}") from None
    return data


def backend_label(data: dict, backend: str) -> str:
    """How tables and legends name a record's backend: its spec (and ``@transport``), except
    that a factory named by dotted path (``mypkg.myser:factory``) shows as the backend's own
    ``name`` (options kept)."""
    spec, transport = split_backend(backend)
    name = (data["backends"].get(spec) or {}).get("name")
    try:
        parsed = parse_spec(spec)
    except SpecError:
        return backend
    if not name or not parsed.is_dotted_path:
        return backend
    return with_transport(format_spec(Spec(str(name), parsed.options)), transport)


def safety_mark(data: dict, backend: str) -> str:
    """`` (unsafe)`` for a backend declared unsafe, `` (safety undeclared)`` for one that made no
    claim (treated as unsafe all the same), nothing for a safe one; whatever its transport."""
    safe = (data["backends"].get(split_backend(backend)[0]) or {}).get("safe", True)
    return "" if safe else " (unsafe)" if safe is False else " (safety undeclared)"


def unsupported(rec: dict) -> bool:
    """Whether a case was never timed because its backend declares the workload unsupported
    (recorded with an ``error`` all the same, so nothing downstream mistakes it for a measurement)."""
    return "unsupported" in (rec.get("info") or {})


def ok_records(data: dict, scenario: str | None = None) -> Iterable[dict]:
    """Records without an error, optionally of one scenario."""
    return (r for r in data["records"] if not r.get("error") and scenario in (None, r["scenario"]))


# ---------------------------------------------------------------- merging runs


def _merge_metric(metrics: list[dict]) -> dict:
    """One metric from several rounds: samples concatenated, each round's count kept."""
    values = [v for m in metrics for v in m["values"]]
    return {**summarize(values, metrics[0]["unit"]), "rounds": [len(m["values"]) for m in metrics]}


def _merge_case(recs: list[dict]) -> dict:
    """One record from the same case in several rounds; failed if any round failed."""
    failed = [r["error"] for r in recs if r.get("error")]
    error = f"failed in {len(failed)} of {len(recs)} rounds: {failed[0]}" if failed else None
    names = [n for n in recs[0]["metrics"] if all(n in r["metrics"] for r in recs)]
    metrics = {} if error else {n: _merge_metric([r["metrics"][n] for r in recs]) for n in names}
    info = {**recs[0].get("info", {}), "rounds": len(recs)}
    duration = round(sum(r.get("duration_s", 0.0) for r in recs), 3)
    return record(*case_key(recs[0]), metrics, info, error, duration)


def merge(docs: Sequence[dict]) -> dict:
    """One results document from several runs of the same matrix (see ``_merge_case``).

    A case missing from some rounds (an interrupted run) is merged from the
    rounds that have it.
    """
    by_case: dict[CaseKey, list[dict]] = {}
    for doc in docs:
        for rec in doc["records"]:
            by_case.setdefault(case_key(rec), []).append(rec)
    first = docs[0]
    return {
        **first,
        "complete": all(d["complete"] for d in docs),
        "finished": docs[-1]["finished"],
        "records": [_merge_case(recs) for recs in by_case.values()],
    }
