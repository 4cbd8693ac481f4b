"""Run one function in a fresh process with a timeout; survive whatever it does.

Children are forked from the runner, which has imported torch, numpy,
msgspec and zmq but runs no measurement itself, so a fresh process per case
costs milliseconds, not the 1.5 s of importing torch, and every case starts
from the same small heap. (A forkserver would re-import the ``__main__``
script in every child, which breaks under pytest and ``python -c``.) A
child that raises, crashes (``os.abort()``) or hangs becomes a ``CaseFailed``
with a one-line reason; its whole process tree is killed either way.
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

_context = mp.get_context("fork")
INTERRUPTS = {signal.SIGINT, signal.SIGTERM}


class CaseFailed(Exception):
    """The isolated function raised, crashed or timed out; the message says which."""


def _child(conn: Connection, fn: Callable[..., Any], args: tuple) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides what Ctrl-C ends
    signal.pthread_sigmask(signal.SIG_UNBLOCK, INTERRUPTS)  # blocked by the parent around fork
    faulthandler.disable()  # a crash is recorded as the case's error, not dumped on the terminal
    # Decoded tensors view read-only received frames by design (zero-copy).
    warnings.filterwarnings("ignore", message="The given (buffer|NumPy array) is not writable")
    torch.set_num_threads(1)  # one core per side: the frontend and engine share two
    try:
        conn.send(("ok", fn(*args)))
    except BaseException as exc:
        where = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
        at = f" (at {where.filename}:{where.lineno})" if where else ""
        conn.send(("error", f"{type(exc).__name__}: {exc}{at}"))
    finally:
        conn.close()


def kill_tree(pid: int) -> None:
    """Kill a process and all its descendants; gone already is fine."""
    try:
        root = psutil.Process(pid)
        procs = [*root.children(recursive=True), root]
    except psutil.NoSuchProcess:
        return
    for proc in procs:
        with suppress(psutil.NoSuchProcess):
            proc.kill()
    psutil.wait_procs(procs, timeout=5)


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
            kill_tree(proc.pid)
            proc.join(5)
