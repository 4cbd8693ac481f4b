"""The process toolkit: forked children, a child that dies with its parent, exit reasons in words."""

from __future__ import annotations

import os
import signal
import time
from multiprocessing.connection import Connection

import psutil
import pytest

from serbench.runtime.processes import FORK, die_with_parent, exit_reason, signal_name

GONE_WITHIN_S = 30.0  # a bound on a failing test's wait, not a measured time


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _orphaned_at_death(conn: Connection) -> None:
    die_with_parent(os.getppid(), signal.SIGKILL)
    conn.send(os.getpid())
    time.sleep(GONE_WITHIN_S * 2)
    os._exit(0)


def _parent_of_one(conn: Connection) -> None:
    FORK.Process(target=_orphaned_at_death, args=(conn,)).start()
    time.sleep(GONE_WITHIN_S * 2)
    os._exit(0)


def test_the_fork_context_forks() -> None:
    assert FORK.get_start_method() == "fork"


def test_a_child_that_dies_with_its_parent_is_gone_once_its_parent_is_killed() -> None:
    receiver, sender = FORK.Pipe(duplex=False)
    parent = FORK.Process(target=_parent_of_one, args=(sender,))
    parent.start()
    child = None
    try:
        assert receiver.poll(GONE_WITHIN_S)
        child = receiver.recv()
        assert not _gone(child)
        parent.kill()
        parent.join(GONE_WITHIN_S)
        deadline = time.monotonic() + GONE_WITHIN_S
        while not _gone(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _gone(child)
    finally:
        parent.kill()
        if child is not None and not _gone(child):
            os.kill(child, signal.SIGKILL)


def test_a_child_whose_parent_is_already_gone_gets_the_signal_at_once() -> None:
    # pid 0 is no process's parent: as if the parent died before the child asked
    proc = FORK.Process(target=die_with_parent, args=(0, signal.SIGUSR1))
    proc.start()
    proc.join(GONE_WITHIN_S)
    assert proc.exitcode == -signal.SIGUSR1


@pytest.mark.parametrize(
    ("exitcode", "reason"),
    [(-signal.SIGKILL, "killed by SIGKILL"), (3, "exited with code 3"), (None, "exited with code None")],
)
def test_exit_reason_says_how_a_process_ended(exitcode: int | None, reason: str) -> None:
    assert exit_reason(exitcode) == reason


def test_a_signal_without_a_name_is_named_by_its_number() -> None:
    assert signal_name(-signal.SIGABRT) == "SIGABRT"
    assert signal_name(-200) == "signal 200"
