"""Every safe backend against malformed frames: DecodeError or a valid object, nothing else
(docs/architecture.md, "Conformance").

The fixed corpus runs in a child whose address space is capped, so that a
decoder allocating what a header declares (rather than what the frames hold)
shows up as a failed allocation instead of hiding behind overcommit. The
generated inputs run in-process under hypothesis, each given to every safe
backend; ``SERBENCH_SOAK=N`` raises the inputs per generator from CI's bound
to N. ``scripts/fuzz_report.py`` prints the per-backend counts.
"""

from __future__ import annotations

import resource
import sys
import threading
from collections.abc import Iterator

import psutil
import pytest
import torch
from malformed import (
    SAFE_SPECS,
    STRATEGIES,
    Fuzzer,
    assert_backed,
    corpus,
    examples_per_strategy,
    judge,
)

from serbench.runtime.isolation import run_isolated
from serbench.serializers import DecodeError, Serializer, get_serializer
from serbench.serializers.msgspec_frombuffer import MsgspecFrombufferSerializer
from serbench.serializers.tensors import torch_dtypes

ALLOCATION_HEADROOM = 512 * 2**20  # the corpus backs no more than a few MB; a 1 GiB shape must not fit
CORPUS_TIMEOUT_S = 300
EXAMPLES = examples_per_strategy()


def _corpus_outcomes(serializer: Serializer, spec: str) -> dict[str, str]:
    """Runs in a child: each corpus entry's outcome, with the address space capped near its current size."""
    entries = corpus(spec)
    limit = psutil.Process().memory_info().vms + ALLOCATION_HEADROOM
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    outcomes = {}
    for entry, (frames, type_) in entries.items():
        try:
            outcomes[entry] = judge(serializer, frames, type_)
        except Exception as exc:  # reported, not raised: the parent names every offending entry
            outcomes[entry] = f"{type(exc).__name__}: {exc}"[:200]
    return outcomes


def corpus_outcomes(serializer: Serializer, spec: str) -> dict[str, str]:
    return run_isolated(_corpus_outcomes, (serializer, spec), CORPUS_TIMEOUT_S)


@pytest.mark.parametrize("spec", SAFE_SPECS)
def test_every_corpus_entry_is_refused_with_decode_error(spec: str) -> None:
    outcomes = corpus_outcomes(get_serializer(spec), spec)
    assert len(outcomes) > 60
    assert {entry: o for entry, o in outcomes.items() if o != "DecodeError"} == {}


@pytest.mark.timeout(120 + EXAMPLES * 0.2)  # a hang fails here; no wall-clock figure is asserted
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_generated_inputs_end_in_decode_error_or_a_valid_object(strategy: str) -> None:
    fuzzer = Fuzzer(SAFE_SPECS, EXAMPLES)
    getattr(fuzzer, strategy)()
    counts = fuzzer.tally.counts
    tried = {fuzzer.tally.tried(spec) for spec in SAFE_SPECS}
    assert len(tried) == 1, f"every backend gets every input: {counts}"
    assert tried.pop() >= 0.9 * EXAMPLES
    for spec in SAFE_SPECS:  # both sides reached: the parser's refusals and the array checks
        assert counts[spec]["DecodeError"] > 0 and counts[spec]["decoded"] > 0, (spec, counts[spec])


# -- the oracle bites ---------------------------------------------------------


def _trusting_tensor(dtype: str, shape: list[int], buf: bytes) -> torch.Tensor:
    """Allocates what the header declares, then fills it: the hole the corpus must expose."""
    out = torch.empty(shape, dtype=torch_dtypes()[dtype])
    out.view(-1).view(torch.uint8).copy_(torch.frombuffer(buf, dtype=torch.uint8))
    return out


class TrustingSerializer(MsgspecFrombufferSerializer):
    tensor_from_buffer = staticmethod(_trusting_tensor)


def test_a_decoder_that_allocates_the_declared_size_is_caught() -> None:
    outcomes = corpus_outcomes(TrustingSerializer(), "msgspec-frombuffer")
    assert "a declared size drove an allocation" in outcomes["absurd-size-1GiB-inline"]


def test_a_tensor_reaching_past_its_frame_is_caught() -> None:
    memory = bytearray(64)
    frames = [memoryview(memory)[:16]]
    with pytest.raises(AssertionError, match="straddles"):
        assert_backed(torch.frombuffer(memory, dtype=torch.uint8)[8:40], frames)
    with pytest.raises(AssertionError, match="backed by no frame"):
        assert_backed(torch.zeros(64, dtype=torch.uint8), frames)


def test_an_exception_other_than_decode_error_escapes_the_oracle() -> None:
    class Raising(MsgspecFrombufferSerializer):
        def decode(self, frames: list, type_: type) -> None:
            raise IndexError("frame 3")

    with pytest.raises(IndexError):
        judge(Raising(), [b""], object)
    assert judge(get_serializer("msgspec-frombuffer"), [b""], object) == "DecodeError"
    assert issubclass(DecodeError, ValueError)


# -- one instance, many threads -----------------------------------------------


@pytest.fixture
def frequent_thread_switches() -> Iterator[None]:
    """Switch threads every microsecond so that interleaved decodes actually interleave."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(interval)


@pytest.mark.usefixtures("frequent_thread_switches")
@pytest.mark.parametrize("spec", SAFE_SPECS)
def test_threads_sharing_an_instance_never_mix_frames(spec: str) -> None:
    """Each thread encodes and decodes its own message; none may see the other's frames."""
    serializer = get_serializer(spec)
    problems: list[str] = []

    def work(value: int) -> None:
        message = [torch.full((300,), value, dtype=torch.uint8) for _ in range(20)]
        for _ in range(100):
            try:
                frames = serializer.encode(message)
                decoded = serializer.decode(frames, list)
                for tensor in decoded:
                    assert_backed(tensor, frames)
                    assert bool((tensor == value).all()), "another thread's bytes"
            except Exception as exc:  # a thread must report, not die silently
                problems.append(f"{type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=work, args=(value,)) for value in (1, 2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert problems == []
