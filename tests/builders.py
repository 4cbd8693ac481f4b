"""Results records built in code, for the tests that read them (decision, ranking, report)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from suite_paths import FIXTURES

from serbench.analysis import verdicts
from serbench.model import results
from serbench.model.results import Case, Environment, MemoryInfo, Record, Results, record
from serbench.model.stats import Measurement, summarize


def memory_info(
    payload_bytes: int, repetitions: int = 1, timeline: dict[str, list[float | None]] | None = None
) -> MemoryInfo:
    """A memory case's info with only what a reader of its metrics looks at: the payload, the
    repetitions and, for the report's plot, an RSS timeline."""
    return MemoryInfo(
        payload_bytes=payload_bytes,
        repetitions=repetitions,
        staging=None,
        baseline_bytes={},
        uss_above_baseline_bytes={},
        phases={},
        timeline=timeline or {},
    )


BASE_S = 1e-5  # a 10 µs timing


# A run of serbench before the typed model (schema 1): pickle and msgspec-frombuffer ×
# text-sonnet, images-4, outputs-8 × micro, ipc, memory × the ipc and shm transports.
SCHEMA_1_FIXTURE = FIXTURES / "results-schema-1.json"


def samples(seed: int, factor: float = 1.0, n: int = 60, sigma: float = 0.02) -> list[float]:
    """Log-normal timings around ``BASE_S * factor``: skewed like real ones."""
    rng = np.random.default_rng(seed)
    return list(BASE_S * factor * rng.lognormal(0.0, sigma, n))


def metric(values: list[float], unit: str = "s", rounds: list[int] | None = None) -> Measurement:
    return summarize(values, unit, rounds)


def doc(records: list[Record], **environment: object) -> Results:
    """A results document with the given records and a fixed environment."""
    env = {"machine": "x86_64", "cpu": "AMD EPYC", "cpu_count": 2, "python": "3.11.7", "git_commit": "a" * 40}
    return Results(
        complete=True,
        started="2026-11-29T17:00:00+00:00",
        finished="2026-11-29T17:01:00+00:00",
        profile="quick",
        environment=Environment(**{**env, **environment}),
        backends={},
        records=records,
    )


def rec(
    metrics: dict[str, Measurement],
    backend: str = "b",
    workload: str = "w",
    error: str | None = None,
    scenario: str = "micro",
    transport: str | None = None,
) -> Record:
    return record(Case(scenario, backend, workload, transport), metrics=metrics, error=error)


def one(
    base_metrics: dict[str, Measurement], head_metrics: dict[str, Measurement], **kwargs: object
) -> dict[str, verdicts.MetricComparison]:
    """Compare one case; rows by metric name. Strict and side by side: these synthetic samples
    stand for measurements whose run-to-run spread is in them, their rounds (where they have
    any) for a gate's pairs (plain runs get ``unpaired_verdict``)."""
    kwargs.setdefault("strict", True)
    kwargs.setdefault("side_by_side", True)
    comparison = verdicts.compare(doc([rec(base_metrics)]), doc([rec(head_metrics)]), **kwargs)
    return {row.metric: row for row in comparison.rows}


def schema_1_and_2(tmp_path: Path) -> tuple[Path, Path]:
    """The schema-1 fixture and the same document re-saved as schema 2."""
    resaved = tmp_path / "results-schema-2.json"
    results.save(resaved, results.load(SCHEMA_1_FIXTURE))
    assert json.loads(resaved.read_text())["schema"] == results.SCHEMA
    return SCHEMA_1_FIXTURE, resaved
