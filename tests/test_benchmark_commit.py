"""Benchmarks record the commit they ran at, and run outside a git checkout too (an unpacked
source tree, an image without .git): the commit is then "unknown", never empty or an error."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.commit import UNKNOWN, git_commit

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture()
def no_checkout(tmp_path, monkeypatch) -> Path:
    """A directory git cannot find a repository from (the ceiling stops the search upwards)."""
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    work = tmp_path / "src"
    work.mkdir()
    return work


@pytest.fixture(autouse=True)
def no_stated_commit(monkeypatch):
    monkeypatch.delenv("QWEN3_TTS_COMMIT", raising=False)


def test_commit_stated_by_the_environment_wins(no_checkout, monkeypatch):
    """A tree copied to a GPU host states its commit: the copy's .git may be stale or absent."""
    stated = "0123456789abcdef0123456789abcdef01234567"
    monkeypatch.setenv("QWEN3_TTS_COMMIT", stated)
    assert git_commit(no_checkout) == stated and git_commit(ROOT) == stated
    assert git_commit(ROOT, short=True) == stated[:12]


def test_commit_of_this_checkout():
    assert re.fullmatch(r"[0-9a-f]{40}", git_commit(ROOT))
    assert re.fullmatch(r"[0-9a-f]{4,39}", git_commit(ROOT, short=True))
    assert re.fullmatch(r"[0-9a-f]{40}(-dirty)?", git_commit(ROOT, mark_dirty=True))


def test_commit_outside_a_checkout_is_unknown(no_checkout):
    assert git_commit(no_checkout) == UNKNOWN
    assert git_commit(no_checkout, short=True, mark_dirty=True) == UNKNOWN


def test_commit_without_git_installed_is_unknown(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    assert git_commit(ROOT) == UNKNOWN


@pytest.mark.timeout(300)
def test_snakebeta_benchmark_smoke_runs_outside_a_checkout(no_checkout):
    # Only what the benchmark imports, copied where no .git is above it.
    for package in ("benchmarks", "kernels"):
        shutil.copytree(ROOT / package, no_checkout / package,
                        ignore=shutil.ignore_patterns("__pycache__", "results"))
    out_path = no_checkout / "snake_smoke.json"
    proc = subprocess.run([sys.executable, "benchmarks/bench_snakebeta.py", "--smoke", "--out", str(out_path)],
                          cwd=no_checkout, capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}"
    report = json.loads(out_path.read_text())
    assert report["commit"] == UNKNOWN and report["smoke"] and report["results"]
