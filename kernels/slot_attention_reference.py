"""Eager reference for slot decode attention: one new query per row attends over the first
lengths[i] positions of slot slots[i] in one layer of the static slot KV cache.

It is what the talker's decode step did before this kernel existed (the decode view gathered
each row's slot, a mask hid keys past the row's position, and
talker_service.model.layers.grouped_attention ran SDPA), and what
talker_service.model.kv_cache.SlotDecodeView.attend computes now through the dispatcher: the
gather is an index_select of a position prefix, the mask is `key < length`, and GQA is folded the
same way as grouped_attention does it -- the H/KV query heads of one kv head become the
query-length axis of one SDPA call, so K/V are never repeated. (The folding is repeated here rather
than imported: the model layers import the kernels package.)
"""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F


def slot_decode_attention_reference(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                                    slots: torch.Tensor, lengths: torch.Tensor, scale: float,
                                    max_len: Optional[int] = None) -> torch.Tensor:
    """q [B, H, D], k_cache/v_cache [S, KV, P, D], slots/lengths [B] (int) -> [B, H, D] in q's dtype.

    Row i: softmax(q[i] . K^T * scale) V over keys 0..lengths[i]-1 of slot slots[i]; query head h
    reads kv head h // (H // KV).

    max_len: how many positions to gather (>= every length; masked beyond each row's own length).
    None -> P on a GPU (no host sync, so it can run inside a CUDA-graph capture), and
    max(lengths) when lengths live on the CPU (reading it costs no device sync).
    """
    batch, num_heads, head_dim = q.shape
    num_kv = k_cache.shape[1]
    groups = num_heads // num_kv
    if max_len is None:
        if lengths.device.type != "cpu":
            max_len = k_cache.shape[2]
        else:
            max_len = max(1, int(lengths.max())) if lengths.numel() else 1
    max_len = min(max_len, k_cache.shape[2])
    k = k_cache[:, :, :max_len].index_select(0, slots)  # [B, KV, max_len, D]
    v = v_cache[:, :, :max_len].index_select(0, slots)
    keys = torch.arange(max_len, device=lengths.device)
    mask = (keys[None, :] < lengths[:, None])[:, None, None, :]  # [B, 1, 1, max_len]
    # grouped_attention's folding with q_len = 1: q [B, KV, groups, D], the mask repeated per group
    q = q.reshape(batch, num_kv, groups, head_dim)
    mask = mask.unsqueeze(2).expand(batch, 1, groups, 1, max_len).reshape(batch, 1, groups, max_len)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
    return out.reshape(batch, num_heads, head_dim)
