"""benchmarks/profile_talker.py's kernel table (the GPU run itself needs CUDA graphs): device kernels
by name, ms and launches per profiled call, largest first; CPU-side events and empty ones ignored."""
from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import profile_talker  # noqa: E402

CUDA, CPU = torch.autograd.DeviceType.CUDA, torch.autograd.DeviceType.CPU


def _event(name, us, device_type=CUDA):
    return SimpleNamespace(name=name, device_time_total=us, device_type=device_type)


def test_kernel_table_sums_per_call_and_sorts():
    prof = SimpleNamespace(events=lambda: [
        _event("gemm", 300.0), _event("gemm", 100.0), _event("attn", 500.0), _event("norm", 20.0),
        _event("aten::mm", 900.0, CPU),    # the CPU op that launched a kernel: not a kernel
        _event("memset", 0.0),             # no device time recorded
    ])
    rows = profile_talker.kernel_table(prof, num_calls=2)
    assert [r["kernel"] for r in rows] == ["attn", "gemm", "norm"]
    assert rows[0] == {"kernel": "attn", "ms_per_call": 0.25, "launches_per_call": 0.5}
    assert rows[1] == {"kernel": "gemm", "ms_per_call": 0.2, "launches_per_call": 1.0}
