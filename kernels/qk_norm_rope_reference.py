"""Eager PyTorch reference for the attention prologue: per-head QK RMSNorm, then NeoX RoPE.

This is what `talker_service.model.layers.Attention.forward` did between the projections and the
KV store before the fused op, op for op (RMSNorm in the official Qwen3 order, then NeoX RoPE), so
the fused kernel can be checked bit for bit. In bf16/fp16 every elementwise op rounds once to the storage dtype:
normalized value, times weight, x * cos, rotated * sin, and their sum.

qk_norm_rope_write_kv_reference is the decode steps' variant: the same q/k computation, then K and V
written into one layer's KV cache with the index writes the KV stores did themselves before
(talker_service/model/kv_cache.py); a write is a copy, so the cache holds the same bits either way.
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


def write_tokens(cache: torch.Tensor, values: torch.Tensor, dest_rows: torch.Tensor,
                 dest_positions: torch.Tensor) -> None:
    """cache [S, KV, P, D] (one layer), values [B, KV, L, D]: token l of row b goes to
    cache[dest_rows[b], :, dest_positions[b] + l]. One index_put_, no host sync."""
    length = values.shape[2]
    positions = dest_positions[:, None]  # [B, 1]
    if length > 1:
        positions = positions + torch.arange(length, device=positions.device)
    # advanced indices around a slice put the index dims first: the value is [B, L, KV, D]. index_put_
    # wants the cache's dtype (a no-op unless fp32 weights promoted k_out; copy_ would cast the same)
    cache[dest_rows[:, None], :, positions] = values.transpose(1, 2).to(cache.dtype)


def qk_norm_rope_write_kv_reference(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    q_weight: torch.Tensor,
    k_weight: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    eps: float,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    dest_rows: torch.Tensor,
    dest_positions: torch.Tensor,
) -> torch.Tensor:
    """qk_norm_rope_reference, then k_out and v [B, L, KV, D] (unchanged) written into k_cache/v_cache
    [S, KV, P, D] at rows dest_rows [B], positions dest_positions [B] + 0..L-1 -> q_out [B, H, L, D]."""
    q_out, k_out = qk_norm_rope_reference(q, k, q_weight, k_weight, cos, sin, eps)
    write_tokens(k_cache, k_out, dest_rows, dest_positions)
    write_tokens(v_cache, v.transpose(1, 2), dest_rows, dest_positions)
    return q_out
