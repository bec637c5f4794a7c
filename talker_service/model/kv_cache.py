"""Static KV caches: the talker's per-slot cache and the code predictor's per-frame cache.

The talker cache is allocated once: k/v [layers, max_slots, kv_heads, max_seq_len, head_dim].
Requests own a slot; a slot's row holds positions 0..len-1. Views below bind one call's
indexing (which slot rows, which positions) for the layers: the prefill and chunk views implement
`KVStore.update` (they write the keys/values they are handed), the decode view and the code
predictor's frame cache implement `CacheKVStore` (the layer's fused q/k-norm + RoPE launch writes
K/V into the cache at their `write_target`; they attend over the cache). Every write/read uses
device tensors for indices, so a decode step issues no host syncs and can be captured in a CUDA graph.

Positions past a row's length may hold stale data (a right-padded batch prefill writes its
padding there, a freed slot keeps its old rows). That is harmless: a query at position p writes
key p before it reads, and never reads keys beyond p.
"""
from __future__ import annotations

import logging

import torch

from kernels.slot_attention import slot_decode_attention
from talker_service.model.layers import KVReadTarget, KVWriteTarget, grouped_attention

logger = logging.getLogger(__name__)


class SlotKVCache:
    def __init__(self, num_layers: int, max_slots: int, num_kv_heads: int, max_seq_len: int, head_dim: int,
                 dtype: torch.dtype, device: torch.device | str):
        if max_slots < 1 or max_seq_len < 1:
            raise ValueError(f"KV cache needs max_slots >= 1 and max_seq_len >= 1, got {max_slots}, {max_seq_len}")
        shape = (num_layers, max_slots, num_kv_heads, max_seq_len, head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.max_slots = max_slots
        self.max_seq_len = max_seq_len
        num_bytes = 2 * self.k.numel() * self.k.element_size()
        logger.info("talker KV cache: %d slots x %d positions, %.1f MiB", max_slots, max_seq_len, num_bytes / 2**20)

    def check_slot(self, slot: int) -> None:
        if not 0 <= slot < self.max_slots:
            raise ValueError(f"slot {slot} out of range [0, {self.max_slots})")

    def check_span(self, end_position: int) -> None:
        if end_position > self.max_seq_len:
            raise ValueError(f"sequence of {end_position} positions exceeds the KV cache's max_seq_len {self.max_seq_len}")


class SlotPrefillView:
    """One or more slots written from the same start position: rows [B] take positions
    start..start+L-1 (right-padded rows write their padding past their length)."""

    def __init__(self, cache: SlotKVCache, slots: torch.Tensor, start: int, length: int):
        self.cache, self.slots, self.start, self.end = cache, slots, start, start + length

    def update(self, layer_idx, k, v):
        k_layer, v_layer = self.cache.k[layer_idx], self.cache.v[layer_idx]
        if self.slots.numel() == 1 and self.start == 0:
            # common case (one fresh prompt): attend over this call's keys, no cache read-back
            k_layer[self.slots, :, : self.end] = k
            v_layer[self.slots, :, : self.end] = v
            return k, v
        k_layer[self.slots, :, self.start:self.end] = k
        v_layer[self.slots, :, self.start:self.end] = v
        return k_layer[self.slots, :, : self.end], v_layer[self.slots, :, : self.end]


class SlotChunkView:
    """A chunk of T positions for each of P rows, with device-side indices only (capturable).

    span None: every row starts at position 0, so this call's keys are all a query can see;
    they are written to positions 0..T-1 of each row's slot and attended directly.
    span S: row p writes positions[p] (its start + 0..T-1, clamped into the cache) and attends over
    positions 0..S-1 of its slot read back from the cache, masked by the caller to keys <= its own
    position: earlier chunks of the same prompt come from the cache. Rows right-padded past their
    real length write their padding after it, where nothing is read before being overwritten."""

    def __init__(self, cache: SlotKVCache, slots: torch.Tensor, positions: torch.Tensor | None, span: int | None):
        self.cache, self.slots, self.positions, self.span = cache, slots, positions, span

    def update(self, layer_idx, k, v):
        k_layer, v_layer = self.cache.k[layer_idx], self.cache.v[layer_idx]
        if self.span is None:
            length = k.shape[2]
            k_layer[self.slots, :, :length] = k
            v_layer[self.slots, :, :length] = v
            return k, v
        # advanced indices around a slice put the index dims first: the value is [P, T, kv_heads, D]
        rows = self.slots[:, None]
        k_layer[rows, :, self.positions] = k.transpose(1, 2)
        v_layer[rows, :, self.positions] = v.transpose(1, 2)
        return k_layer[self.slots, :, :self.span], v_layer[self.slots, :, :self.span]


class SlotDecodeView:
    """One new position per row: row i writes position positions[i] of slot slots[i] and attends
    over positions 0..positions[i] of that slot. A `CacheKVStore`: the layer's fused launch writes
    K/V at `write_target`, and `attend` reads keys in place, never gathered."""

    def __init__(self, cache: SlotKVCache, slots: torch.Tensor, positions: torch.Tensor):
        self.cache, self.slots, self.positions = cache, slots, positions
        # keys each row attends over (0..position, this step's included): one add per step, not one
        # per layer (the decode step is launch-bound at small batches)
        self.lengths = positions + 1

    def write_target(self, layer_idx: int) -> KVWriteTarget:
        return KVWriteTarget(self.cache.k[layer_idx], self.cache.v[layer_idx], self.slots, self.positions)

    def one_token_target(self, layer_idx: int) -> None:
        """None: the talker's layers write K/V in one launch and attend in another. The one-launch
        kernel loses over this long cache (kernels/norm_rope_attend_triton.fused_launch_fits)."""
        return None

    def attend(self, layer_idx: int, q: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """q [bs, heads, 1, D] over keys 0..position of each row's slot, this step's key included,
        read in place (kernels/slot_attention.py): no gather of the context bucket, nothing read past
        a row's own length; mask is unused (it is None: the lengths are the mask). -> [bs, heads, 1, D]."""
        out = slot_decode_attention(q[:, :, 0], self.cache.k[layer_idx], self.cache.v[layer_idx], self.slots,
                                    self.lengths, q.shape[-1] ** -0.5)
        return out[:, :, None]


def causal_mask(start: int, length: int, device) -> torch.Tensor:
    """bool [1, 1, length, start+length]: query i (at position start+i) sees keys 0..start+i."""
    queries = torch.arange(start, start + length, device=device)
    keys = torch.arange(start + length, device=device)
    return (keys[None, :] <= queries[:, None])[None, None]


class FrameKVCache:
    """The code predictor's cache: it restarts every frame, so it is per batch row, not per slot,
    and its length is the fixed 16 positions of one frame. A `CacheKVStore`: the layer's fused
    launch writes K/V at positions offset.. of every row. `offset` is a Python int, the same at
    every replay (the 15 predictor steps are unrolled); the batch rows' index tensor is made once
    per frame (one small launch), and each step picks its offset's position by a view of
    `position_table` (arange(num_positions); pass one built once, outside the frame step, to save
    its launch too; likewise `length_table`, arange(1, num_positions + 1)).

    Attention runs on the slot decode kernel: batch row b is "slot" b of this cache and every row's
    length is one expanded scalar of `length_table` (no launch). cuDNN's SDPA took ~49 us a call
    at batch 256 for these <= 16 keys (72 us for the masked two-query first step), 3.6 of the
    12.6 ms frame step (H100 profile); the kernel reads just the row's keys."""

    def __init__(self, num_layers: int, batch_size: int, num_kv_heads: int, num_positions: int, head_dim: int,
                 dtype: torch.dtype, device, position_table: torch.Tensor | None = None,
                 length_table: torch.Tensor | None = None):
        shape = (num_layers, batch_size, num_kv_heads, num_positions, head_dim)
        self.k = torch.empty(shape, dtype=dtype, device=device)
        self.v = torch.empty(shape, dtype=dtype, device=device)
        self.offset = 0
        self.rows = torch.arange(batch_size, device=device)  # [bs]: batch row b is cache row b
        if position_table is None:
            position_table = torch.arange(num_positions, device=device)
        self.position_table = position_table  # [16]: entry p is position p
        if length_table is None:
            length_table = torch.arange(1, num_positions + 1, device=device)
        self.length_table = length_table  # [16]: entry p is p + 1, the keys a query at position p sees

    def write_target(self, layer_idx: int) -> KVWriteTarget:
        start = self.position_table[self.offset].expand(self.rows.shape[0])  # [bs], stride 0: no launch
        return KVWriteTarget(self.k[layer_idx], self.v[layer_idx], self.rows, start)

    def one_token_target(self, layer_idx: int) -> KVReadTarget:
        """A one-query step (every step after the frame's first) at position offset attends over
        keys 0..offset of its own row."""
        return KVReadTarget(self.rows, self.length_table[self.offset].expand(self.rows.shape[0]))

    def attend(self, layer_idx: int, q: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """q [bs, heads, L, D], queries at positions offset..offset+L-1 (their K/V already written),
        causal: query l sees cached positions 0..offset+l. A frame is always causal, so `mask` must
        be None. -> [bs, heads, L, D]."""
        if mask is not None:
            raise ValueError("FrameKVCache.attend: the frame's queries are causal by position; pass mask=None")
        bs, num_heads, length, head_dim = q.shape
        scale = head_dim ** -0.5
        if length == 1:
            lengths = self.length_table[self.offset].expand(bs)  # [bs], stride 0: no launch
            return slot_decode_attention(q[:, :, 0], self.k[layer_idx], self.v[layer_idx], self.rows, lengths,
                                         scale)[:, :, None]
        if length == 2 and self.offset == 0:
            # the frame's first step: query 0 sees key 0 alone, a softmax over one key, so its output is
            # v0 exactly; query 1 is a one-query step of length 2. Stacked as [bs, 2, heads, D] (the
            # layout o_proj reads: no copy after), returned as the [bs, heads, 2, D] view.
            num_kv = self.v.shape[2]
            groups = num_heads // num_kv
            v0 = self.v[layer_idx, :, :, 0, None].expand(bs, num_kv, groups, head_dim)
            out1 = slot_decode_attention(q[:, :, 1], self.k[layer_idx], self.v[layer_idx], self.rows,
                                         self.length_table[1].expand(bs), scale)
            out = torch.stack((v0, out1.view(bs, num_kv, groups, head_dim)), dim=1)
            return out.view(bs, 2, num_heads, head_dim).transpose(1, 2)
        end = self.offset + length
        return grouped_attention(q, self.k[layer_idx, :, :, :end], self.v[layer_idx, :, :, :end],
                                 causal_mask(self.offset, length, q.device))
