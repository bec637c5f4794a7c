"""`python -m launcher` for a benchmark: started from a tree (this one, or an A/B base) and waited
for through its ready file, with a deadline."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def launch_stack(launcher_args: list[str], work: Path, stack_dir: Path = ROOT,
                 timeout_s: float = 900.0) -> tuple[subprocess.Popen, dict]:
    """(the launcher process, its ready file's JSON) once the stack is SERVING; RuntimeError naming
    the work dir if it exits or misses the deadline."""
    ready = work / "ready.json"
    cmd = [sys.executable, "-m", "launcher", "--work-dir", str(work), "--ready-file", str(ready),
           "--health-timeout-s", str(int(timeout_s)), *launcher_args]
    proc = subprocess.Popen(cmd, cwd=stack_dir, env=dict(os.environ, PYTHONPATH=str(stack_dir)))
    deadline = time.monotonic() + timeout_s
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"stack did not start; see {work}")
        time.sleep(0.2)
    return proc, json.loads(ready.read_text())
