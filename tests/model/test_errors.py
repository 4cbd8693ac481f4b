"""One error hierarchy: every exception serbench defines is a ``SerbenchError``, so the command line
reports it in one line with its exit code, unless it is on ``OUTSIDE`` with the reason it must not be."""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path

import serbench
from serbench.model import errors
from serbench.model.errors import EXIT_USAGE, SerbenchError, TransportTimeout

OUTSIDE = {
    # raised by third-party backends' decoders too: the plugin API (serbench.serializers) fixes its base
    "serbench.serializers.base.DecodeError": ValueError,
    # exported by serbench.serializers too; argparse's types turn a ValueError into a usage line
    "serbench.model.specs.SpecError": ValueError,
    # SIGTERM on Ctrl-C's cleanup path: no ``except Exception`` may swallow it
    "serbench.model.errors.Terminated": KeyboardInterrupt,
    # vLLM not importable: a missing optional dependency, an ImportError as loaders expect
    "serbench.plugins.vllm.adapter.Missing": ImportError,
    # SGLang not importable: the same, for the SGLang plugin
    "serbench.plugins.sglang.adapter.Missing": ImportError,
    # a frame whose tensors never came over vLLM's tensor IPC queue: a frame that does not decode
    "serbench.plugins.vllm.tensor_ipc.TensorsLost": ValueError,
}


def defined_exceptions() -> list[type[BaseException]]:
    """Every exception class defined in a module under ``serbench/``."""
    root = Path(serbench.__file__).parent
    found = []
    for path in sorted(root.rglob("*.py")):
        if path.name == "__main__.py":
            continue
        parts = path.relative_to(root.parent).with_suffix("").parts
        module = importlib.import_module(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
        found += [
            value
            for value in vars(module).values()
            if inspect.isclass(value)
            and issubclass(value, BaseException)
            and value.__module__ == module.__name__
        ]
    return found


def test_every_serbench_exception_is_a_serbench_error_or_says_why_not() -> None:
    outside = {
        f"{kind.__module__}.{kind.__qualname__}": kind
        for kind in defined_exceptions()
        if not issubclass(kind, SerbenchError)
    }
    assert set(outside) == set(OUTSIDE)
    for name, kind in outside.items():
        assert issubclass(kind, OUTSIDE[name]), name


def test_every_kind_has_an_exit_code() -> None:
    kinds = [kind for kind in defined_exceptions() if issubclass(kind, SerbenchError)]
    assert {kind.__name__ for kind in kinds} >= {
        "CaseFailed",
        "MeasurementFailed",
        "ShmError",
        "CacheError",
        "TransportTimeout",
        "EngineError",
        "IntegrityError",
        "BroadcastError",
    }
    for kind in kinds:
        assert isinstance(kind.exit_code, int) and kind.exit_code > 0, kind


def test_a_case_error_reaching_the_command_line_exits_as_a_step_that_could_not_run() -> None:
    assert errors.EngineError.exit_code == EXIT_USAGE
    # a timeout stays one to code that waits with the standard library's conventions
    assert issubclass(TransportTimeout, TimeoutError)
