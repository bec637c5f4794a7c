"""Eager reference for frame attention (the code predictor's one-query decode step): exactly the two
ops it fuses, one after the other -- qk_norm_rope_write_kv_reference (q and k normalised and
rotated, K and V written into the frame cache at each row's position), then
slot_decode_attention_reference (the new query over cache positions 0..position of its row).

In the frame cache batch row b is cache row b, and the query at position p sees p + 1 keys, so the
destination rows and the attention's slots are arange(B) and the lengths are position + 1 -- what
talker_service.model.kv_cache.FrameKVCache hands the two ops (as expanded scalars) today.
"""
from __future__ import annotations

import torch

from kernels.qk_norm_rope_reference import qk_norm_rope_write_kv_reference
from kernels.slot_attention_reference import slot_decode_attention_reference


def frame_attention_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_weight: torch.Tensor,
                              k_weight: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, eps: float,
                              k_cache: torch.Tensor, v_cache: torch.Tensor, position: torch.Tensor,
                              scale: float) -> torch.Tensor:
    """q [B, 1, H, D], k/v [B, 1, KV, D], weights [D], cos/sin [B, 1, D], k_cache/v_cache [S >= B, KV, P, D]
    (mutated), position [B] int -> [B, H, D] (not necessarily contiguous)."""
    rows = torch.arange(q.shape[0], device=position.device)
    q_out = qk_norm_rope_write_kv_reference(q, k, v, q_weight, k_weight, cos, sin, eps, k_cache, v_cache,
                                            rows, position)  # [B, H, 1, D]
    return slot_decode_attention_reference(q_out[:, :, 0], k_cache, v_cache, rows, position + 1, scale)
