"""Instruction counts under callgrind: a measurement that a shared machine's noise cannot move.

A wall clock on a busy VM cannot see a small change in a decoder; the number of instructions
the decoder executes can. One process per side runs under callgrind with instrumentation off
at start and the hash seed fixed; each case runs in a child forked from it, which switches
instrumentation on for itself through valgrind's client requests (``_STUB``: ``valgrind.h``'s
no-op sequence for x86-64 in an executable page, called through ctypes: it acts at an exact
point of the program, with no second process and no compiler at run time).

A count must depend on the code, not on what the process did before the case, so what made
that history visible is fixed: the loop runs in a fresh glibc arena (``per_call``) with the
mmap threshold fixed (``FIXED_MALLOC``), no math-library thread pools (``SINGLE_THREADED``),
pymalloc's arenas aligned (``align_arenas``) and its partly used pools filled (``_Pools``),
and the current folder off ``sys.path`` (``counting_environment``).

An operation costs ``(count(2N calls) - count(N calls)) / N`` instructions, less the same
difference for a call that does nothing, so the counting's own cost cancels; N fills about
``WINDOW_INSTRUCTIONS``, in whole ``PERIOD``s of calls where it can, so whatever recurs every
few calls falls evenly into both windows. docs/instructions.md says why each piece is there;
the trials that chose them are in docs/measurements/2026-12-02-instructions.md.
"""

from __future__ import annotations

import _thread
import contextlib
import ctypes
import gc
import math
import mmap
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from functools import cache
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from serbench.model.results import Case

HASH_SEED = "0"
# Where a caller asks for another hash seed: the gate counts each case under two layouts
# (``serbench.gate.counting.LAYOUTS``), this one of them.
HASH_SEED_VARIABLE = "SERBENCH_HASH_SEED"
# Where a caller asks for another heap margin (glibc's ``top_pad``: what the heap grows by beyond
# an allocation's need), which decides whether a growing buffer's realloc extends in place or
# moves and copies: the gate's other layout sets it (docs/measurements/2026-12-08-layouts.md).
TOP_PAD_VARIABLE = "SERBENCH_MALLOC_TOP_PAD"
# glibc's mmap threshold fixed at its initial value: a tunable that is set turns off the dynamic threshold.
FIXED_MALLOC = "glibc.malloc.mmap_threshold=131072"
# No thread pools: a pool thread maps and frees memory whenever it is scheduled, which moves
# where everything after it lands, and with it pointer-keyed hash tables (type caches, memos).
SINGLE_THREADED = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
TAIL_BYTES = 64  # the end of a dump, read for its totals line
HOLDERS = 4  # placeholder threads of ``_in_new_thread``; glibc allows 8 arenas per CPU
WINDOW_INSTRUCTIONS = 20_000_000
PERIOD = 100  # calls: windows are whole multiples of it ...
PERIOD_LIMIT = 5  # ... unless that makes a window more than this many times WINDOW_INSTRUCTIONS
MISSING = "valgrind not found on PATH (Debian: apt-get install valgrind)"
# pymalloc on 64-bit CPython 3.10+: 16 KiB pools with a 48-byte header, blocks in 32 size
# classes of 16 bytes up to 512.
POOL_SIZE = 16 * 1024
POOL_HEADER = 48
SIZE_CLASSES = 32
_POOL_MASK = ~(POOL_SIZE - 1)  # made once: an int made while reading a pool would land in one
SPARE = 2  # blocks of a pool left to checked steps: room for objects of the filling's own
FILLERS = 1 << 16  # blocks ``_Pools`` can keep in a process
_ONE_DIGIT = 1 << 20  # above the small ints CPython caches, so ``+ 0`` makes a new one

