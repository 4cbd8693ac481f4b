"""Results records built in code, for the tests that read them (decision, ranking, report)."""

from __future__ import annotations

from serbench.model.results import MemoryInfo


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
