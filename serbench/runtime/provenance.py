"""Which code of a library a process runs: its installed version, or the checkout it comes from.

A results file names the versions behind its numbers (``environment``), and the
vLLM plugin names the vLLM it measures. Neither may simply ask the package
metadata: the gate runs a side with a checkout ahead on ``PYTHONPATH``
(``serbench gate --base-path``), and then the code imported is not the
distribution installed. ``version`` finds the module without importing it and
says which of the two it is.
"""

from __future__ import annotations

import json
import subprocess
from importlib import metadata
from importlib.util import find_spec
from pathlib import Path
from urllib.parse import urlparse
from urllib.request import url2pathname

GIT_TIMEOUT_S = 10


def git_commit(folder: Path) -> str | None:
    """The commit checked out in the git working tree at ``folder`` (``-dirty`` if tracked files
    changed), or None where git cannot say."""
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=folder,
            capture_output=True,
            text=True,
            check=True,
            timeout=GIT_TIMEOUT_S,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=folder,
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_S,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{sha}-dirty" if dirty else sha


def checkout_commit(package: Path) -> str | None:
    """The commit of the checkout whose top holds ``package`` (as ``vllm/`` or ``serbench/`` sit
    at theirs); None for a package elsewhere, e.g. in site-packages (even inside a working tree)."""
    top = package.parent
    return git_commit(top) if (top / ".git").exists() else None


def _installed_at(dist: metadata.Distribution, name: str) -> Path:
    """Where ``dist`` put the package folder or module file ``name``: in the source tree of an
    editable install, else in site-packages."""
    direct = json.loads(dist.read_text("direct_url.json") or "{}")
    url = urlparse(direct.get("url", ""))
    if direct.get("dir_info", {}).get("editable") and url.scheme == "file":
        return Path(url2pathname(url.path)) / name
    return Path(str(dist.locate_file(name)))


def version(dist: str, module: str | None = None) -> str | None:
    """The version of distribution ``dist`` as ``import module`` (default: the same name) finds it.

    Imported from where ``dist`` installed it: the installed version, with ``+g<commit>`` for an
    editable install from a git checkout. Imported from another folder (a checkout ahead on
    ``PYTHONPATH``): ``from <folder>``, with ``@ <commit>`` where it is a git checkout — the
    installed version would name code that does not run. None when the module is not found.
    """
    try:
        spec = find_spec(module or dist)  # a top-level module: found, not imported
    except ValueError:  # imported without a spec (``__main__``-like): nothing says where from
        spec = None
    try:
        installed = metadata.distribution(dist)
    except metadata.PackageNotFoundError:
        installed = None
    if spec is None or spec.origin is None:  # not there, or a namespace package: no file says where
        return installed.version if installed and spec else None
    origin = Path(spec.origin)
    # a package's folder (resolved, not its files: a tree of links is a copy of its own), or the module's file
    where = origin.parent.resolve() if spec.submodule_search_locations is not None else origin.resolve()
    commit = checkout_commit(where)
    if installed is None or _installed_at(installed, where.name).resolve() != where:
        return f"from {where.parent}" + (f" @ {commit[:12]}" if commit else "")
    number = installed.version
    return f"{number}+g{commit[:12]}" if commit and commit[:12] not in number else number
