"""Eager PyTorch reference for the residual add + RMSNorm of a decoder layer.

`summed = x + residual` (PyTorch's add: fp32 sum of the two values, rounded once to
torch.result_type(x, residual), i.e. x's dtype when both match), then the RMSNorm of
kernels.rmsnorm_reference on the rounded sum. This is the eager pattern
`h = h + attn_out; normed = post_attention_layernorm(h)` (and the same with the MLP output and the
next layer's input_layernorm), returned as (normed, summed).
"""
from __future__ import annotations

import torch

from kernels.rmsnorm_reference import rms_norm_reference


def add_rms_norm_reference(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                           eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    summed = x + residual
    return rms_norm_reference(summed, weight, eps), summed
