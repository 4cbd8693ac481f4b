"""Calibrated timing loops, on a clock the test moves."""

from __future__ import annotations

import dataclasses

from serbench.model.profiles import PROFILES
from serbench.probes import timing


class Clock:
    """A clock that only the timed functions move."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def costing(clock: Clock, first_s: float, then_s: float):
    """A function whose first call takes ``first_s`` on ``clock`` and every later one ``then_s``."""
    calls = []

    def fn() -> None:
        clock.now += first_s if not calls else then_s
        calls.append(None)

    return fn


def test_a_slow_first_call_does_not_make_every_sample_a_single_call() -> None:
    clock = Clock()
    loops = timing.calibrate(costing(clock, first_s=0.005, then_s=10e-6), 0.002, clock)
    assert 200 <= loops <= 1000  # 2 ms of 10 µs calls, not the one cold call that took 5 ms


def test_a_sample_lasts_at_least_the_minimum_and_reports_seconds_per_call() -> None:
    clock = Clock()
    profile = PROFILES["quick"]
    samples, info = timing.interleaved({"op": costing(clock, 1e-3, 3e-6)}, profile, clock)
    assert info["loops"]["op"] * 3e-6 >= profile.min_sample_s
    assert len(samples["op"]) == info["samples"] == profile.samples
    assert all(abs(s - 3e-6) < 1e-12 for s in samples["op"])


def test_functions_are_sampled_in_turn_the_order_reversed_every_other_turn() -> None:
    clock, calls = Clock(), []

    def op(name: str):
        def fn() -> None:
            clock.now += 1e-3
            calls.append(name)

        return fn

    profile = dataclasses.replace(PROFILES["quick"], samples=4, min_sample_s=1e-3)
    samples, info = timing.interleaved({"a": op("a"), "b": op("b"), "c": op("c")}, profile, clock)
    assert calls[-12:] == list("abccbaabccba")  # after calibration: four turns of one call each
    assert [len(samples[name]) for name in "abc"] == [4, 4, 4]
    assert info["seconds"].keys() == {"a", "b", "c"} and all(s >= 0 for s in info["seconds"].values())


class Fresh(timing.PerCall):
    """A call that needs ``ready()`` before each run: readying costs ``ready_s``, the call ``call_s``."""

    def __init__(self, clock: Clock, ready_s: float, call_s: float) -> None:
        self.clock, self.ready_s, self.call_s = clock, ready_s, call_s
        self.readied, self.calls, self.closed = False, 0, False

    def ready(self) -> None:
        self.clock.now += self.ready_s
        self.readied = True

    def __call__(self) -> None:
        assert self.readied, "called without ready() before it"
        self.readied = False
        self.clock.now += self.call_s
        self.calls += 1

    def close(self) -> None:
        self.closed = True


def test_a_per_call_operation_is_readied_untimed_before_each_call_one_call_a_sample() -> None:
    clock = Clock()
    profile = dataclasses.replace(PROFILES["quick"], samples=6)
    fresh = Fresh(clock, ready_s=1.0, call_s=2e-6)
    samples, info = timing.interleaved({"fresh": fresh, "plain": costing(clock, 1e-3, 3e-6)}, profile, clock)
    assert info["loops"]["fresh"] == 1  # not calibrated into a loop: each call needs its ready()
    assert len(samples["fresh"]) == 6 and all(
        abs(s - 2e-6) < 1e-12 for s in samples["fresh"]
    )  # not its readying
    assert fresh.calls == 1 + 6  # the untimed first call, then one a sample
    assert info["loops"]["plain"] > 1 and all(abs(s - 3e-6) < 1e-12 for s in samples["plain"])
    assert not fresh.closed  # its caller closes it, once done with it
