"""benchmarks/run_gpu_suite.sh runs only on a GPU machine, so its command lines are checked here:
the script parses, and every flag it passes to a benchmark, launcher or checkpoint tool is one
that tool's --help documents (a renamed flag would otherwise surface only during scarce GPU time)."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "run_gpu_suite.sh"
pytestmark = pytest.mark.timeout(180)


def invocations() -> dict[tuple[str, ...], set[str]]:
    """(python argv prefix) -> long flags passed to it, joined across line continuations."""
    text = SCRIPT.read_text().replace("\\\n", " ")
    found: dict[tuple[str, ...], set[str]] = {}
    for match in re.finditer(r"python3 (-m [\w.]+|benchmarks/\w+\.py)([^\n|]*)", text):
        target = tuple(match.group(1).split())
        found.setdefault(target, set()).update(re.findall(r"(--[a-z][a-z0-9-]*)", match.group(2)))
    return found


def test_script_parses():
    assert subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True).returncode == 0


def test_every_flag_the_suite_passes_is_documented_by_its_tool():
    calls = invocations()
    assert ("benchmarks/bench_e2e.py",) in calls and ("-m", "launcher.compose_run") in calls
    for target, flags in calls.items():
        if target[0] == "-m" and target[1] == "pip":
            continue
        done = subprocess.run([sys.executable, *target, "--help"], cwd=ROOT, capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0, f"{target} --help failed:\n{done.stderr[-2000:]}"
        documented = set(re.findall(r"(--[a-z][a-z0-9-]*)", done.stdout))
        assert flags <= documented, f"{' '.join(target)}: {sorted(flags - documented)} not in its --help"
