"""The command line answers without the heavy imports it does not need (issue 33).

torch's import alone takes 1.5-2 s, matplotlib's about 0.5 s: every ``--help``, ``compare`` and
``report --format`` run without them, ``list`` (which builds every backend) without matplotlib.
Each command runs in a fresh interpreter (``python -c``: the suite's own process has imported
both long ago), and the test reads ``sys.modules`` after it: machine-independent, unlike a time.
torch counts as imported once its extension (``torch._C``) is: modules below the commands name
it with ``serbench.runtime.lazy.torch``, a stand-in that imports it on first use, out of the cyclic
collector's way (``lazy.lasting``).
"""

from __future__ import annotations

import gc
from pathlib import Path

import pytest
from fresh_interpreter import printed_json
from suite_paths import FIXTURES

from serbench.cli import main
from serbench.cli.listing import WIDTH
from serbench.runtime import lazy

RESULTS = str(FIXTURES / "results-schema-1.json")

# Run one command line with its output swallowed; print its exit code and which of the heavy
# modules it imported.
COMMAND = """
import contextlib, io, json, sys
from serbench.cli import main
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    try:
        code = main({argv!r})
    except SystemExit as exc:  # --help
        code = exc.code
loaded = {{"torch": "torch._C", "matplotlib": "matplotlib"}}
print(json.dumps({{"code": code, "loaded": sorted(m for m, real in loaded.items() if real in sys.modules)}}))
"""

# Any command line builds the whole parser, every command's flags: ``--help`` stands for each
# command's (``run --help`` as well, the one with the scenarios' flags); the others add what the
# command itself runs. ``list`` describes every backend and workload from what they declare.
LIGHT = [
    ["list"],
    ["--help"],
    ["run", "--help"],
    ["compare", RESULTS, RESULTS],
    ["report", RESULTS, "--format", "csv"],
    ["report", RESULTS, "--format", "json"],
    ["report", RESULTS, "--format", "md"],
    ["report", RESULTS, "--format", "text"],
]


def _loaded(argv: list[str]) -> list[str]:
    ran = printed_json(COMMAND.format(argv=argv))
    assert ran["code"] == 0, f"serbench {' '.join(argv)} exited {ran['code']}"
    return ran["loaded"]


@pytest.mark.parametrize("argv", LIGHT, ids=lambda argv: " ".join(Path(a).name for a in argv))
def test_neither_torch_nor_matplotlib(argv: list[str]) -> None:
    assert _loaded(argv) == []  # one interpreter a command line: each costs a second of CPU


def test_registries_and_transports_import_no_torch() -> None:
    """The cuts below the scenarios: naming backends and workloads, building a workload (its
    payload size is arithmetic), the ZeroMQ plumbing and process ending import no torch; making
    an image request does."""
    code = (
        "import json, sys\n"
        "import serbench.runtime.isolation, serbench.serializers\n"
        "import serbench.links.transport, serbench.workloads\n"
        "from serbench.serializers import BUILTINS\n"
        "from serbench.workloads import available_workloads\n"
        "assert BUILTINS and available_workloads()\n"
        "print(json.dumps('torch._C' in sys.modules))"
    )
    assert printed_json(code) is False
    building = "import json, sys\nfrom serbench.workloads import get_workload\nw = get_workload('images-4')\n"
    assert printed_json(building + "print(json.dumps(['torch._C' in sys.modules, w.payload_bytes()]))") == [
        False,
        4 * 3 * 896 * 896 * 4,
    ]
    assert printed_json(building + "w.request(0)\nprint(json.dumps('torch._C' in sys.modules))") is True


def test_torch_imports_with_the_collector_paused_and_its_objects_frozen() -> None:
    """The stand-in imports torch without a full pass of the cyclic collector (two of them
    otherwise, a tenth of the import's CPU), freezes what it made and leaves the collector on."""
    code = (
        "import gc, json, sys\n"
        "from serbench.runtime import lazy\n"
        "passes = []\n"
        "gc.callbacks.append(lambda phase, info: phase == 'start' and passes.append(info['generation']))\n"
        "torch = lazy.torch('__main__')\n"
        "torch.zeros  # its first attribute access imports it\n"
        "print(json.dumps(['torch._C' in sys.modules, 2 in passes, gc.isenabled(), gc.get_freeze_count()]))"
    )
    imported, full_pass, enabled, frozen = printed_json(code)
    assert [imported, full_pass, enabled] == [True, False, True] and frozen > 100_000


@pytest.mark.parametrize("enabled", [True, False])
def test_the_collector_is_as_it_was_after_an_import_even_one_that_failed(enabled: bool) -> None:
    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    try:
        frozen = gc.get_freeze_count()
        with pytest.raises(ImportError), lazy.lasting():
            assert not gc.isenabled()
            raise ImportError("no such library here")
        assert gc.isenabled() == enabled and gc.get_freeze_count() == frozen  # nothing frozen
    finally:
        (gc.enable if was else gc.disable)()


# A counting worker's path for text cases (docs/instructions.md): preloading, building the backend,
# measuring a case in a forked child with its verification. Under valgrind torch's import alone
# costs 20 s, so none of it may import torch; image cases do, in the preload, before any fork.
COUNTED_TEXT = """
import json, sys
from serbench.runner import matrix as runner
from serbench.model.profiles import PROFILES
from serbench.runner.matrix import Plan
plan = Plan([BACKEND], [WORKLOAD], ["micro"])
runner._preload(plan, checks_backends=False)
preloaded = "torch._C" in sys.modules
outcome = runner.run_case(plan.cases()[0], PROFILES["quick"])
print(json.dumps([preloaded, "torch._C" in sys.modules, sorted(outcome.metrics)[:1]]))
"""


@pytest.mark.parametrize(
    ("backend", "workload", "imports"),
    [
        ("msgspec-frombuffer", "text-sonnet", False),
        ("pickle-oob", "text-sonnet", False),  # its reducer sees every object, and no tensor
        ("msgspec-frombuffer", "images-4", True),
    ],
)
def test_a_text_case_measures_without_importing_torch(backend: str, workload: str, imports: bool) -> None:
    script = COUNTED_TEXT.replace("BACKEND", repr(backend)).replace("WORKLOAD", repr(workload))
    preloaded, loaded, metrics = printed_json(script)
    assert metrics and preloaded is imports and loaded is imports


def test_list_fits_100_columns(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any(line.startswith("images-4 ") for line in lines)  # the listing is there
    assert any(line.startswith(" " * 10) for line in lines)  # and a long description was wrapped
    too_wide = [line for line in lines if len(line) > WIDTH]
    assert not too_wide, too_wide
