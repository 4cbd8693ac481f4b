"""Where each side's serbench code comes from: a git worktree of the base, or this serbench.

The base revision is checked out in a temporary git worktree, removed
afterwards; head is the working tree itself. Without a base revision both
sides run this serbench through a folder that links only its package
(``this_serbench``), so that what differs between them is their runtimes: the
package gated, a vLLM checkout or venv.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import serbench
from serbench.model.errors import GateError


def _git(repo: Path, *args: str) -> str:
    proc = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True)
    if proc.returncode:
        last = (proc.stderr.strip().splitlines() or ["failed"])[-1]
        raise GateError(f"git {' '.join(args)}: {last}")
    return proc.stdout.strip()


def repository_root(start: Path) -> Path:
    """The top of the git working tree that contains ``start``."""
    return Path(_git(start, "rev-parse", "--show-toplevel"))


@contextmanager
def worktree(repo: Path, ref: str) -> Iterator[tuple[Path, str]]:
    """A detached checkout of ``ref`` in a temporary folder, and its commit; removed on exit."""
    try:
        commit = _git(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    except GateError:
        raise GateError(f"{ref!r} is not a commit in {repo} (shallow clone? git fetch --unshallow)") from None
    folder = Path(tempfile.mkdtemp(prefix="serbench-gate-"))
    path = folder / "base"
    _git(repo, "worktree", "add", "--detach", "--quiet", str(path), commit)
    try:
        yield path, commit
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(path)], cwd=repo, capture_output=True)
        shutil.rmtree(folder, ignore_errors=True)
        subprocess.run(["git", "worktree", "prune"], cwd=repo, capture_output=True)


@contextmanager
def this_serbench() -> Iterator[Path]:
    """A temporary folder holding only this process's ``serbench`` package (a link to it): put on
    another interpreter's path it adds serbench and nothing else of this environment."""
    folder = Path(tempfile.mkdtemp(prefix="serbench-gate-code-"))
    try:
        (folder / "serbench").symlink_to(Path(serbench.__file__).resolve().parent, target_is_directory=True)
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@contextmanager
def serbench_code(
    repo: Path | None, base_ref: str | None, log: Callable[[str], None]
) -> Iterator[tuple[Path, Path]]:
    """The folders whose serbench base and head run: ``base_ref`` checked out beside the working
    tree of ``repo``; without a ref, this serbench on both sides (another package's change is
    gated, by the sides' runtimes)."""
    if base_ref is None:
        with this_serbench() as code:
            yield code, code
        return
    if repo is None:
        raise GateError("--base needs a git repository")
    with worktree(repo, base_ref) as (base_code, commit):
        log(f"gate: base {base_ref} ({commit[:12]}) against the working tree of {repo}")
        yield base_code, repo
