"""glibc's allocator, set for a measurement: where a large block comes from, and what is freed.

glibc serves a block above its mmap threshold with a mapping of its own, which
the kernel faults in page by page and which is unmapped when freed; a block
below it comes from the heap, whose free memory stays resident until more
than the trim threshold of it sits at the top. Left alone, glibc raises the
threshold (from 128 KiB, up to 32 MiB) to the size of the largest mapped block
freed so far, and the trim threshold with it: so whether the same 9.6 MB decode
reuses memory already faulted in or faults in fresh pages on every call
depends on what the process freed before: in the gate's measurers, in-band
pickle's decode read twice as slow in one as in another, for a whole run, by
that alone (docs/measurements/2026-12-02-gate.md). Each measuring process therefore fixes both, one
way or the other, before it measures (a no-op where glibc is not the
allocator); the settings of the environment (``MALLOC_*``, ``GLIBC_TUNABLES``)
are recorded with the results.
"""

from __future__ import annotations

import contextlib
import ctypes

M_TRIM_THRESHOLD = -1  # glibc's mallopt parameters
M_MMAP_THRESHOLD = -3
M_MMAP_MAX = -4
DEFAULT_MMAP_THRESHOLD = 128 * 1024  # glibc's initial values
DEFAULT_MMAP_MAX = 65536
DEFAULT_TRIM_THRESHOLD = 128 * 1024
NEVER_TRIM = 2**31 - 1  # mallopt takes an int


def _mallopt(param: int, value: int) -> None:
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).mallopt(param, value)


def fresh_memory() -> None:
    """Every block above 128 KiB from now on is mapped afresh and unmapped when freed: each
    large allocation faults its pages in, as the first one of a process does (the engine's
    receive buffers, ``serbench.scenarios.engine.server``; each side of ``serbench.probes.rss``). glibc's
    other defaults are set back too, whatever the process (or the one it was forked from)
    set before: ``reused_memory`` included."""
    _mallopt(M_MMAP_THRESHOLD, DEFAULT_MMAP_THRESHOLD)
    _mallopt(M_MMAP_MAX, DEFAULT_MMAP_MAX)
    _mallopt(M_TRIM_THRESHOLD, DEFAULT_TRIM_THRESHOLD)


def reused_memory() -> None:
    """Every block comes from the heap from now on (no mappings of their own), and the heap
    keeps what is freed: after its first call, a loop that allocates and frees the same
    large buffers reuses pages already faulted in, as a long-running process mostly does
    (micro's loops).

    Raising the mmap threshold instead reaches only 32 MiB, glibc's ceiling. A larger
    block (in-band pickle's 38.5 MB images-4 message) was then mapped afresh, unless
    the heap's free top happened to hold it, which the process's history decided, and two
    measurers read the same encode apart for a whole run; with no mappings at all it
    reads the same whatever came before."""
    _mallopt(M_MMAP_MAX, 0)
    _mallopt(M_TRIM_THRESHOLD, NEVER_TRIM)


def release_free_memory() -> None:
    """Hand this process's free heap memory back to the kernel (``malloc_trim``).

    A forked side inherits its parent's heap. Free memory that is still
    resident there would be reused by the side without raising its RSS, so
    what the side allocates would depend on the parent's history; after the
    trim every byte a side allocates is a fresh page, and shows. (No
    ``gc.collect()`` first: with torch imported it is slow, and would run per fork.)
    """
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).malloc_trim(0)