# valgrind.h's client request for x86-64, as a function ``request(args, default)``:
# rax = args, rdx = default; the four rotations of rdi (by 128 bits in all: a no-op on a
# real CPU) then ``xchg rbx, rbx`` are what valgrind recognises; the answer comes back in rdx.
_STUB = bytes.fromhex(
    "4889f8"  # mov rax, rdi
    "4889f2"  # mov rdx, rsi
    "48c1c703"
    "48c1c70d"
    "48c1c73d"
    "48c1c733"  # rol rdi, 3 / 13 / 61 / 51
    "4887db"  # xchg rbx, rbx
    "4889d0"  # mov rax, rdx
    "c3"  # ret
)
# pymalloc's arena allocator, for x86-64 Linux: ``alloc(ctx, size)`` maps 2 * size bytes and
# unmaps all but the size-aligned ``size`` inside them; ``free(ctx, address, size)`` unmaps.
# Raw system calls (mmap 9, munmap 11), no Python: pymalloc calls it in the middle of an
# allocation, so it must not allocate. See ``align_arenas``.
_ARENA_CODE = bytes.fromhex(
    "53"  # alloc: push rbx
    "4889f3"  # mov rbx, rsi                       ; size
    "31ff"  # xor edi, edi                        ; mmap(NULL,
    "488d341b"  # lea rsi, [rbx + rbx]              ;      2 * size,
    "ba03000000"  # mov edx, 3                          ;      PROT_READ | PROT_WRITE,
    "41ba22000000"  # mov r10d, 0x22                   ;      MAP_PRIVATE | MAP_ANONYMOUS,
    "49c7c0ffffffff"  # mov r8, -1                     ;      -1,
    "4531c9"  # xor r9d, r9d                      ;      0)
    "b809000000"  # mov eax, 9
    "0f05"  # syscall
    "483d01f0ffff"  # cmp rax, -4095                   ; an error number?
    "7338"  # jae fail
    "488d7c18ff"  # lea rdi, [rax + rbx - 1]
    "4889d9"  # mov rcx, rbx
    "48f7d9"  # neg rcx
    "4821cf"  # and rdi, rcx                      ; aligned = round up to size
    "4889fe"  # mov rsi, rdi
    "4829c6"  # sub rsi, rax                      ; head = aligned - start
    "57"  # push rdi
    "56"  # push rsi
    "4889c7"  # mov rdi, rax
    "b80b000000"  # mov eax, 11
    "0f05"  # syscall                           ; munmap(start, head): EINVAL when 0
    "5e"  # pop rsi
    "488b3c24"  # mov rdi, [rsp]
    "4801df"  # add rdi, rbx
    "48f7de"  # neg rsi
    "4801de"  # add rsi, rbx
    "b80b000000"  # mov eax, 11
    "0f05"  # syscall                           ; munmap(aligned + size, size - head)
    "58"  # pop rax                           ; aligned
    "5b"  # pop rbx
    "c3"  # ret
    "31c0"  # fail: xor eax, eax                  ; NULL
    "5b"  # pop rbx
    "c3"  # ret
    "4889f7"  # free: mov rdi, rsi
    "4889d6"  # mov rsi, rdx
    "b80b000000"  # mov eax, 11
    "0f05"  # syscall                           ; munmap(address, size)
    "c3"  # ret
)
_ARENA_FREE_AT = 0x6A


class _ArenaAllocator(ctypes.Structure):
    """CPython's ``PyObjectArenaAllocator``."""

    _fields_ = [("ctx", ctypes.c_void_p), ("alloc", ctypes.c_void_p), ("free", ctypes.c_void_p)]


_RUNNING_ON_VALGRIND = 0x1001
_CALLGRIND = (ord("C") << 24) | (ord("T") << 16)  # VG_USERREQ_TOOL_BASE('C', 'T')
_DUMP_STATS = _CALLGRIND + 0
_ZERO_STATS = _CALLGRIND + 1
_TOGGLE_COLLECT = _CALLGRIND + 2
_START_INSTRUMENTATION = _CALLGRIND + 4


