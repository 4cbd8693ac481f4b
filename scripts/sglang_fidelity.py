"""What the harness adds to SGLang's own codec (docs/sglang.md, "Fidelity").

For each workload of ``layout=sglang-native``: the ``sglang`` backend's encode and decode as micro
runs them (``scenarios.micro.operations``) against a bare loop of SGLang's own
``io_struct.msgpack_encode`` / ``msgpack_decode`` on the same message and frame, interleaved in one
process (``serbench.probes.timing``), beside ``sglang-pickle``'s (SGLang's default path) on the
same message. The issue's bound: the harness adds at most 10 %.

    .venv/bin/python scripts/sglang_fidelity.py [--workloads text-sonnet,images-4] [--profile quick|full]

Prints a Markdown table (for a dated page of docs/measurements/).
"""

from __future__ import annotations

import argparse
import statistics

from serbench.model.profiles import PROFILES
from serbench.plugins.sglang import adapter
from serbench.probes import heap, timing
from serbench.scenarios.micro import operations
from serbench.serializers import conformance, get_serializer
from serbench.workloads import get_workload


def measure(workload: str, profile_name: str) -> dict[str, float]:
    """Medians (seconds) of the bare and harness calls on one message, and its frame's bytes."""
    sglang = adapter.load()
    message = get_workload(f"{workload}:layout=sglang-native").request(0)
    backend, pickled = get_serializer("sglang"), get_serializer("sglang-pickle")
    conformance.verify(backend, [message])  # nothing timed that was not verified
    conformance.verify(pickled, [message])
    (frame,) = backend.encode(message)
    harness, pickle_ops = operations(backend, message), operations(pickled, message)
    fns = {
        "bare_encode": lambda: sglang.msgpack_encode(message),
        "bare_decode": lambda: sglang.msgpack_decode(frame),
        "harness_encode": harness["encode_s"],
        "harness_decode": harness["decode_s"],
        "pickle_encode": pickle_ops["encode_s"],
        "pickle_decode": pickle_ops["decode_s"],
    }
    heap.reused_memory()  # as micro measures: a long-running process reusing its heap
    samples, _ = timing.interleaved(fns, PROFILES[profile_name])
    return {"bytes": len(frame)} | {name: statistics.median(values) for name, values in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", default="text-sonnet,images-4,images-32")
    parser.add_argument("--profile", default="quick", choices=sorted(PROFILES))
    args = parser.parse_args()
    print(f"SGLang {adapter.load().version}\n")
    print(
        "| layout=sglang-native | frame bytes | bare encode (µs) | micro encode / bare | bare decode (µs) "
        "| micro decode / bare | pickle encode (µs) | pickle decode (µs) |"
    )
    print("|---|--:|--:|--:|--:|--:|--:|--:|")
    for workload in args.workloads.split(","):
        r = measure(workload, args.profile)
        print(
            f"| {workload} | {r['bytes']:,} | {r['bare_encode'] * 1e6:.1f} "
            f"| {r['harness_encode'] / r['bare_encode']:.3f} | {r['bare_decode'] * 1e6:.1f} "
            f"| {r['harness_decode'] / r['bare_decode']:.3f} | {r['pickle_encode'] * 1e6:.1f} "
            f"| {r['pickle_decode'] * 1e6:.1f} |"
        )


if __name__ == "__main__":
    main()
