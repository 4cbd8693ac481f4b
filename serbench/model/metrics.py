"""Every fact about a metric, in one table: unit, direction, how it is compared, how it reads.

A scenario measures a metric by name (``measured("decode_s", samples)``);
everything downstream — the terminal summary, compare and the gate, the
report's tables and axes, the export formats — asks this module what the
name means instead of keeping its own list. Adding a metric is one ``Metric``
here plus the scenario that measures it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from serbench.model.stats import MIN_DISTRIBUTION, Measurement, summarize

# Two rows are told apart only when the whole interval of their ratio lies beyond this
# (``compare.Estimate.tied``): a difference the run both measured beyond its noise and found
# large enough to choose by. asv's compare likewise calls a change significant only beyond a
# factor (1.1 by default) as well as beyond noise.
PRACTICAL_TIE = 0.05

# micro's encode + decode, its backends timed in turn in one process, reproduces its ratios
# closely between runs: this margin ties two backends that run the same code, and no more
# (docs/measurements/2026-12-06-tie-edge.md).
MICRO_TIE = 0.02

# micro's encode + decode of a payload also ties under this fraction of one plain copy of it
# (``copy_s``): every transport moves the payload at least once, so less changes no request's
# latency, and the zero-copy backends' gaps were that small (docs/measurements/2026-12-07-micro-copy-tie.md).
COPY_TIE = 0.01

# What two rows of one run are compared by (``Metric.center``).
MEDIAN, TRIMMED_MEAN, LOWER_QUARTILE = "median", "trimmed mean", "lower quartile"


@dataclass(frozen=True)
class Metric:
    """What a metric is.

    * ``higher_is_better`` — rates rise when the code gets faster; everything
      else (times, bytes, copies) is better lower.
    * ``resolution`` — for a machine-independent metric (bytes on the wire,
      frames, copies of the payload): compared exactly, and a difference
      counts only beyond this; None for a sampled metric, which is compared
      statistically.
    * ``slack`` — for an exact metric, a relative difference that also reads no change
      (``BYTES_SLACK``: message sizes that carry an address).
    * ``tolerance`` — for a deterministic count (instructions under callgrind):
      compared as one number, not statistically, and a relative change up to
      this is no change. The default threshold of that metric (``--metric-threshold``
      overrides it; ``--max-regression``, sized for wall-clock noise, does not).
    * ``yardstick`` — a measurement of the machine beside the code (one plain
      copy, the empty-message round trip, a raw unix socket): shown, never
      compared, since a change in it is noise by definition.
    * ``summary`` — one of the terminal summary's tables.
    * ``log_axis`` — plotted on a log axis (values span orders of magnitude
      across workloads).
    * ``statistic_of`` — a statistic of another metric's samples, one value
      per run (``ttft_p99_s`` of ``ttft_s``): how many samples it stands on
      is that metric's count.
    * ``derived`` — computed from other metrics of the case (encode + decode):
      compare counts its regression only if they did not regress.
    * ``headline`` — the scenario's ranking metric (speed-up against a baseline).
    * ``counted_as`` — the counts (instructions) of the CPU work this wall-clock metric
      times: where they were counted, they decide that work and this metric only what
      they cannot see (compare's "counts decide").
    * ``practical_tie`` — two rows of one run tie in a decision or a ranking unless the whole
      interval of their ratio in this metric lies beyond this of 1: a difference that two
      runs back to back did not reproduce (``PRACTICAL_TIE`` unless measured apart).
    * ``tie_yardstick`` — a yardstick metric of the same rows (micro's ``copy_s``): where
      the best row measured it, a difference under ``COPY_TIE`` of it also ties.
    * ``center`` — what two rows of one run are compared by (``compare.center_of``): the
      median of their samples; for a per-request latency through real processes, whose samples
      fall in two modes of the machine between which a median jumps, their trimmed mean
      (``compare.TRIM``); for an in-process timing, each sample already a mean over many calls
      and its noise slow spells alone (nothing runs code faster than it costs), their lower
      quartile.
    """

    name: str
    unit: str
    label: str
    higher_is_better: bool = False
    resolution: float | None = None
    slack: float = 0.0
    tolerance: float | None = None
    yardstick: bool = False
    summary: bool = False
    log_axis: bool = True
    statistic_of: str | None = None
    derived: bool = False
    headline: bool = False
    counted_as: tuple[str, ...] = ()
    practical_tie: float = PRACTICAL_TIE
    tie_yardstick: str | None = None
    center: str = MEDIAN

    @property
    def exact(self) -> bool:
        return self.resolution is not None

    @property
    def counted(self) -> bool:
        """A deterministic count compared with a relative ``tolerance`` (near-exact)."""
        return self.tolerance is not None


# In-band pickle writes each tensor's address as decimal digits into the message, so its size
# moves by a byte or two from process to process; this hides that and no serializer's change,
# and is under a byte for small messages (docs/measurements/2026-12-03-ipc-counts.md).
BYTES_SLACK = 1e-5

METRICS: dict[str, Metric] = {
    m.name: m
    for m in (
        # micro
        Metric(
            "encode_s",
            "s",
            "encode time",
            summary=True,
            counted_as=("encode_instructions",),
            center=LOWER_QUARTILE,
        ),
        Metric(
            "decode_s",
            "s",
            "decode time",
            summary=True,
            counted_as=("decode_instructions",),
            center=LOWER_QUARTILE,
        ),
        Metric(
            "roundtrip_s",
            "s",
            "encode + decode",
            summary=True,
            derived=True,
            headline=True,
            counted_as=("encode_instructions", "decode_instructions"),
            practical_tie=MICRO_TIE,
            tie_yardstick="copy_s",
            center=LOWER_QUARTILE,
        ),
        Metric(
            "decode_cpu_s", "s", "decode CPU time (thread)", summary=True, counted_as=("decode_instructions",)
        ),
        Metric("copy_s", "s", "one plain copy of the payload", yardstick=True),
        Metric("wire_bytes", "bytes", "wire bytes", resolution=0.0, slack=BYTES_SLACK),
        Metric("frames", "count", "frames", resolution=0.0, log_axis=False),
        # arrays of the message sent as their own frame / inside the header (the backend's threshold)
        Metric("oob_frames", "count", "out-of-band frames", resolution=0.0, log_axis=False),
        Metric("inline_arrays", "count", "arrays inline in the header", resolution=0.0, log_axis=False),
        Metric("payload_gb_per_s", "GB/s", "payload throughput", higher_is_better=True),
        # micro --measure instructions: per call, under callgrind (docs/instructions.md). The
        # process's history (pymalloc's pools) moves a count a little in A/A gates; above the
        # tolerance the change is the code's (docs/measurements/2026-12-02-instructions.md)
        Metric("encode_instructions", "count", "encode instructions", tolerance=0.01, summary=True),
        Metric("decode_instructions", "count", "decode instructions", tolerance=0.01, summary=True),
        # ipc --measure instructions: per request, each side's path in the counting process
        # (serbench.scenarios.ipc.counted): the socket library, the kernel and waiting are not counted
        Metric(
            "send_instructions",
            "count",
            "frontend instructions (encode → send)",
            tolerance=0.01,
            summary=True,
        ),
        Metric(
            "receive_instructions",
            "count",
            "engine instructions (received → decoded)",
            tolerance=0.01,
            summary=True,
        ),
        # fanout --measure instructions: per step, the core's publish and worker 0's receive in the
        # counting process (serbench.scenarios.fanout.counted): ZeroMQ, the kernel and waiting are not
        Metric(
            "core_instructions",
            "count",
            "core instructions (encode → published)",
            tolerance=0.01,
            summary=True,
        ),
        Metric(
            "worker_instructions",
            "count",
            "worker instructions (received → decoded)",
            tolerance=0.01,
            summary=True,
        ),
        Metric(
            "core_decode_instructions",
            "count",
            "core instructions, decode step",
            tolerance=0.01,
            summary=True,
        ),
        Metric(
            "worker_decode_instructions",
            "count",
            "worker instructions, decode step",
            tolerance=0.01,
            summary=True,
        ),
        # ipc
        # Through real processes, TTFT ratios move more between runs than micro's: a tie is issue
        # 33's bound for ratios two runs must reproduce, and the gate's default --max-regression
        # (docs/measurements/2026-12-04-decision-stability.md)
        Metric("ttft_s", "s", "TTFT", summary=True, headline=True, practical_tie=0.10, center=TRIMMED_MEAN),
        Metric("ttft_p99_s", "s", "TTFT p99", summary=True, statistic_of="ttft_s"),
        # TTFT's parts, per request (``encode_s`` above is the frontend's encode of it)
        Metric("ingress_s", "s", "ingress (encode → engine decoded)", summary=True, center=TRIMMED_MEAN),
        Metric("queue_s", "s", "queue (decoded → first step)"),
        Metric("first_step_s", "s", "first step (step → token decoded)"),
        Metric("egress_s", "s", "egress per output (engine encode → decoded)", summary=True),
        # the output path (outputs-B): the frontend's share of each engine step
        Metric("step_decode_s", "s", "frontend decode CPU per step", summary=True),
        Metric("itl_s", "s", "ITL", summary=True),
        Metric("e2e_s", "s", "end-to-end latency"),
        Metric("req_per_s", "req/s", "requests", higher_is_better=True, log_axis=False),
        Metric("output_tokens_per_s", "tokens/s", "output tokens", higher_is_better=True, log_axis=False),
        Metric("floor_rtt_s", "s", "empty-message round trip (floor)", yardstick=True),
        Metric("unix_gb_per_s", "GB/s", "raw unix socket (reference)", higher_is_better=True, yardstick=True),
        Metric("memcpy_gb_per_s", "GB/s", "one memcpy (reference)", higher_is_better=True, yardstick=True),
        # the engine's stage after decode (--engine-device): decoded → on the device, synchronized
        Metric("to_device_s", "s", "device stage (decoded → on device)", summary=True),
        # memory (``copies`` is a ratio of page-granular RSS readings: a
        # hundredth of the payload is below its resolution)
        Metric(
            "peak_rss_engine_bytes",
            "bytes",
            "engine peak RSS above baseline",
            summary=True,
            log_axis=False,
        ),
        Metric(
            "peak_rss_frontend_bytes",
            "bytes",
            "frontend peak RSS above baseline",
            summary=True,
            log_axis=False,
        ),
        Metric(
            "copies",
            "ratio",
            "engine copies (extra peak / payload)",
            resolution=0.01,
            summary=True,
            log_axis=False,
            headline=True,  # payload-relative: comparable across workload sizes, unlike bytes
        ),
        Metric(
            "copies_frontend",
            "ratio",
            "frontend copies (extra peak / payload)",
            resolution=0.01,
            summary=True,
        ),
        Metric("encode_to_use_s", "s", "encode → engine used", summary=True),
        # memory, as the kernel shares it out (PSS: a page mapped by both sides counts half in each,
        # so shared memory counts once in the sum), read while both sides hold the request
        Metric("pss_engine_bytes", "bytes", "engine PSS above baseline, at use", log_axis=False),
        Metric("pss_frontend_bytes", "bytes", "frontend PSS above baseline, at use", log_axis=False),
        Metric(
            "copies_total",
            "ratio",
            "frontend + engine copies (extra PSS / payload)",
            resolution=0.01,
            summary=True,
            log_axis=False,
        ),
        Metric("pinned_bytes", "bytes", "engine pinned host memory", resolution=0.0, log_axis=False),
        # cache (--cache lru|shm, docs/cache.md): measured at the engine, per request where sampled;
        # a request is a hit when all its cached tensors were, partial when some, a miss when none
        Metric(
            "hit_ratio",
            "ratio",
            "cache hit ratio (measured)",
            higher_is_better=True,
            resolution=0.01,
            summary=True,
            log_axis=False,
        ),
        Metric(
            "request_bytes",
            "bytes",
            "bytes to the engine per request (message + store)",
            resolution=0.0,
            slack=BYTES_SLACK,
        ),
        Metric("ttft_hit_s", "s", "TTFT of a cache hit", summary=True),
        Metric("ttft_partial_s", "s", "TTFT of a partial cache hit", summary=True),
        Metric("ttft_miss_s", "s", "TTFT of a cache miss", summary=True),
        Metric("ingress_hit_s", "s", "ingress of a cache hit"),
        Metric("ingress_partial_s", "s", "ingress of a partial cache hit"),
        Metric("ingress_miss_s", "s", "ingress of a cache miss"),
        Metric("cache_frontend_bytes", "bytes", "frontend cache resident", resolution=0.0, log_axis=False),
        Metric("cache_engine_bytes", "bytes", "engine cache resident", resolution=0.0, log_axis=False),
        Metric("cache_evictions", "count", "cache evictions", resolution=0.0, log_axis=False),
        # fanout: the engine core → N workers hop (docs/fanout.md), per prefill step unless said
        Metric("fanout_s", "s", "core encode → last worker holds the step", summary=True, headline=True),
        Metric("fanout_p99_s", "s", "core encode → last worker p99", summary=True, statistic_of="fanout_s"),
        Metric("fanout_hit_s", "s", "core encode → last worker, a cached prefill step all hits"),
        Metric("fanout_partial_s", "s", "core encode → last worker, a cached prefill step partly hits"),
        Metric("fanout_miss_s", "s", "core encode → last worker, a cached prefill step no hits"),
        Metric("fanout_spread_s", "s", "first → last worker holding the step"),
        Metric("fanout_decode_s", "s", "core encode → last worker, decode step", summary=True),
        Metric("core_cpu_s", "s", "core CPU per step (all its threads)", summary=True),
        Metric(
            "core_copied_bytes",
            "bytes",
            "bytes the core copied per step",
            resolution=0.0,
            slack=BYTES_SLACK,
            summary=True,
        ),
        Metric("encode_calls", "count", "encodes per step", resolution=0.0, summary=True, log_axis=False),
        Metric(
            "decode_wire_bytes", "bytes", "wire bytes of a decode step", resolution=0.0, slack=BYTES_SLACK
        ),
        # PSS in bytes moves with page sharing from process to process: compared with a MiB's
        # resolution; the copies are the measure (docs/measurements/fanout.md)
        Metric(
            "worker_pss_bytes",
            "bytes",
            "worker PSS above baseline, holding the step",
            resolution=1 << 20,
            log_axis=False,
        ),
        # The whole group's (N + 1 processes holding a step, or a cache): its page sharing moves
        # by megabytes between two runs of one revision (docs/measurements/cache.md)
        Metric(
            "group_pss_bytes",
            "bytes",
            "core + workers PSS above baseline",
            resolution=4 << 20,
            log_axis=False,
        ),
        Metric("worker_rss_copies", "ratio", "worker peak RSS / payload", resolution=0.01, log_axis=False),
        # Worker PSS moves with page sharing as the bytes do: a resolution of 0.01 flagged a
        # fault-free gate (docs/measurements/2026-12-03-test-time-and-stability.md)
        Metric("worker_pss_copies", "ratio", "worker PSS / payload", resolution=0.02, log_axis=False),
        Metric("worker_uss_copies", "ratio", "worker USS / payload", resolution=0.01, summary=True),
        Metric("group_pss_copies", "ratio", "core + workers PSS / payload", resolution=0.05, log_axis=False),
    )
}


def metric(name: str) -> Metric:
    """The facts of ``name``; a name this serbench does not know (from another version's
    results file) is a sampled lower-is-better metric, a rate if it ends in ``_per_s``."""
    known = METRICS.get(name)
    if known is not None:
        return known
    return Metric(name, "", name, higher_is_better=name.endswith("_per_s"))


def measured(name: str, values: Sequence[float]) -> Measurement:
    """A registered metric's samples as the results file holds them (unit from the table).

    KeyError for a name not in ``METRICS``: a scenario cannot record a metric
    nothing downstream knows how to read.
    """
    return summarize(values, METRICS[name].unit)


def statistic(name: str, samples: Sequence[float]) -> Measurement | None:
    """``name``, a statistic of another metric (``statistic_of``), over that metric's ``samples``:
    their 99th percentile, what every such metric is (``ttft_p99_s``); None for fewer than
    ``MIN_DISTRIBUTION`` samples — a p99 of fewer is not one."""
    if len(samples) < MIN_DISTRIBUTION:
        return None
    return measured(name, [float(np.percentile(samples, 99))])


def compared(name: str) -> bool:
    """Whether compare and the gate judge this metric (yardsticks are shown only)."""
    return not metric(name).yardstick
