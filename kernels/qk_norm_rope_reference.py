"""Eager PyTorch reference for the attention prologue: per-head QK RMSNorm, then NeoX RoPE.

This is what `talker_service.model.layers.Attention.forward` did between the projections and the
KV store before the fused op, op for op (RMSNorm in the official Qwen3 order, then NeoX RoPE), so
the fused kernel can be checked bit for bit. In bf16/fp16 every elementwise op rounds once to the storage dtype:
normalized value, times weight, x * cos, rotated * sin, and their sum.
"""
from __future__ import annotations

import torch

from kernels.rmsnorm_reference import rms_norm_reference


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [B, heads, L, D]; cos/sin [B, L, D] (NeoX half split)."""
    cos = cos.unsqueeze(1)
    sin = sin.unsqueeze(1)
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


def qk_norm_rope_reference(
    q: torch.Tensor,
    k: torch.Tensor,
    q_weight: torch.Tensor,
    k_weight: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    eps: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """q [B, L, H, D], k [B, L, KV, D] (any strides), weights [D], cos/sin [B, L, D]
    -> (q_out [B, H, L, D], k_out [B, KV, L, D]); the outputs are not necessarily contiguous."""
    q_out = apply_rope(rms_norm_reference(q, q_weight, eps).transpose(1, 2), cos, sin)
    k_out = apply_rope(rms_norm_reference(k, k_weight, eps).transpose(1, 2), cos, sin)
    return q_out, k_out
