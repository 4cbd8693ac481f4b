"""How far serbench's model of vLLM's wire format is from vLLM's own (docs/vllm.md, "Fidelity").

For each image count: serbench's ``images-N:layout=vllm`` encoded by ``msgspec-frombuffer`` beside
``images-N:layout=vllm-native`` (the same content as the installed vLLM's own ``EngineCoreRequest``)
encoded by vLLM's ``MsgpackEncoder`` and decoded by ``MsgpackDecoder(EngineCoreRequest)``: frames,
header bytes, encode and decode time ratios, all interleaved in one process (``serbench.probes.timing``).
It also times the ``vllm`` backend's decode as micro runs it (``scenarios.micro.operations``)
against a bare loop of vLLM's decoder on the same frames: what the harness adds.

    .venv/bin/python scripts/vllm_fidelity.py [--counts 4,32] [--profile quick|full]

Prints a Markdown table (paste it into docs/measurements/vllm.md).
"""

from __future__ import annotations

import argparse
import statistics

from serbench.model.profiles import PROFILES
from serbench.plugins.vllm import adapter
from serbench.probes import heap, timing
from serbench.scenarios.micro import operations
from serbench.serializers import conformance, get_serializer
from serbench.workloads import get_workload


def header_bytes(frames: list) -> int:
    return memoryview(frames[0]).nbytes


def measure(count: int, profile_name: str) -> dict[str, float]:
    native = get_workload(f"images-{count}:layout=vllm-native")
    model = get_workload(f"images-{count}:layout=vllm")
    model.name = native.name  # the same request ids and hashes: only the layout differs
    ours, theirs = get_serializer("msgspec-frombuffer"), get_serializer("vllm")
    model_msg, native_msg = model.request(0), native.request(0)
    model_frames, native_frames = ours.encode(model_msg), theirs.encode(native_msg)
    conformance.verify(ours, [model_msg])  # nothing timed that was not verified
    conformance.verify(theirs, [native_msg])
    bare = adapter.decoder(type(native_msg))  # vLLM's decoder, called as vLLM calls it
    harness = operations(theirs, native_msg)["decode_s"]
    fns = {
        "model_encode": lambda: ours.encode(model_msg),
        "native_encode": lambda: theirs.encode(native_msg),
        "model_decode": lambda: ours.decode(model_frames, type(model_msg)),
        "native_decode": lambda: bare.decode(native_frames),
        "harness_decode": harness,
    }
    heap.reused_memory()  # as micro measures: a long-running process reusing its heap
    samples, _ = timing.interleaved(fns, PROFILES[profile_name])
    med = {name: statistics.median(values) for name, values in samples.items()}
    return {
        "frames_model": len(model_frames),
        "frames_native": len(native_frames),
        "header_model": header_bytes(model_frames),
        "header_native": header_bytes(native_frames),
        "encode_ratio": med["model_encode"] / med["native_encode"],
        "decode_ratio": med["model_decode"] / med["native_decode"],
        "native_decode_us": med["native_decode"] * 1e6,
        "harness_over_bare": med["harness_decode"] / med["native_decode"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--counts", default="4,32")
    parser.add_argument("--profile", default="quick", choices=sorted(PROFILES))
    args = parser.parse_args()
    print(f"vLLM {adapter.load().version}\n")
    print(
        "| | frames model / native | header bytes model / native | encode model / native "
        "| decode model / native | vLLM decode (µs) | micro decode / bare loop |"
    )
    print("|---|---|---|---|---|---|---|")
    for count in (int(c) for c in args.counts.split(",")):
        r = measure(count, args.profile)
        print(
            f"| images-{count} | {r['frames_model']} / {r['frames_native']} "
            f"| {r['header_model']:,} / {r['header_native']:,} | {r['encode_ratio']:.2f} "
            f"| {r['decode_ratio']:.2f} | {r['native_decode_us']:.0f} | {r['harness_over_bare']:.3f} |"
        )


if __name__ == "__main__":
    main()