def _executable(code: bytes) -> int:
    """The address of ``code`` copied into an executable page of its own, mapped for the rest
    of the process: pymalloc calls the arena allocator until the interpreter's last moment,
    after Python's own objects (an ``mmap.mmap`` among them) are gone."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, *[ctypes.c_int] * 3, ctypes.c_long]
    rwx = mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC
    page = libc.mmap(None, mmap.PAGESIZE, rwx, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
    if page in (None, ctypes.c_void_p(-1).value):
        raise OSError(ctypes.get_errno(), "could not map an executable page")
    ctypes.memmove(page, code, len(code))
    return page


@cache
def _client_request() -> Callable[[int], int]:
    """The stub as a callable ``request(code) -> answer`` (0 when not under valgrind)."""
    stub = ctypes.CFUNCTYPE(ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t)(_executable(_STUB))

    def request(code: int) -> int:
        args = (ctypes.c_size_t * 6)(code, 0, 0, 0, 0, 0)
        return stub(ctypes.addressof(args), 0)

    return request


def on_valgrind() -> bool:
    """Whether this process runs under valgrind: a fact valgrind itself answers (its client
    request ``RUNNING_ON_VALGRIND``), not a setting. ``python -m serbench.runner.measurer`` asks it
    first thing, to align its arenas before its imports allocate."""
    return platform.machine() in ("x86_64", "AMD64") and bool(_client_request()(_RUNNING_ON_VALGRIND))


# The folder callgrind writes this process's dumps in: set from the message that set the
# counting process up (``protocol.Counting``, see ``counting_in``), inherited by its forks.
_dumps: Path | None = None


def counting_in(dumps: Path) -> None:
    """Count instructions in this process and its forks, callgrind's dumps in ``dumps`` (the
    folder ``run_under_callgrind`` gave valgrind). Called by ``serbench.runner.measurer`` when its
    ``Setup`` says so, before its zygote is taken."""
    global _dumps
    _dumps = dumps


def unavailable() -> str | None:
    """Why this process cannot count instructions, or None when it can."""
    if platform.machine() not in ("x86_64", "AMD64"):
        return f"instruction counts need x86-64 (this machine is {platform.machine()})"
    if not launched() or not _client_request()(_RUNNING_ON_VALGRIND):
        return "not running under callgrind (`serbench run --measure instructions` starts it)"
    return None


def align_arenas() -> None:
    """Make every pymalloc arena allocated from now on start at a multiple of its size.

    Freeing a block costs a few instructions more or fewer according to where its
    arena starts inside its size-aligned span (``arena_map_is_used`` in obmalloc.c
    compares the block's offset there with the arena's), and ``mmap`` puts an arena
    wherever the process's earlier mappings leave room, which alone moved a text decode's
    count between processes (docs/measurements/2026-12-02-instructions.md). An aligned
    arena takes the same path for every block. ``free`` is ``munmap``, as CPython's own,
    so arenas allocated before the switch are freed correctly too.
    """
    code = _executable(_ARENA_CODE)
    allocator = _ArenaAllocator(None, code, code + _ARENA_FREE_AT)
    ctypes.pythonapi.PyObject_SetArenaAllocator(ctypes.byref(allocator))


def launched() -> bool:
    """Whether this process counts instructions: a worker that ``run_under_callgrind`` started
    and set up to count (``counting_in``), or a fork of one."""
    return _dumps is not None


def wall_time_note(problem: str) -> str:
    """The line a run or a worker asked for counts prints when this machine cannot count."""
    return f"note: {problem}: no instruction counts, micro, ipc and fanout measure wall time"


def cannot_launch() -> str | None:
    """Why this machine cannot count instructions (no valgrind, not x86-64), or None."""
    if platform.machine() not in ("x86_64", "AMD64"):
        return f"instruction counts need x86-64 (this machine is {platform.machine()})"
    if shutil.which("valgrind") is None:
        return MISSING
    return None


def valgrind_command(out: Path) -> list[str]:
    """The valgrind prefix that runs a command under callgrind, dumps and log in ``out``.

    valgrind places the program's memory itself, the same way every time, so identical
    processes count alike; ``setarch --addr-no-randomize`` around it made them differ
    (docs/measurements/2026-12-02-instructions.md).
    No gdbserver (``--vgdb=no``): nothing attaches to one (instrumentation is
    switched by client requests), and its FIFOs in ``/tmp`` outlived a killed run.
    """
    return [
        shutil.which("valgrind") or "valgrind",
        "--tool=callgrind",
        "--vgdb=no",
        "--instr-atstart=no",
        f"--callgrind-out-file={out}/callgrind.%p",
        "--log-file=" + str(out / "valgrind.%p.log"),
    ]


def counting_environment() -> dict[str, str]:
    """This process's environment plus what the interpreter and the libraries of a counting
    process read as they start, before any message can reach it: the hash seed fixed (to
    ``HASH_SEED``, or to ``HASH_SEED_VARIABLE``'s value where that is set),
    pymalloc (``_Pools`` reads its pools), glibc's mmap threshold fixed (added to any
    tunables already set, with the heap margin ``TOP_PAD_VARIABLE`` asks for where it is set),
    one thread per math library, and the current folder off
    ``sys.path``. serbench's own settings go in the worker's ``Setup`` message.

    ``python -m`` puts the current folder first on ``sys.path``, and every import
    then reads its listing: a folder whose entries other programs add and remove
    (``/tmp``) moved counts of the same commit (docs/measurements/2026-12-02-instructions.md).
    ``PYTHONSAFEPATH`` (Python 3.11+) leaves it off; a spec that names a module in
    it still finds it (``serializers._import``)."""
    top_pad = os.environ.get(TOP_PAD_VARIABLE)
    asked = f"glibc.malloc.top_pad={top_pad}" if top_pad else None
    tunables = ":".join(filter(None, (os.environ.get("GLIBC_TUNABLES"), FIXED_MALLOC, asked)))
    return {
        **os.environ,
        "PYTHONHASHSEED": os.environ.get(HASH_SEED_VARIABLE, HASH_SEED),
        "PYTHONMALLOC": "pymalloc",
        "PYTHONSAFEPATH": "1",
        "GLIBC_TUNABLES": tunables,
        **SINGLE_THREADED,
    }


def run_under_callgrind(command: Sequence[str], talk: Callable[[subprocess.Popen, Path], None]) -> int:
    """Run ``command`` under callgrind and return its exit code (see ``cannot_launch`` first).

    The command (``python -m serbench.runner.measurer``) gets pipes for its stdin and
    stdout and inherits stderr; ``talk(proc, dumps)`` speaks to it while it
    runs (``serbench.runner.protocol``: its ``Setup`` says where callgrind writes
    the dumps, ``dumps``, and carries everything else it needs). Under
    valgrind everything runs 5-10 times slower, so what this process already
    did for it (the backends' checks) goes with the messages rather than
    being done again. SIGTERM is passed on to it and Ctrl-C reaches it
    directly; either way it ends with its own code, which is returned. The
    dump folder is removed afterwards.
    """
    out = Path(tempfile.mkdtemp(prefix="serbench-callgrind-"))
    try:
        proc = subprocess.Popen(
            [*valgrind_command(out), *command],
            env=counting_environment(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        previous = signal.signal(signal.SIGTERM, lambda signum, frame: proc.terminate())
        try:
            try:
                talk(proc, out)
            except KeyboardInterrupt:
                pass  # the child got it too and ends with its own code
            except BaseException:
                proc.terminate()
                _wait(proc)
                raise
            finally:
                with contextlib.suppress(OSError):
                    proc.stdin.close()  # the worker's end of file: it ends
            return _wait(proc)
        finally:
            signal.signal(signal.SIGTERM, previous)
            proc.stdout.close()
    finally:
        shutil.rmtree(out, ignore_errors=True)


def _wait(proc: subprocess.Popen) -> int:
    while True:
        try:
            return proc.wait()
        except KeyboardInterrupt:
            continue  # the child got it too and ends with its own code


def _dumped_instructions() -> int:
    """The instruction total of this process's latest dump (renamed once read: ``window.`` before
    its name, for ``_keep_windows``)."""
    out = _dumps
    parts = list(out.glob(f"callgrind.{os.getpid()}.*"))
    if not parts:
        raise RuntimeError(f"callgrind wrote no dump for process {os.getpid()} in {out}")
    latest = max(parts, key=lambda p: int(p.suffix[1:]))
    # Only its end is read, into a buffer of the same size every time: a dump's size varies from
    # run to run, and reading it whole would allocate that much from the counting thread's heap
    # between two windows (where glibc's realloc then finds room or not).
    fd = os.open(latest, os.O_RDONLY)
    try:
        tail = os.pread(fd, TAIL_BYTES, max(0, os.fstat(fd).st_size - TAIL_BYTES))
    finally:
        os.close(fd)
    latest.rename(out / f"window.{latest.name}")  # out of the next glob; ``_keep_windows`` names it
    at = tail.rfind(b"\ntotals:")
    if at < 0:
        raise RuntimeError(f"{latest} does not end with a totals line")
    return int(tail[at + len(b"\ntotals:") :].split(maxsplit=1)[0])


def count(fn: Callable[[], object], calls: int) -> int:
    """Instructions executed by ``calls`` calls of ``fn`` in a loop, counting included.

    Instrumentation must be on (``per_call`` switches it on). The collector
    runs first and pymalloc's pools are filled (``_Pools``), so every
    window starts from the same heap state (``per_call`` freezes what was
    there before, which would take seconds to traverse).
    """
    request = _client_request()
    pools = _pools()
    gc.collect()
    pools.fill()
    request(_ZERO_STATS)
    for _ in range(calls):
        fn()
    request(_DUMP_STATS)
    pools.free_fresh()
    return _dumped_instructions()


@cache
def _block_makers() -> tuple[Callable[[], object], ...]:
    """For each of pymalloc's size classes, a function whose object takes one block of that
    class and nothing else: ``object()`` (16 bytes), an int of one digit (28), and bytes.
    Made once: freed after a filling, they would give blocks back to the pools it filled."""
    header = sys.getsizeof(b"")
    sized = [lambda n=16 * (size_class + 1) - header: bytes(n) for size_class in range(2, SIZE_CLASSES)]
    return (object, lambda: _ONE_DIGIT + 0, *sized)


def _blocks_in_use(obj: object) -> int:
    """How many blocks of the pymalloc pool that holds ``obj`` are in use (the pool header's
    count), not counting the ctypes object that reads it, which may land there too."""
    reader = ctypes.c_uint.from_address(id(obj) & _POOL_MASK)  # no int of ours alive as it reads
    return reader.value - (id(reader) & _POOL_MASK == id(obj) & _POOL_MASK)


class _Pools:
    """Fills pymalloc's partly used pools before each window, and keeps the blocks that fill
    them for the rest of the process: each filling after the first has only the blocks
    freed since to take.

    A call's allocations cost more when they run past the end of a pool: it takes
    a fresh pool and gives it back before the next call, every call. Whether they
    do depends on how full each size class's pool was when the window began, which
    the whole history of the process decides: two runs of the same commit differed
    on an encode (all of it in ``_PyObject_Malloc`` and ``_PyObject_Free``; see
    docs/measurements/2026-12-02-instructions.md), and so did any change to the code.
    Once every partly used pool is full, each size class's next block comes from a
    fresh pool, so a window starts the same whatever came before. One block is taken
    in a fresh pool of each class (that is how the filling knows it has reached one:
    its pool holds one block), which keeps the pool from being given back between
    calls; those are freed after the window, so that the next window starts in fresh
    pools again.

    Everything the filling needs is made once, here: an int or a list made while
    filling would take blocks of classes already filled, and a list that grew would
    move glibc's heap by an amount the history decides.
    """

    def __init__(self) -> None:
        self._kept: list = [None] * FILLERS  # large enough to be mapped on its own
        self._slots = iter(tuple(range(FILLERS)))
        self._fresh: list = [None] * SIZE_CLASSES

    def fill(self) -> None:
        """Fill every partly used pool and take one block in a fresh pool of each size class.

        pymalloc takes blocks from one pool until it is full, so after reading how
        many blocks a pool holds this takes the rest of it unread, all but ``SPARE``:
        reading costs thousands of instructions."""
        kept, slots = self._kept, self._slots
        for size_class, make in enumerate(_block_makers()):
            per_pool = (POOL_SIZE - POOL_HEADER) // (16 * (size_class + 1))
            for slot in slots:
                block = make()
                in_use = _blocks_in_use(block)
                if in_use == 1:
                    self._fresh[size_class] = block
                    break
                kept[slot] = block
                rest = islice(slots, max(per_pool - in_use - SPARE, 0))
                del in_use  # an int of 257 or more takes a block too, as would one kept to the end
                for slot in rest:
                    kept[slot] = make()
                del rest
            else:
                raise RuntimeError(f"pymalloc's pools took more than {FILLERS} blocks in this process")

    def free_fresh(self) -> None:
        """Give back the block taken in each fresh pool (after a window)."""
        for size_class in range(SIZE_CLASSES):
            self._fresh[size_class] = None


@cache
def _pools() -> _Pools:
    """This process's ``_Pools``, made before its first window (``per_call``)."""
    return _Pools()


