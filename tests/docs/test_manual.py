"""Every page of the manual states only what the code says (issue 64): its ``serbench …``
commands parse, its backticked flags, metrics, Python names and paths exist; and the checks
catch a wrong flag, metric and name planted in a copy of a page."""

from __future__ import annotations

from pathlib import Path

import pytest
from manual_checks import failures, manual_pages
from suite_paths import ROOT


@pytest.mark.parametrize("page", manual_pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_page_claims_resolve(page: Path) -> None:
    wrong = failures(page)
    assert not wrong, f"{page.relative_to(ROOT)}:\n" + "\n".join(wrong)


PLANTED = """
Run it with `--profile full`, read `ttft_p95_s`, or `serbench.environment.COMPARABLE_KEYS`;
`compare.ranking` moved, `tests/nowhere.py` never was.

```bash
serbench run --backends pickle --frobnicate
serbench nosuchcommand
```

```python
from serbench.present.text import render
```
"""


def test_planted_errors_fail(tmp_path: Path) -> None:
    """A copy of the quickstart with a wrong flag, metric, dotted name, short name, path, two
    wrong commands and a wrong import added: each is found, and nothing the page already said."""
    page = tmp_path / "quickstart.md"
    page.write_text((ROOT / "docs" / "quickstart.md").read_text() + PLANTED)
    found = "\n".join(failures(page))
    for planted in (
        "--profile",
        "ttft_p95_s",
        "serbench.environment.COMPARABLE_KEYS",
        "compare.ranking",
        "tests/nowhere.py",
        "--frobnicate",
        "nosuchcommand",
        "serbench.present.text.render",
    ):
        assert planted in found, f"{planted} not caught:\n{found}"
    assert len(failures(page)) == 8, found
