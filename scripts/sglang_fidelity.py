"""What the harness adds to SGLang's own codec, and SGLang's in-band tensors beside vLLM's frames
(docs/sglang.md, "Fidelity"; docs/guides/sglang-pickle-or-msgspec.md).

Table 1, per workload of ``layout=sglang-native``: the ``sglang`` backend's encode and decode as
micro runs them (``scenarios.micro.operations``) against a bare loop of SGLang's own
``io_struct.msgpack_encode`` / ``msgpack_decode`` on the same message and frame, interleaved in one
process (``serbench.probes.timing``), beside ``sglang-pickle``'s on the same message. The issue's
bound: the harness adds at most 10 %.

Table 2, per image workload: each of ``--transports`` (backend specs) on the same images in its
own library's layout (``sglang*``: ``layout=sglang-native``; ``vllm``: ``layout=vllm-native``),
micro's encode and decode interleaved in one process, with its frames and bytes. A transport not
installed here (e.g. ``sglang:features=shm`` before it exists) is a row saying so.

    .venv/bin/python scripts/sglang_fidelity.py [--workloads text-sonnet,outputs-1024:logprobs=5]
        [--images images-4,images-32] [--transports sglang,sglang-pickle,vllm] [--profile quick|full]

Prints Markdown tables (for a dated page of docs/measurements/).
"""

from __future__ import annotations

import argparse
import statistics

from serbench.cli.options import split_specs
from serbench.model.profiles import PROFILES
from serbench.model.specs import SpecError, parse_spec
from serbench.plugins.sglang import adapter
from serbench.probes import heap, timing
from serbench.scenarios.micro import operations, wire_bytes
from serbench.serializers import conformance, get_serializer
from serbench.workloads import get_workload

LAYOUTS = {"sglang": "sglang-native", "vllm": "vllm-native"}  # a backend's library: its own types


def in_layout(workload: str, layout: str) -> str:
    """``workload`` (a spec, options or not) with ``layout=`` added."""
    return f"{workload}{',' if ':' in workload else ':'}layout={layout}"


def medians(fns: dict, profile_name: str) -> dict[str, float]:
    """Median seconds per call of each of ``fns``, sampled in turn, as micro samples them."""
    heap.reused_memory()  # as micro measures: a long-running process reusing its heap
    samples, _ = timing.interleaved(fns, PROFILES[profile_name])
    return {name: statistics.median(values) for name, values in samples.items()}


def harness_and_bare(workload: str, profile_name: str) -> dict[str, float]:
    """Medians (seconds) of the bare and harness calls on one message, and its frame's bytes."""
    sglang = adapter.load()
    message = get_workload(in_layout(workload, LAYOUTS["sglang"])).message(0)
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
    return {"bytes": len(frame)} | medians(fns, profile_name)


def transports(images: str, specs: list[str], profile_name: str) -> dict[str, dict[str, float] | str]:
    """Per backend spec: its encode and decode medians (seconds), frames and bytes on ``images`` in
    its library's layout, all interleaved in one process; or why it could not run here."""
    fns, shapes, rows = {}, {}, {}
    for spec in specs:
        library = parse_spec(spec).name.partition("-")[0]
        try:
            backend = get_serializer(spec)
            message = get_workload(in_layout(images, LAYOUTS[library])).request(0)
        except (SpecError, KeyError) as exc:
            rows[spec] = f"not run: {exc}"
            continue
        conformance.verify(backend, [message])
        frames = backend.encode(message)
        shapes[spec] = {"frames": len(frames), "bytes": wire_bytes(frames)}
        ops = operations(backend, message)
        fns[(spec, "encode")], fns[(spec, "decode")] = ops["encode_s"], ops["decode_s"]
    timed = medians(fns, profile_name) if fns else {}
    for spec, shape in shapes.items():
        rows[spec] = shape | {"encode": timed[(spec, "encode")], "decode": timed[(spec, "decode")]}
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", default="text-sonnet,images-4,images-32,outputs-1024:logprobs=5")
    parser.add_argument("--images", default="images-4,images-32")
    parser.add_argument("--transports", default="sglang,sglang-pickle,vllm")
    parser.add_argument("--profile", default="quick", choices=sorted(PROFILES))
    args = parser.parse_args()
    print(f"SGLang {adapter.load().version}\n")
    print(
        "| layout=sglang-native | frame bytes | bare encode (µs) | micro encode / bare | bare decode (µs) "
        "| micro decode / bare | pickle encode (µs) | pickle decode (µs) |"
    )
    print("|---|--:|--:|--:|--:|--:|--:|--:|")
    for workload in split_specs(args.workloads):
        r = harness_and_bare(workload, args.profile)
        print(
            f"| {workload} | {r['bytes']:,} | {r['bare_encode'] * 1e6:.1f} "
            f"| {r['harness_encode'] / r['bare_encode']:.3f} | {r['bare_decode'] * 1e6:.1f} "
            f"| {r['harness_decode'] / r['bare_decode']:.3f} | {r['pickle_encode'] * 1e6:.1f} "
            f"| {r['pickle_decode'] * 1e6:.1f} |"
        )
    print("\n| images | backend (its own layout) | frames | bytes | encode (µs) | decode (µs) |")
    print("|---|---|--:|--:|--:|--:|")
    for images in split_specs(args.images):
        for spec, r in transports(images, split_specs(args.transports), args.profile).items():
            if isinstance(r, str):
                print(f"| {images} | {spec} | {r} | | | |")
                continue
            print(
                f"| {images} | {spec} | {r['frames']} | {r['bytes']:,} | {r['encode'] * 1e6:.1f} "
                f"| {r['decode'] * 1e6:.1f} |"
            )


if __name__ == "__main__":
    main()
