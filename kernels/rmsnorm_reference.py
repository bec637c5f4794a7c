"""Eager PyTorch reference for RMSNorm over the last dim, in the official Qwen3 op order.

The variance and the normalization are computed in fp32, the normalized value is cast back to x's
dtype, and only then multiplied by the weight: in bf16 this order changes the result, so the fused
kernel reproduces it exactly (two roundings: x32 * rstd -> x.dtype, then weight * that -> output).
The result dtype is torch.result_type(weight, x) (weight normally has x's dtype).
"""
from __future__ import annotations

import torch


def rms_norm_reference(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    x32 = x.float()
    x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x32.to(x.dtype)
