"""Run a function in a fresh process with a timeout, or several side by side; survive whatever it does.

Children are forked from the runner, which has imported torch, numpy,
msgspec and zmq but runs no measurement itself, so a fresh process per case
costs far less than importing torch again, and every case starts
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
import os
import pickle
import shutil
import signal
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

import psutil

from serbench.model.errors import CaseFailed, Terminated
from serbench.runtime import lazy
from serbench.runtime.processes import FORK, signal_name

torch = lazy.torch(__name__)  # imported on first use (serbench.runtime.lazy), where it is used

INTERRUPTS = {signal.SIGINT, signal.SIGTERM}
GRACE_S = 2.0  # how long an ended child may take to clean up before it is killed


def _unwind(signum: int, frame: object) -> None:
    raise Terminated


def _outcome(fn: Callable[..., Any], args: tuple) -> tuple[str, Any]:
    """``("ok", fn(*args))`` or ``("error", one line)``, run as a case's child: the parent
    decides what Ctrl-C ends, and SIGTERM unwinds through ``finally`` blocks first."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _unwind)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, INTERRUPTS)  # blocked by the parent around fork
    faulthandler.disable()  # a crash is recorded as the case's error, not dumped on the terminal
    # One core per side: the frontend and engine share two. A child whose cases never touch
    # torch (text, counted under valgrind) does not import it to say so; one that imports it
    # later reads the variable then.
    if lazy.imported():
        torch.set_num_threads(1)
    else:
        os.environ["OMP_NUM_THREADS"] = "1"
    try:
        return ("ok", fn(*args))
    except BaseException as exc:
        return ("error", error_text(exc))
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # cleaned up: from here an end is immediate


def error_text(exc: BaseException) -> str:
    """A case's error as its record keeps it: the exception and the line that raised it."""
    where = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
    at = f" (at {where.filename}:{where.lineno})" if where else ""
    return f"{type(exc).__name__}: {exc}{at}"


def _child(conn: Connection, fn: Callable[..., Any], args: tuple) -> None:
    outcome = _outcome(fn, args)
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
    """SIGTERM a process, give it ``grace_s`` to clean up, then kill whatever of its tree is left."""
    end_trees([pid], grace_s)


def end_trees(pids: list[int], grace_s: float = GRACE_S) -> None:
    """``end_tree`` for several processes at once: all are ended together, so they clean up
    side by side within one ``grace_s``.

    Their descendants are listed first: once a process is gone they are no longer its children.
    """
    trees = [tree for tree in map(_tree, pids) if tree]
    roots = [tree[-1] for tree in trees]
    for root in roots:
        with suppress(psutil.NoSuchProcess):
            root.terminate()
    psutil.wait_procs(roots, timeout=grace_s)
    _kill([proc for tree in trees for proc in tree])


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


def _payload(status: str, payload: Any) -> Any:
    if status == "error":
        raise CaseFailed(payload)
    return payload


def _no_result(code: int | None) -> CaseFailed:
    if code is not None and code < 0:
        return CaseFailed(f"process crashed ({signal_name(code)})")
    return CaseFailed(f"process exited with code {code} without a result")


def run_isolated(fn: Callable[..., Any], args: tuple, timeout: float) -> Any:
    """``fn(*args)`` in a fresh child; its return value, or CaseFailed."""
    (outcome,) = run_isolated_each(fn, [args], timeout)
    if isinstance(outcome, CaseFailed):
        raise outcome
    return outcome


def run_isolated_each(
    fn: Callable[..., Any], calls: list[tuple], timeout: float, at_once: int = 1
) -> list[Any]:
    """``fn(*args)`` for each ``args`` of ``calls``, each in a fresh child, ``at_once`` children
    at a time, each given ``timeout`` from its start: per call, its return value or the
    CaseFailed that ended it. For work that measures nothing (the backends' conformance),
    where children side by side only finish sooner."""
    outcomes: list[Any] = []
    for start in range(0, len(calls), at_once):
        with ExitStack() as children:
            started = [children.enter_context(_started(fn, args)) for args in calls[start : start + at_once]]
            deadline = time.monotonic() + timeout
            outcomes.extend(_collected(receiver, proc, deadline, timeout) for receiver, proc in started)
    return outcomes


@contextmanager
def _started(fn: Callable[..., Any], args: tuple) -> Iterator[tuple[Connection, Any]]:
    """A child running ``fn(*args)``, the end its outcome comes on; ended (its tree) on exit."""
    receiver, sender = FORK.Pipe(duplex=False)
    proc = FORK.Process(target=_child, args=(sender, fn, args), daemon=False)
    try:
        with _interrupts_deferred():
            proc.start()
        sender.close()
        yield receiver, proc
    finally:
        receiver.close()
        if proc.pid is not None:  # started: an interrupt held during fork lands here, after it
            end_tree(proc.pid)
            proc.join(5)