def window(estimate: float, size: int = WINDOW_INSTRUCTIONS) -> int:
    """Calls per window for an operation of about ``estimate`` instructions: about ``size``
    in all, and whole ``PERIOD``s of calls unless a period alone would hold more than
    ``PERIOD_LIMIT`` windows' worth (in-band pickle of a large payload)."""
    calls = max(1, math.ceil(size / max(estimate, 1.0)))
    if estimate * PERIOD > PERIOD_LIMIT * size:
        return calls
    return math.ceil(calls / PERIOD) * PERIOD


def _difference(fn: Callable[[], object], calls: int) -> int:
    return count(fn, 2 * calls) - count(fn, calls)


@contextlib.contextmanager
def uncounted() -> Iterator[None]:
    """Leave what runs inside out of the counts (callgrind's collection off, then on again):
    a counted function's own setting-up of each call, such as the other side of a link making
    the message it receives. Its cost of switching is what ``per_call``'s ``empty`` subtracts
    when that is ``skip_nothing``."""
    request = _client_request()
    request(_TOGGLE_COLLECT)
    try:
        yield
    finally:
        request(_TOGGLE_COLLECT)


def skip_nothing() -> None:
    """A call that does nothing but leave nothing out of the counts: ``per_call``'s ``empty``
    for functions that use ``uncounted`` once per call."""
    with uncounted():
        pass


