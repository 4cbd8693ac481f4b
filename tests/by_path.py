"""A repository file that is not a package module (a script, asv's suite), imported by its path."""

from __future__ import annotations

import importlib.util
from types import ModuleType

from suite_paths import ROOT


def load(relative: str, name: str) -> ModuleType:
    """``ROOT / relative`` as the module ``name``: by path, since scripts/ is no package and
    tests/benchmarks (the pytest-benchmark suite) shadows the name ``benchmarks``."""
    spec = importlib.util.spec_from_file_location(name, ROOT / relative)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
