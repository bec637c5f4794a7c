"""Eager PyTorch reference for the SwiGLU activation on the fused gate/up GEMM output.

gate_up [..., 2*I] holds gate in the first I columns and up in the last I (the layout of
`F.linear(x, cat([gate_proj.weight, up_proj.weight]))`); the result [..., I] is `silu(gate) * up`,
exactly the eager code in `SwiGLU.forward`. In bf16/fp16 PyTorch computes silu as
x / (1 + exp(-x)) in fp32 and rounds to the input dtype, then multiplies the two rounded operands
in fp32 and rounds once more: two roundings, which the fused kernel reproduces.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


def silu_mul_reference(gate_up: torch.Tensor) -> torch.Tensor:
    gate, up = gate_up.chunk(2, dim=-1)
    return F.silu(gate) * up
