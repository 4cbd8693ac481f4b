"""serbench's errors and exit codes, in one place.

Modules raise the error that names what went wrong; ``serbench.cli``
catches ``SerbenchError`` (and ``specs.SpecError``, which the lower layers
raise) and turns it into one line on stderr and its exit code. Nothing below
the commands prints an error or exits.

Every error serbench defines is a ``SerbenchError`` (tests/model/test_errors.py
holds the few exceptions and why). Those a case raises while it measures
(``EngineError``, ``ShmError``, ...) fail that case only: the run loop records
the message and goes on. One that reaches the command line exits 2, as a step
that could not run.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_REGRESSION = 1  # compare / gate: a real regression
EXIT_CHECK_FAILED = 1  # conformance: a backend failed a specimen
EXIT_USAGE = 2  # bad input: the command could not do what was asked
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT): partial results kept
EXIT_TERMINATED = 143  # SIGTERM (128 + SIGTERM): partial results kept


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C's KeyboardInterrupt would be, so that one cleanup path
    serves both while the exit code still follows the shell's convention (143, not 130)."""


class SerbenchError(Exception):
    """Base of every error the command line reports in one line (exit ``exit_code``)."""

    exit_code = EXIT_USAGE


class UsageError(SerbenchError):
    """A command-line value that cannot be used (a malformed threshold, a bad folder)."""


class ResultsError(SerbenchError):
    """A results file that cannot be used: unreadable, corrupt or of another schema."""


class GateError(SerbenchError):
    """A step of the gate that could not run: a bad ref, git failing, a measurer that stopped."""


class VerificationError(SerbenchError):
    """A backend's round trip of the very messages a case would time differs from them: the case
    is not timed. Raised in the case's own process before timing; the message names the first
    difference."""


class CaseFailed(SerbenchError):
    """A case's isolated process raised, crashed or timed out; the message says which."""


class MeasurementFailed(SerbenchError):
    """A side of an RSS measurement raised, died or timed out; the message says which side and why."""


class ShmError(SerbenchError):
    """A shared-memory region that cannot be made, mapped or used as asked; the message says why."""


class CacheError(SerbenchError):
    """A cache reference the engine cannot resolve, or a cache used as it cannot be."""


class TransportTimeout(SerbenchError, TimeoutError):
    """Nothing arrived on a socket within the time allowed (a ``TimeoutError`` too, as the standard
    library's socket timeouts are)."""


class EngineError(SerbenchError):
    """The engine process reported an error, refused the session, died or went silent."""


class IntegrityError(SerbenchError):
    """An engine output was wrong, duplicated, unexpected or never came."""


class BroadcastError(SerbenchError):
    """A fan-out worker died, hung or reported a wrong step; the message says which, in one line."""
