"""Programmatic dependent launch (PDL) for the decode step's Triton kernels, where it pays.

A frame step is ~1000 dependent kernels of a few us each, so the time from one kernel's last block
to the next kernel's first one is a real share of it. A kernel launched with `launch_pdl=True` is
scheduled while the kernel ahead of it in the stream is still finishing; its programs then wait
(`wait_for_prior_grid`, PTX griddepcontrol.wait) until that kernel has completed and its writes are
visible, before they touch memory. benchmarks/bench_pdl.py, H100, in a CUDA graph: a boundary
between two of our Triton kernels 1.43 -> 0.90 us; a cuBLAS GEMM -> Triton one 0.18 us shorter.

Where: only in a `scope(True)`, which the talker opens around capturing its decode graphs of 1-2
rows. There the step's GEMMs are our small-M Triton kernel (kernels/small_m_linear.py), so nearly
every boundary is ours: the batch-1 step went 4.24 -> 4.09-4.14 ms (H100). Where the GEMMs are
cuBLAS, PDL made the step slower at every batch measured (2-256: +1 to +4%, the kernel time
unchanged, the gaps longer), so it stays off there. Off by default everywhere else too.

Rule for a kernel that takes part: `wait_for_prior_grid` is its FIRST statement (before it reads
its index tensors or writes anything), under its `PDL: tl.constexpr` flag, and its launcher passes
`**pdl_launch(device)` (the flag and, when on, launch_pdl). Waiting first gives up overlapping
a prologue, but then nothing a kernel reads or writes can race with the kernel before it, whoever
launched that one (cuBLAS, another PDL kernel, a copy). The wait is transitive: the prior kernel
completed only after its own wait passed.

`use_pdl` also needs a CUDA device of compute capability >= 9 (Hopper, where griddepcontrol
exists), no Triton interpreter, and QWEN3_TTS_PDL not "0" (A/B runs, or a driver that rejects it).
"""
from __future__ import annotations

import contextlib
import functools
import os
import threading

import torch
import triton

ENV = "QWEN3_TTS_PDL"
MIN_CAPABILITY = (9, 0)

try:   # triton >= 3.3 ships the griddepcontrol wrappers
    from triton.language.extra.cuda import gdc_wait as _gdc_wait
    HAVE_GDC = True
except ImportError:  # pragma: no cover - older triton: never launched with PDL, the wait is never traced
    _gdc_wait = None
    HAVE_GDC = False


@triton.jit
def wait_for_prior_grid():
    """Block until the kernel ahead in the stream has completed and its writes are visible."""
    _gdc_wait()


_state = threading.local()   # .allowed: inside a scope(True) on this thread


@contextlib.contextmanager
def scope(allowed: bool):
    """Launches on this thread inside the block are PDL launches where `use_pdl` allows (nested
    scopes restore the outer setting)."""
    outer = getattr(_state, "allowed", False)
    _state.allowed = allowed
    try:
        yield
    finally:
        _state.allowed = outer


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


@functools.lru_cache(maxsize=None)
def _capable(device_index: int) -> bool:
    return torch.cuda.get_device_capability(device_index) >= MIN_CAPABILITY


def use_pdl(device: torch.device) -> bool:
    """True when kernels on `device` should be PDL launches now (the env is read per call: A/B runs)."""
    if not getattr(_state, "allowed", False) or device.type != "cuda" or not HAVE_GDC or _interpreting():
        return False
    if os.environ.get(ENV, "1") == "0":
        return False
    return _capable(device.index if device.index is not None else torch.cuda.current_device())


def pdl_launch(device: torch.device) -> dict:
    """Keyword arguments of a launch on `device`: the kernel's PDL flag, and launch_pdl when it is on
    (only then: the interpreter's launcher has no such option)."""
    return {"PDL": True, "launch_pdl": True} if use_pdl(device) else {"PDL": False}


__all__ = ["ENV", "HAVE_GDC", "pdl_launch", "scope", "use_pdl", "wait_for_prior_grid"]
