"""What a benchmark's result file calls the hardware it ran on: one copy for every script.

In-process benchmarks (the model runs in this process) ask torch for their own device; benchmarks
that drive a stack in other processes ask nvidia-smi, so that naming the GPU neither imports torch
nor opens a CUDA context in the load generator.
"""
from __future__ import annotations

import platform
import shutil
import subprocess


def gpu_name(device="cuda") -> str | None:
    """torch's name of `device` (a torch.device or its string) when it is a CUDA device; None otherwise."""
    import torch

    device = torch.device(device)
    return torch.cuda.get_device_name(device) if device.type == "cuda" else None


def device_name(device="cuda") -> str:
    """The GPU's name for a CUDA `device`, else the CPU's ("cpu" where the platform does not say)."""
    return gpu_name(device) or platform.processor() or "cpu"


def stack_gpu_name(device: str) -> str:
    """What a stack started with `--device device` runs on: "cpu" for a CPU stack, else the host's
    first GPU as nvidia-smi names it ("unknown" without nvidia-smi or an answer)."""
    if not device.startswith("cuda"):
        return "cpu"
    binary = shutil.which("nvidia-smi")
    if binary is None:
        return "unknown"
    try:
        done = subprocess.run([binary, "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True,
                              timeout=30)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    names = done.stdout.strip().splitlines()
    return names[0].strip() if done.returncode == 0 and names else "unknown"
