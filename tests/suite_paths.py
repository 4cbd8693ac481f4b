"""Where the suite's files are, for a test in any folder of tests/."""

from pathlib import Path

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
FIXTURES = TESTS / "fixtures"
BACKENDS = TESTS / "backends"  # backends written outside the package, named by dotted path
