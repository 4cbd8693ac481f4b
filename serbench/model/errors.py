"""serbench's errors and exit codes, in one place.

Modules raise the error that names what went wrong; ``serbench.cli``
catches ``SerbenchError`` (and ``specs.SpecError``, which the lower layers
raise) and turns it into one line on stderr and its exit code. Nothing below
the commands prints an error or exits.
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
    """A step of the gate that could not run: a bad ref, git failing, a worker that stopped."""


class VerificationError(SerbenchError):
    """A backend's round trip of the very messages a case would time differs from them: the case
    is not timed. Raised in the case's own process before timing; the message names the first
    difference."""
