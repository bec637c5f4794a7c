"""Eager PyTorch reference for RMSNorm over the last dim, in the official Qwen3 op order.

The variance and the normalization are computed in fp32, the normalized value is cast back to x's
dtype, and only then multiplied by the weight: in bf16 this order changes the result, so the fused
kernel reproduces it exactly (two roundings: x32 * rstd -> x.dtype, then weight * that -> output).
The result dtype is torch.result_type(weight, x) (weight normally has x's dtype).
"""
from __future__ import annotations

import torch


def inverse_rms(x: torch.Tensor, eps: float) -> torch.Tensor:
    """rsqrt(mean(x^2) + eps) over the last dim, in fp32, keepdim: the factor RMSNorm multiplies by
    (also applied on its own by the deferred norms' consumers, kernels/silu_mul_reference.py and
    kernels/qk_norm_rope_reference.py)."""
    return torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)


def rms_norm_reference(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    x32 = x.float() * inverse_rms(x, eps)
    return weight * x32.to(x.dtype)
