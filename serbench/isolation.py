"""Run one function in a fresh process with a timeout; survive whatever it does.

Children are forked from the runner, which has imported torch, numpy,
msgspec and zmq but runs no measurement itself, so a fresh process per case
costs milliseconds, not the 1.5 s of importing torch, and every case starts
from the same small heap. (A forkserver would re-import the ``__main__``
script in every child, which breaks under pytest and ``python -c``.) A
child that raises, crashes (``os.abort()``) or hangs becomes a ``CaseFailed``
with a one-line reason. Ending a child, for any reason, first asks it to stop
(SIGTERM, which unwinds it so that its ``finally`` blocks remove what it made:
ipc folders, shared memory, its engine) and kills its whole tree after a grace
period.
"""

from __future__ import annotations

import faulthandler
import multiprocessing as mp
import signal
import traceback
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from multiprocessing.connection import Connection, wait
from typing import Any

import psutil
import torch

from serbench.errors import Terminated

_context = mp.get_context("fork")
INTERRUPTS = {signal.SIGINT, signal.SIGTERM}
GRACE_S = 2.0  # how long an ended child may take to clean up before it is killed


class CaseFailed(Exception):
    """The isolated function raised, crashed or timed out; the message says which."""


def _unwind(signum: int, frame: object) -> None:
    raise Terminated


def _child(conn: Connection, fn: Callable[..., Any], args: tuple) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides what Ctrl-C ends
    signal.signal(signal.SIGTERM, _unwind)  # the parent ending us: clean up on the way out
    signal.pthread_sigmask(signal.SIG_UNBLOCK, INTERRUPTS)  # blocked by the parent around fork
    faulthandler.disable()  # a crash is recorded as the case's error, not dumped on the terminal
    # Decoded tensors view read-only received frames by design (zero-copy).
    warnings.filterwarnings("ignore", message="The given (buffer|NumPy array) is not writable")
    torch.set_num_threads(1)  # one core per side: the frontend and engine share two
    try:
        outcome = ("ok", fn(*args))
    except BaseException as exc:
        where = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
        at = f" (at {where.filename}:{where.lineno})" if where else ""
        outcome = ("error", f"{type(exc).__name__}: {exc}{at}")
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # cleaned up: from here an end is immediate
    with suppress(OSError):  # a parent that is ending us no longer reads
        conn.send(outcome)
    conn.close()


def _tree(pid: int) -> list[psutil.Process]:
    """A process and all its descendants, descendants first; empty if it is gone."""
    try:
        root = psutil.Process(pid)
        return [*root.children(recursive=True), root]
    except psutil.NoSuchProcess:
        return []


def _kill(procs: list[psutil.Process]) -> None:
    for proc in procs:
        with suppress(psutil.NoSuchProcess):
            proc.kill()
    psutil.wait_procs(procs, timeout=5)


def kill_tree(pid: int) -> None:
    """Kill a process and all its descendants; gone already is fine."""
    _kill(_tree(pid))


def end_tree(pid: int, grace_s: float = GRACE_S) -> None:
    """SIGTERM a process, give it ``grace_s`` to clean up, then kill whatever of its tree is left.

    Its descendants are listed first: once it is gone they are no longer its children.
    """
    procs = _tree(pid)
    if not procs:
        return
    with suppress(psutil.NoSuchProcess):
        procs[-1].terminate()
    psutil.wait_procs(procs[-1:], timeout=grace_s)
    _kill(procs)


def _signal_name(exitcode: int) -> str:
    try:
        return signal.Signals(-exitcode).name
    except ValueError:
        return f"signal {-exitcode}"


@contextmanager
def _interrupts_deferred() -> Iterator[None]:
    """Hold Ctrl-C/SIGTERM while forking: raised in an at-fork hook, the interrupt would be lost.

    Held for the calling thread; the runner has no other thread to take the signal.
    """
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, INTERRUPTS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def run_isolated(fn: Callable[..., Any], args: tuple, timeout: float) -> Any:
    """``fn(*args)`` in a fresh child; its return value, or CaseFailed."""
    receiver, sender = _context.Pipe(duplex=False)
    proc = _context.Process(target=_child, args=(sender, fn, args), daemon=False)
    try:
        with _interrupts_deferred():
            proc.start()
        sender.close()
        ready = wait([receiver, proc.sentinel], timeout)
        if not ready:
            raise CaseFailed(f"timed out after {timeout:g} s")
        try:
            status, payload = receiver.recv()
        except EOFError:
            proc.join(5)
            code = proc.exitcode
            if code is not None and code < 0:
                raise CaseFailed(f"process crashed ({_signal_name(code)})") from None
            raise CaseFailed(f"process exited with code {code} without a result") from None
        if status == "error":
            raise CaseFailed(payload)
        return payload
    finally:
        receiver.close()
        if proc.pid is not None:  # started: an interrupt held during fork lands here, after it
            end_tree(proc.pid)
            proc.join(5)
