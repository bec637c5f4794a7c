"""Inputs and bit comparisons shared by the silu_mul tests (tests/test_silu_mul.py, the reference and
the kernel; tests/test_silu_mul_routing.py, the op and the dispatcher)."""
from __future__ import annotations

import torch

OP_NAME = "qwen3tts.silu_mul"
INT_VIEW = {torch.bfloat16: torch.int16, torch.float16: torch.int16, torch.float32: torch.int32}
EPS = 1e-6  # the models' rms_norm_eps


def _make(shape, dtype, seed):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=gen) * 3.0).to(dtype)


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(INT_VIEW[t.dtype])


def _bits_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Same bits (so -0.0 != +0.0), except that any NaN equals any NaN."""
    nan = torch.isnan(a)
    return torch.equal(nan, torch.isnan(b)) and torch.equal(_bits(a[~nan]), _bits(b[~nan]))
