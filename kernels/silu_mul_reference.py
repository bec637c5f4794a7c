"""Eager PyTorch reference for the SwiGLU activation on the fused gate/up GEMM output.

gate_up [..., 2*I] holds gate in the first I columns and up in the last I (the layout of
`F.linear(x, cat([gate_proj.weight, up_proj.weight]))`); the result [..., I] is `silu(gate) * up`,
exactly the eager code in `SwiGLU.forward`. In bf16/fp16 PyTorch computes silu as
x / (1 + exp(-x)) in fp32 and rounds to the input dtype, then multiplies the two rounded operands
in fp32 and rounds once more: two roundings, which the fused kernel reproduces.

Deferred RMSNorm (`norm_source`): when the MLP's input norm is folded into the gate/up weight
(its weight multiplies the columns of W), the GEMM reads the un-normalised residual stream h, and
the per-row factor 1/rms(h) -- a scalar per row, so it commutes with the GEMM -- is applied here
instead of by a separate RMSNorm launch. The factor is computed in kernels/rmsnorm_reference.py's
op order, `rsqrt(mean(h32^2) + eps)` in fp32; gate_up is scaled in fp32 and rounded once to its
dtype (the value a GEMM storing its output in that dtype would have held), then the two roundings
above follow.
"""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F

from kernels.rmsnorm_reference import inverse_rms


def silu_mul_reference(gate_up: torch.Tensor, norm_source: Optional[torch.Tensor] = None,
                       eps: float = 0.0) -> torch.Tensor:
    if norm_source is not None:
        scale = inverse_rms(norm_source, eps)  # [..., 1] fp32
        gate_up = (gate_up.float() * scale).to(gate_up.dtype)  # one rounding to the dtype
    gate, up = gate_up.chunk(2, dim=-1)
    return F.silu(gate) * up
