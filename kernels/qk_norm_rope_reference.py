"""Eager PyTorch reference for the attention prologue: per-head QK RMSNorm, then NeoX RoPE.

This is what `talker_service.model.layers.Attention.forward` did between the projections and the
KV store before the fused op, op for op (RMSNorm in the official Qwen3 order, then NeoX RoPE), so
the fused kernel can be checked bit for bit. In bf16/fp16 every elementwise op rounds once to the storage dtype:
normalized value, times weight, x * cos, rotated * sin, and their sum.

qk_norm_rope_write_kv_reference is the decode steps' variant: the same q/k computation, then K and V
written into one layer's KV cache with the index writes the KV stores did themselves before
(talker_service/model/kv_cache.py); a write is a copy, so the cache holds the same bits either way.

Its optional norm_source is the deferred input RMSNorm of the decoder layer: the layer folds the
input norm's weight into the columns of the fused q/k/v projection and feeds the GEMM the raw
residual stream h, so q, k and v arrive missing one per-token factor s = rsqrt(mean(h^2) + eps) (a
scalar per token commutes with the GEMM). The op applies s first, one rounding per element, then
does exactly what it does without it; the RMSNorm launch in front of the projection disappears.
"""
from __future__ import annotations

import torch

from kernels.rmsnorm_reference import inverse_rms, rms_norm_reference


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


def apply_norm_scale(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """x [B, L, heads, D] times its token's s [B, L, 1], computed in fp32 and rounded once to x's
    dtype (the product stands in for the projection of the normalised stream, which the model
    stores in x's dtype too). Not bit for bit the un-deferred layer: the rounding points move."""
    return (x.float() * scale[..., None]).to(x.dtype)


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
    norm_source: torch.Tensor | None = None,
    norm_eps: float = 0.0,
) -> torch.Tensor:
    """qk_norm_rope_reference, then k_out and v [B, L, KV, D] (unchanged) written into k_cache/v_cache
    [S, KV, P, D] at rows dest_rows [B], positions dest_positions [B] + 0..L-1 -> q_out [B, H, L, D].

    norm_source [B, L, H_model] (the residual stream the projection read, whose input RMSNorm was
    deferred; None: no scaling): q, k and v are first replaced by apply_norm_scale(x, s) with
    s = inverse_rms(norm_source, norm_eps) (RMSNorm's factor), then everything above happens to those."""
    if norm_source is not None:
        scale = inverse_rms(norm_source, norm_eps)   # [B, L, 1] fp32
        q, k, v = (apply_norm_scale(t, scale) for t in (q, k, v))
    q_out, k_out = qk_norm_rope_reference(q, k, q_weight, k_weight, cos, sin, eps)
    write_tokens(k_cache, k_out, dest_rows, dest_positions)
    write_tokens(v_cache, v.transpose(1, 2), dest_rows, dest_positions)
    return q_out