def per_call(
    fns: dict[str, Callable[[], object]],
    empty: Callable[[], object] | None = None,
    size: int = WINDOW_INSTRUCTIONS,
) -> tuple[dict[str, float], dict]:
    """Instructions per call of each function (see the module's docstring), and the calls per window.

    ``empty``: the call whose count is subtracted from each function's, the loop's
    bookkeeping and whatever else every call does that is not the function's work
    (``skip_nothing`` for functions that leave a part of each call uncounted; by default
    a call that does nothing). ``size``: the instructions a window holds (``window``).
    Switches instrumentation on in this process for good: call it in a process
    of its own (a case's forked child) that measures nothing else afterwards.
    The counting runs in a new thread, for the fresh glibc arena that gives it.
    """
    reason = unavailable()
    if reason:
        raise RuntimeError(reason)
    counts, counted = _in_new_thread(lambda: _per_call(fns, empty, size))
    _keep_windows(list(fns), counted["calls_per_window"])
    return counts, counted


PROFILE_PREFIX = "profile."  # ``profile.PID.NAME-CALLS.callgrind``: a window kept (``_keep_windows``)
PROFILE_SUFFIX = ".callgrind"


def _keep_windows(names: Sequence[str], windows: dict[str, int]) -> None:
    """Name the dumps of this process's measured windows, once counting is over: each counted
    function's two windows (N and 2N calls) become ``profile.PID.NAME-CALLS.callgrind`` in the
    dump folder, for ``serbench.runner.measurer`` to keep in the run's output folder (per case,
    ``keep_profiles``); the one-call estimates and the empty loop's windows are removed.

    The dumps are told apart by their order, which ``_per_call``'s is: per function one
    estimate, the empty loop's 2N and N the first time N is seen, then the function's 2N and
    N. Anything else (a failed count) keeps nothing: the counts are what matter."""
    pid = os.getpid()
    dumps = sorted(_dumps.glob(f"window.callgrind.{pid}.*"), key=lambda p: int(p.suffix[1:]))
    kept: dict[Path, str] = {}
    order = iter(dumps)
    seen: set[int] = set()
    try:
        for name in names:
            calls = windows[name]
            next(order)  # the estimate
            if calls not in seen:
                seen.add(calls)
                next(order), next(order)  # the empty loop's
            kept[next(order)] = f"{name}-{2 * calls}"
            kept[next(order)] = f"{name}-{calls}"
        if next(order, None) is not None:
            kept = {}
    except (StopIteration, KeyError):
        kept = {}
    for dump in dumps:
        with contextlib.suppress(OSError):
            if dump in kept:
                dump.rename(dump.with_name(f"{PROFILE_PREFIX}{pid}.{kept[dump]}{PROFILE_SUFFIX}"))
            else:
                dump.unlink()


