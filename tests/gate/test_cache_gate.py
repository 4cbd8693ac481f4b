"""vLLM #52040 as a gate test: a commit that re-encodes a cached tensor on every hit, though only
its reference is sent, makes ``serbench gate`` exit 1 and name the case; the same gate over a
commit without the fault passes (docs/cache.md)."""

from __future__ import annotations

import sys

import pytest
from gating import assert_the_gate_judges_the_fault
from suite_paths import BACKENDS

from serbench.links import cache

sys.path.insert(0, str(BACKENDS))
from cache_faults import REENCODE_ON_HIT, inject

# The memory scenario's frontend copies are machine-independent (exact, to 0.01 of the payload).
# Half of the request measured is hits: the fault adds half a payload of frontend copies, while every
# metric stays well above the few hundred kB of RSS noise that a request of hits only would be. The
# one wall-clock metric is let go: two rounds on a shared 2-core machine are not what this judges.
WORKLOAD = "images-8:repeat=0.5"
GATE = [
    "--scenarios", "memory", "--backends", "pickle", "--workloads", WORKLOAD, "--cache", "lru",
    "--rounds", "2", "--metric-threshold", "encode_to_use_s=1000%",
]  # fmt: skip
CASE = f"memory pickle cache=lru × {WORKLOAD}"


@pytest.mark.parametrize("fault", [REENCODE_ON_HIT, ""], ids=["re-encode-on-hit", "fault-free"])
def test_the_gate_flags_a_re_encode_on_hit_and_names_the_case(monkeypatch, tmp_path, capsys, fault) -> None:
    module, metrics = "serbench/links/cache.py", ("copies_frontend", "frontend copies")
    assert_the_gate_judges_the_fault(tmp_path, monkeypatch, capsys, module, fault, GATE, metrics, CASE)


def test_the_fault_copies_each_hit_in_process() -> None:
    """The injection itself: on a hit the faulty cache keeps a serialized copy of the tensor."""
    namespace = type(cache)("faulty_cache")
    namespace.__dict__.update(
        {k: v for k, v in cache.__dict__.items() if not k.startswith("__")},
        FrontendCache=type("FrontendCache", (cache.FrontendCache,), {}),
    )
    inject(namespace)
    from serbench.workloads import get_workload

    w = get_workload("images-2:repeat=1,profile=llava")
    front = namespace.FrontendCache("lru", 4 * w.payload_bytes())
    known: dict[str, int] = {}
    for i in range(2):
        request = w.request(i)
        front.prepare(request, cache.digests(request, known))
    assert sum(len(b) for b in front.reencoded) == w.payload_bytes()
