"""benchmarks/gpu_busy.py: the sampler reads nvidia-smi's lines (a stand-in script on PATH here),
skips what is not a number, stops its child on exit, and reports None without nvidia-smi."""
from __future__ import annotations

import os
import stat
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.gpu_busy import GpuBusySampler  # noqa: E402


def _fake_smi(tmp_path: Path, lines: list[str]) -> None:
    script = tmp_path / "nvidia-smi"
    body = "".join(f"echo '{line}'\n" for line in lines)
    script.write_text(f"#!/bin/sh\n{body}sleep 30\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)


def test_mean_of_numeric_samples(tmp_path, monkeypatch):
    _fake_smi(tmp_path, ["40", "[N/A]", "80", "60"])
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    started = time.monotonic()
    with GpuBusySampler() as busy:
        deadline = time.monotonic() + 10
        while len(busy.samples) < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
    assert time.monotonic() - started < 10, "exit must stop the child, not wait for it"
    assert busy.summary() == {"mean_pct": 60.0, "num_samples": 3}
    assert busy._proc.poll() is not None


def test_no_nvidia_smi_gives_none(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with GpuBusySampler() as busy:
        pass
    assert busy.summary() is None