def _collected(receiver: Connection, proc: Any, deadline: float, timeout: float) -> Any:
    """A started child's outcome: its return value, or the CaseFailed that ended it."""
    try:
        if not wait([receiver, proc.sentinel], max(0.0, deadline - time.monotonic())):
            raise CaseFailed(f"timed out after {timeout:g} s")
        try:
            return _payload(*receiver.recv())
        except EOFError:
            proc.join(5)
            raise _no_result(proc.exitcode) from None
    except CaseFailed as exc:
        return exc


_WORD = 8  # bytes of a pid or an exit code on the zygote's answers pipe


def _zygote(orders: int, answers: int, folder: Path, runner_ends: tuple[int, int]) -> None:
    """The zygote's loop: for each byte ordered, fork a child that runs ``folder/task``; answer its
    pid, then its exit code. It allocates the same few fixed-size objects every time round.
    It ends when the runner closes its end of ``orders``, so it holds none of the runner's ends."""
    for fd in runner_ends:
        os.close(fd)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the runner decides what Ctrl-C ends
    signal.pthread_sigmask(signal.SIG_UNBLOCK, INTERRUPTS)
    while os.read(orders, 1):
        pid = os.fork()
        if pid == 0:
            os.close(orders)
            os.close(answers)
            _zygote_child(folder)
        os.write(answers, pid.to_bytes(_WORD, "little"))
        _, status = os.waitpid(pid, 0)
        os.write(answers, os.waitstatus_to_exitcode(status).to_bytes(_WORD, "little", signed=True))


def _zygote_child(folder: Path) -> None:
    """A child of the zygote: run the task in ``folder``, leave its outcome beside it, exit."""
    try:
        fn, args = pickle.loads((folder / "task").read_bytes())
        part = folder / "outcome.part"
        part.write_bytes(pickle.dumps(_outcome(fn, args)))
        part.rename(folder / "outcome")
    finally:
        os._exit(0)


def _read_word(fd: int) -> int | None:
    data = os.read(fd, _WORD)
    return int.from_bytes(data, "little", signed=True) if len(data) == _WORD else None


class Zygote:
    """Forks every case's child from one process, taken when the ``with`` block is entered:
    the runner enters it before it does anything whose size varies from run to run.

    A child forked from the runner inherits what the runner did before it: the
    machine check, its progress text, the results so far, how many samples an
    adaptive loop took.
    That moves where the child's objects land, and through it instruction counts
    (docs/instructions.md). The zygote does nothing between forks
    but read one byte and write two fixed-size answers, so every child starts
    from the same heap. Tasks and outcomes pass as files, which a child killed
    half-way cannot leave half-read in a stream the next child would share.
    """

    def __enter__(self) -> Zygote:
        self._folder = Path(tempfile.mkdtemp(prefix="serbench-zygote-"))
        orders, self._orders = os.pipe()
        self._answers, answers = os.pipe()
        runner_ends = (self._orders, self._answers)
        self._proc = FORK.Process(target=_zygote, args=(orders, answers, self._folder, runner_ends))
        with _interrupts_deferred():
            self._proc.start()
        os.close(orders)
        os.close(answers)
        return self

    def __exit__(self, *exc: object) -> None:
        os.close(self._orders)  # the zygote's loop ends at end of file
        self._proc.join(5)
        kill_tree(self._proc.pid)
        os.close(self._answers)
        shutil.rmtree(self._folder, ignore_errors=True)

    def run(self, fn: Callable[..., Any], args: tuple, timeout: float) -> Any:
        """``fn(*args)`` (picklable) in a child of the zygote; its return value, or CaseFailed."""
        outcome = self._folder / "outcome"
        outcome.unlink(missing_ok=True)
        (self._folder / "task").write_bytes(pickle.dumps((fn, args)))
        os.write(self._orders, b"f")
        pid = _read_word(self._answers)
        if pid is None:
            raise CaseFailed("the zygote process ended unexpectedly")
        try:
            if not wait([self._answers], timeout):
                raise CaseFailed(f"timed out after {timeout:g} s")
        finally:
            end_tree(pid)  # gone already when it finished
            code = _read_word(self._answers)
        if not outcome.exists():
            raise _no_result(code)
        return _payload(*pickle.loads(outcome.read_bytes()))
