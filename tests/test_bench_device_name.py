"""benchmarks/device_name.py: the one place a benchmark names the hardware it ran on."""
from __future__ import annotations

import platform
import subprocess

from benchmarks import device_name as names


def test_a_cpu_device_has_no_gpu_name_and_is_named_by_its_processor():
    assert names.gpu_name("cpu") is None
    assert names.device_name("cpu") == (platform.processor() or "cpu")


def test_a_stack_is_named_by_nvidia_smis_first_gpu_without_torch(monkeypatch):
    asked = []

    def fake_run(cmd, **kwargs):
        asked.append(cmd)
        return subprocess.CompletedProcess(cmd, 0, stdout="NVIDIA H200\nNVIDIA H200\n", stderr="")

    assert names.stack_gpu_name("cpu") == "cpu"
    monkeypatch.setattr(names.shutil, "which", lambda binary: "/usr/bin/nvidia-smi")
    monkeypatch.setattr(names.subprocess, "run", fake_run)
    assert names.stack_gpu_name("cuda") == "NVIDIA H200"
    assert asked == [["/usr/bin/nvidia-smi", "--query-gpu=name", "--format=csv,noheader"]]
    monkeypatch.setattr(names.shutil, "which", lambda binary: None)
    assert names.stack_gpu_name("cuda:1") == "unknown"
