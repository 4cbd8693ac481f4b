"""Where the suite's files are, for a test in any folder of tests/."""

import subprocess
from pathlib import Path

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
FIXTURES = TESTS / "fixtures"
BACKENDS = TESTS / "backends"  # backends written outside the package, named by dotted path


def manual_files() -> list[Path]:
    """README.md and every file under docs/ that git tracks or would track (untracked but not
    ignored: a page written and not yet committed counts too)."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "README.md", "docs"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return sorted({ROOT / name for name in listed if (ROOT / name).is_file()})