def keep_profiles(dumps: Path, into: Path) -> list[Path]:
    """Move the windows that ``_keep_windows`` named in ``dumps`` into the folder ``into`` as
    ``NAME-CALLS.callgrind`` (callgrind's format: ``callgrind_annotate``, KCachegrind); the
    files moved. Called between cases, so that every named window belongs to the case just
    counted."""
    moved = []
    for path in sorted(dumps.glob(f"{PROFILE_PREFIX}*{PROFILE_SUFFIX}")):
        into.mkdir(parents=True, exist_ok=True)
        target = into / path.name[len(PROFILE_PREFIX) :].split(".", 1)[1]
        shutil.move(path, target)
        moved.append(target)
    for path in dumps.glob("window.callgrind.*"):
        path.unlink(missing_ok=True)
    return moved


def _glibc_arenas() -> int:
    """How many malloc arenas glibc has in this process (the ``<heap>`` entries of ``malloc_info``)."""
    libc = ctypes.CDLL(None)
    libc.fdopen.restype = ctypes.c_void_p
    libc.malloc_info.argtypes, libc.fclose.argtypes = [ctypes.c_int, ctypes.c_void_p], [ctypes.c_void_p]
    with tempfile.TemporaryFile() as report:
        stream = libc.fdopen(os.dup(report.fileno()), b"w")
        libc.malloc_info(0, ctypes.c_void_p(stream))
        libc.fclose(ctypes.c_void_p(stream))
        report.seek(0)
        return report.read().count(b"<heap nr=")


