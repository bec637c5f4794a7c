"""The commit a benchmark ran at, for its result file; "unknown" outside a git checkout.

Benchmarks and their tests also run from an unpacked source tree or an image without .git (or
without git at all): that must not fail a run nor record an empty or garbled commit. A tree copied
to another machine states its commit in QWEN3_TTS_COMMIT (its copied .git may be stale).
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
UNKNOWN = "unknown"
_GIT_TIMEOUT_S = 10.0


def _git(args: list[str], root: Path) -> str | None:
    """git's stdout, stripped; None when git is missing, fails (no checkout) or hangs."""
    try:
        done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=_GIT_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def git_commit(root: Path = ROOT, *, short: bool = False, mark_dirty: bool = False) -> str:
    """HEAD's hash (abbreviated if `short`), with "-dirty" appended when asked and the tree has
    uncommitted changes; UNKNOWN when `root` is not inside a git checkout."""
    override = os.environ.get("QWEN3_TTS_COMMIT", "").strip()   # a copied tree (the GPU host) whose .git is stale
    if override:
        return override[:12] if short else override
    commit = _git(["rev-parse", *(["--short"] if short else []), "HEAD"], root)
    if not commit:
        return UNKNOWN
    if mark_dirty and _git(["status", "--porcelain"], root):
        commit += "-dirty"
    return commit
