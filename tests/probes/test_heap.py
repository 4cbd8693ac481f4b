"""The allocator settings a measuring process takes (serbench.probes.heap): where a large
block's pages come from."""

from __future__ import annotations

import pytest
from fresh_interpreter import printed_json

BLOCK = 10 << 20

# Three 10 MB blocks allocated, touched and freed in turn, after the setting under test; what
# touching each added to RSS. In a fresh interpreter (without torch, but for the engine's
# setting): a fork of the pytest process inherits a heap that differs from run to run of the suite.
PROBE = """
import json
import numpy as np
import psutil
{setting}
rss = lambda: psutil.Process().memory_info().rss
growth = []
for _ in range(3):
    block = np.empty({block}, np.uint8)
    before = rss()
    block[::4096] = 1
    growth.append(rss() - before)
    del block
    {after_free}
print(json.dumps(growth))
"""


def _growth(setting: str, after_free: str = "pass", block: int = BLOCK) -> list[int]:
    code = PROBE.format(setting=setting, block=block, after_free=after_free)
    return printed_json(code)


@pytest.mark.parametrize(
    "setting",
    [
        "from serbench.scenarios.engine.server import fresh_receive_memory; fresh_receive_memory()",
        "from serbench.probes.heap import fresh_memory; fresh_memory()",
    ],
)
def test_fresh_memory_faults_every_large_block_in(setting: str) -> None:
    """glibc's adaptive mmap threshold can hand a later 10 MB frame heap memory an earlier one
    left, still resident; the engine keeps it fixed and trims, so every such frame's pages come
    fresh: touching each block adds 10 MB of RSS (reused pages would add ~0)."""
    after_free = "from serbench.probes.heap import release_free_memory; release_free_memory()"
    growth = _growth(setting, after_free)
    assert all(grew >= BLOCK // 2 for grew in growth), growth


@pytest.mark.parametrize("block", [BLOCK, 40 << 20])  # below and above glibc's 32 MiB ceiling
def test_reused_memory_faults_a_large_block_in_once(block: int) -> None:
    """micro's loops: after the first large block, the next ones reuse its pages, even above
    the 32 MiB that glibc's mmap threshold can reach. Left to glibc's adaptive threshold (the
    control), the first block is mapped and unmapped, which raises the threshold, so the
    second comes from the heap and faults in afresh too."""
    growth = _growth("from serbench.probes.heap import reused_memory; reused_memory()", block=block)
    assert growth[0] >= block // 2, growth
    assert all(grew < block // 10 for grew in growth[1:]), growth
    assert _growth("pass")[1] >= BLOCK // 2