def _in_new_thread(fn: Callable[[], tuple]) -> tuple:
    """``fn()`` run in a new thread with a malloc arena of its own, fresh; its exception re-raised here.

    glibc gives a new thread an arena left by a thread that ended (after a fork: every
    thread of the parent but the one that forked, torch's among them) before it makes a
    new one, so placeholder threads take those first and wait until ``fn`` is done.
    The threads are started one at a time and signal through locks made beforehand:
    ``threading``'s Event and Barrier allocate a lock for every wait that blocks, which
    the threads' timing decides, and those objects moved the counts
    (docs/measurements/2026-12-02-instructions.md).
    """
    # As many placeholders every time (the objects they allocate are the same), enough for the
    # arenas left: how many the parent's threads made depends on timing.
    spare = max(HOLDERS, _glibc_arenas() - 1)
    signals = [_thread.allocate_lock() for _ in range(spare + 1)]
    release = _thread.allocate_lock()
    for lock in (*signals, release):
        lock.acquire()
    outcome: dict[str, tuple | BaseException] = {}

    def hold(lock: _thread.LockType) -> None:
        bytearray(4096)  # beyond pymalloc: this thread's first malloc takes a free arena
        lock.release()  # holding its arena
        release.acquire()
        release.release()  # for the next placeholder
        lock.release()  # done

    def measure(lock: _thread.LockType) -> None:
        try:
            outcome["value"] = fn()
        except BaseException as exc:  # re-raised in the calling thread
            outcome["error"] = exc
        finally:
            lock.release()

    for lock in signals[:-1]:
        _thread.start_new_thread(hold, (lock,))
        lock.acquire()
    _thread.start_new_thread(measure, (signals[-1],))
    signals[-1].acquire()
    release.release()
    for lock in signals[:-1]:
        lock.acquire()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def _per_call(
    fns: dict[str, Callable[[], object]], empty: Callable[[], object] | None, size: int
) -> tuple[dict[str, float], dict]:
    _pools()  # made before the first window, as every window finds it
    _client_request()(_START_INSTRUMENTATION)
    gc.freeze()
    noop: dict[int, int] = {}
    counts, windows = {}, {}
    for name, fn in fns.items():
        fn()  # first-call work (imports, caches, specialisation) stays out of the windows
        calls = windows[name] = window(count(fn, 1), size)
        if calls not in noop:
            noop[calls] = _difference(empty or (lambda: None), calls)
        counts[name] = (_difference(fn, calls) - noop[calls]) / calls
    return counts, {"calls_per_window": windows}


PROFILE_FOLDER = "profiles"  # under a counting run's output folder: one folder per case


def profile_folder(out: Path, case: Case) -> Path:
    """Where a counting run into ``out`` keeps ``case``'s profiles: ``out/profiles/`` and the
    case's label made a file name (``micro_msgspec-frombuffer_x_text-sonnet``)."""
    name = re.sub(r"[^A-Za-z0-9.=@+-]+", "_", case.label.replace("×", "x")).strip("_")
    return out / PROFILE_FOLDER / name
