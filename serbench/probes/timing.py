"""Calibrated timing loops, interleaved across the things being compared.

Like ``timeit.autorange``: each function is looped enough times that one
sample lasts at least ``profile.min_sample_s`` (one untimed call, then the
calibration, warm it up); then samples of all the functions are taken in turn
(A B C C B A …) so drift on a shared machine hits every one alike, until
``profile.samples`` samples or the time budget. An operation whose every call needs something
made for it alone (``PerCall``: a frame its decode consumes) is timed one call a sample, what
it needs made untimed before each.
"""

from __future__ import annotations

import abc
import time
from collections.abc import Callable, Hashable, Mapping
from typing import TypeVar

from serbench.model.profiles import Profile

MIN_SAMPLES = 3

K = TypeVar("K", bound=Hashable)


class PerCall(abc.ABC):
    """An operation whose every call needs something made for it alone, outside the timing: a
    frame that its decode consumes, or a frame its encode made that must be given back before
    the next. ``ready()`` runs untimed before each call and makes that (or gives back what the
    call before left); ``close()`` gives back what is left, once its owner is done with it
    (after the timing, or when it failed)."""

    @abc.abstractmethod
    def __call__(self) -> object:
        """The call timed."""

    @abc.abstractmethod
    def ready(self) -> None:
        """Ready the next call, untimed: make what it needs, give back what the last one left."""

    @abc.abstractmethod
    def close(self) -> None:
        """Give back whatever is left; safe to call more than once."""


Operation = Callable[[], object] | PerCall


def _loop(fn: Callable[[], object], loops: int, clock: Callable[[], float] = time.perf_counter) -> float:
    start = clock()
    for _ in range(loops):
        fn()
    return clock() - start


def calibrate(fn: Operation, min_sample_s: float, clock: Callable[[], float] = time.perf_counter) -> int:
    """Loops per sample so that one sample takes at least ``min_sample_s``.

    The first call is not timed: it pays for what a function does once in a
    process (a decoder's types compiled, pages first written after a fork).
    Timed, a cold decode outlasted a whole sample, and every sample was then
    one call, slower than in a loop.
    """
    if isinstance(fn, PerCall):
        fn.ready()
        fn()
        # One call a sample: each needs its ``ready()`` untimed just before it, so no loop of
        # calls can be timed as one. Fine for what needs it (a shm decode takes milliseconds,
        # far above the clock's resolution); a sub-microsecond one would read the clock's cost.
        return 1
    fn()
    loops = 1
    while True:
        elapsed = _loop(fn, loops, clock)
        if elapsed >= min_sample_s or loops >= 1_000_000:
            return loops
        loops = max(loops * 2, int(loops * min_sample_s / max(elapsed, 1e-9) * 1.2))


def _sample(fn: Operation, loops: int, clock: Callable[[], float]) -> float:
    """Seconds per call of one sample: ``loops`` calls timed as one, or a ``PerCall``'s one call
    timed alone, readied untimed just before."""
    if isinstance(fn, PerCall):
        fn.ready()
        return _loop(fn, 1, clock)
    return _loop(fn, loops, clock) / loops


def interleaved(
    fns: Mapping[K, Operation], profile: Profile, clock: Callable[[], float] = time.perf_counter
) -> tuple[dict[K, list[float]], dict]:
    """Seconds per call, one list of samples per function, sampled in turn.

    ``clock`` is wall time by default; ``time.thread_time`` counts this thread's
    CPU time only, which a machine shared with other work does not inflate. A visit of a case
    measured in rounds (``Profile.split``) takes its share of the samples and of the time. The
    second value: ``loops`` and ``samples`` per function, and ``seconds``, the wall time each
    function took in all (its calibration and its samples, a ``PerCall``'s readying included),
    for a caller timing several cases in one process. A ``PerCall`` is left for its caller to close.
    """
    loops: dict[K, int] = {}
    seconds: dict[K, float] = {}
    for name, fn in fns.items():
        start = time.perf_counter()
        loops[name] = calibrate(fn, profile.min_sample_s, clock)
        seconds[name] = time.perf_counter() - start
    samples: dict[K, list[float]] = {name: [] for name in fns}
    order = list(fns)  # reversed every other turn (A B C, C B A): none always follows the same one
    deadline = time.perf_counter() + profile.max_metric_s * len(fns) / profile.split
    for i in range(profile.share(profile.samples)):  # an interleaved visit takes its share
        if i >= MIN_SAMPLES and time.perf_counter() > deadline:
            break
        for name in order if i % 2 == 0 else reversed(order):
            fn, start = fns[name], time.perf_counter()
            samples[name].append(_sample(fn, loops[name], clock))
            seconds[name] += time.perf_counter() - start
    return samples, {"loops": loops, "samples": len(next(iter(samples.values()))), "seconds": seconds}
