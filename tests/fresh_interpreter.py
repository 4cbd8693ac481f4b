"""Python code run in a fresh interpreter, for tests whose subject is what a process inherits
(its heap, glibc's settings): a child of the pytest process would inherit the suite's."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any


def printed_json(code: str, timeout_s: float = 300) -> Any:
    """The JSON value that ``code``, run by ``python -c``, prints on its last line of output."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout_s)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])
