"""Building blocks of the Qwen3-style decoder stacks used by the talker and the code predictor.

Parameter names mirror the official modules (`self_attn.q_proj`, `mlp.gate_proj`, ...) so the
checkpoint loads with a strict name-for-name copy. Attention does not own a cache: the caller
passes a KV store, which is how one layer serves a slot prefill, a batched decode over the static
slot cache and the code predictor's per-frame cache. A `KVStore` takes this call's keys/values and
returns everything to attend over (prefill, chunks); a `CacheKVStore` (the decode steps) names
where in its cache they go, the layer's fused q/k-norm + RoPE launch writes them there, and the
store attends over its cache.
"""
from __future__ import annotations

from typing import NamedTuple, Protocol

import torch
import torch.nn.functional as F
from torch import nn

from kernels.add_rmsnorm import add_rms_norm
from kernels.qk_norm_rope import qk_norm_rope, qk_norm_rope_write_kv
from kernels.rmsnorm import rms_norm
from kernels.small_m_linear import linear, linear_silu_mul
from talker_service.model.config import DecoderStackConfig


class KVStore(Protocol):
    """Where a layer's keys/values go when the store writes them itself (prefill and chunk views)."""

    def update(self, layer_idx: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store k/v [B, kv_heads, L, head_dim]; return the keys/values to attend over [B, kv_heads, S, head_dim]."""


class KVWriteTarget(NamedTuple):
    """Where one layer's K/V for this call go in a cache: token l of batch row b is written to
    k_cache/v_cache[rows[b], :, positions[b] + l]. Index tensors live on the device (no host sync)."""
    k_cache: torch.Tensor    # [S, kv_heads, P, head_dim]: one layer of the cache, written in place
    v_cache: torch.Tensor    # [S, kv_heads, P, head_dim]
    rows: torch.Tensor       # [B] int64: the cache row (slot) of each batch row
    positions: torch.Tensor  # [B] int64: the position of each batch row's first token this call


class CacheKVStore(Protocol):
    """A store whose cache the layer writes directly: qk_norm_rope_write_kv puts K (normalised and
    rotated) and V at `write_target` in the same launch that normalises and rotates q, so the two
    cache writes cost no launch of their own (the decode steps are launch-bound); the store then
    attends q over its cache."""

    def write_target(self, layer_idx: int) -> KVWriteTarget:
        """Where this call's K/V of layer layer_idx go."""

    def attend(self, layer_idx: int, q: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """q [B, H, L, D] over the cache, its K/V of this call already written -> [B, H, L, D]."""


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # variance in fp32, cast back before the weight: the official op order, which matters in
        # bf16. One fused Triton launch on the GPU instead of eight (kernels/rmsnorm.py).
        return rms_norm(x, self.weight, self.eps)


def rope_tables(head_dim: int, theta: float, num_positions: int, dtype: torch.dtype, device) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin [num_positions, head_dim] for NeoX (half-split) RoPE; computed in fp32, then cast,
    like the official rotary module. A table lookup by position is one gather per step."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64, device=device).float() / head_dim))
    positions = torch.arange(num_positions, device=device, dtype=torch.float32)
    freqs = positions[:, None] * inv_freq[None, :]  # [P, head_dim/2]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def fold_gqa_mask(mask: torch.Tensor, groups: int, q_len: int) -> torch.Tensor:
    """bool [B|1, 1, L|1, S] -> [B|1, 1, groups * q_len, S]: the mask of grouped_attention's folded
    queries (row g * q_len + l is query l's row). A copy: a mask that stays the same across calls
    (the code predictor's first step, in all of its layers) is folded once by its owner and passed
    folded, which grouped_attention takes as it is."""
    mask = mask.unsqueeze(2).expand(mask.shape[0], 1, groups, q_len, mask.shape[-1])
    return mask.reshape(mask.shape[0], 1, groups * q_len, mask.shape[-1])


def grouped_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """GQA without materialising repeated K/V.

    q [B, H, L, D], k/v [B, KV, S, D], mask bool [B|1, 1, L, S] (True = attend), or already folded
    [B|1, 1, (H/KV) * L, S] (fold_gqa_mask), or None (all keys visible). Query head h uses KV head
    h // (H/KV), so the H/KV query heads of one KV head are folded into the query-length axis of a
    plain SDPA call.
    """
    batch, num_heads, q_len, head_dim = q.shape
    num_kv = k.shape[1]
    groups = num_heads // num_kv
    if groups > 1:
        q = q.reshape(batch, num_kv, groups * q_len, head_dim)
        if mask is not None and mask.shape[-2] != groups * q_len:  # not folded yet (an unfolded one has L or 1 rows)
            mask = fold_gqa_mask(mask, groups, q_len)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    return out.reshape(batch, num_heads, q_len, head_dim)


def fuse_linears(*linears: nn.Linear) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Re-home the weights (and biases) of linears that read the same input into one tensor; each
    linear's weight becomes a view of it. One GEMM then does the work of several (the decode step
    is launch-bound at small batches) and no memory is added. Call after the weights are loaded
    and placed: moving the module later would separate the views from the fused tensor."""
    weight = torch.cat([lin.weight.detach() for lin in linears])  # [sum(out), in]
    bias = torch.cat([lin.bias.detach() for lin in linears]) if linears[0].bias is not None else None
    start = 0
    for lin in linears:
        size = lin.out_features
        lin.weight = nn.Parameter(weight[start:start + size], requires_grad=False)
        if bias is not None:
            lin.bias = nn.Parameter(bias[start:start + size], requires_grad=False)
        start += size
    return weight, bias


class Attention(nn.Module):
    def __init__(self, config: DecoderStackConfig, layer_idx: int):
        super().__init__()
        self.layer_idx = layer_idx
        self.num_heads = config.num_attention_heads
        self.num_kv_heads = config.num_key_value_heads
        self.head_dim = config.head_dim
        bias = config.attention_bias
        self.q_proj = nn.Linear(config.hidden_size, self.num_heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(config.hidden_size, self.num_kv_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(config.hidden_size, self.num_kv_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, config.hidden_size, bias=bias)
        self.q_norm = RMSNorm(self.head_dim, config.rms_norm_eps)
        self.k_norm = RMSNorm(self.head_dim, config.rms_norm_eps)
        self._qkv: tuple[torch.Tensor, torch.Tensor | None] | None = None  # fuse_projections()

    def fuse_projections(self) -> None:
        self._qkv = fuse_linears(self.q_proj, self.k_proj, self.v_proj)

    def _project(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        if self._qkv is None:
            return self.q_proj(x), self.k_proj(x), self.v_proj(x)
        q_size, kv_size = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        return linear(x, *self._qkv).split((q_size, kv_size, kv_size), dim=-1)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, kv: KVStore | CacheKVStore,
                mask: torch.Tensor | None) -> torch.Tensor:
        batch, length, _ = x.shape
        q, k, v = self._project(x)
        q = q.view(batch, length, self.num_heads, self.head_dim)
        k = k.view(batch, length, self.num_kv_heads, self.head_dim)
        v = v.view(batch, length, self.num_kv_heads, self.head_dim)
        # per-head QK-norm comes before RoPE (facts §8.4); both, for q and k, are one fused launch
        # on the GPU (kernels/qk_norm_rope.py: the same ops as RMSNorm + apply_rope, same rounding)
        norm_args = (self.q_norm.weight, self.k_norm.weight, cos, sin, self.q_norm.eps)
        write_target = getattr(kv, "write_target", None)
        if write_target is not None:
            # a cache store: the same launch writes K and V into the cache, and the store attends
            # over its cache (the decode steps: no copy launches, no K/V gather)
            q = qk_norm_rope_write_kv(q, k, v, *norm_args, *write_target(self.layer_idx))
            out = kv.attend(self.layer_idx, q, mask)
        else:
            q, k = qk_norm_rope(q, k, *norm_args)
            k_all, v_all = kv.update(self.layer_idx, k, v.transpose(1, 2))
            out = grouped_attention(q, k_all, v_all, mask)  # [B, H, L, D]
        out = out.transpose(1, 2).reshape(batch, length, self.num_heads * self.head_dim)
        return linear(out, self.o_proj.weight, self.o_proj.bias)


class SwiGLU(nn.Module):
    def __init__(self, hidden_size: int, intermediate_size: int):
        super().__init__()
        self.gate_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.up_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=False)
        self._gate_up: tuple[torch.Tensor, torch.Tensor | None] | None = None  # fuse_projections()

    def fuse_projections(self) -> None:
        self._gate_up = fuse_linears(self.gate_proj, self.up_proj)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self._gate_up is None:
            return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
        # one GEMM for gate and up, one launch for silu(gate) * up (kernels/silu_mul.py); at a few
        # rows one launch for both (kernels/small_m_linear.py)
        return linear(linear_silu_mul(x, *self._gate_up), self.down_proj.weight, self.down_proj.bias)


class DecoderLayer(nn.Module):
    def __init__(self, config: DecoderStackConfig, layer_idx: int):
        super().__init__()
        self.self_attn = Attention(config, layer_idx)
        self.mlp = SwiGLU(config.hidden_size, config.intermediate_size)
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, kv: KVStore | CacheKVStore, mask: torch.Tensor | None) -> torch.Tensor:
        """One layer on its own (DecoderStack.run fuses each residual add into the next norm)."""
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, kv, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class DecoderStack(nn.Module):
    """`layers.*` + final `norm` (names as in `talker.model` / `talker.code_predictor.model`)."""

    def __init__(self, config: DecoderStackConfig):
        super().__init__()
        self.layers = nn.ModuleList(DecoderLayer(config, i) for i in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    def fuse_projections(self) -> None:
        """q/k/v and gate/up of every layer as one GEMM each (see fuse_linears)."""
        for layer in self.layers:
            layer.self_attn.fuse_projections()
            layer.mlp.fuse_projections()

    def run(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, kv: KVStore | CacheKVStore, mask: torch.Tensor | None) -> torch.Tensor:
        """x [B, L, hidden] -> post-final-norm hidden [B, L, hidden].

        The same sums as calling each layer in turn, but every residual add is done by the norm that
        follows it (kernels/add_rmsnorm.py: one launch returns the sum and its normalization)."""
        residual = x
        h = self.layers[0].input_layernorm(x)
        for i, layer in enumerate(self.layers):
            attn = layer.self_attn(h, cos, sin, kv, mask)
            post = layer.post_attention_layernorm
            h, residual = add_rms_norm(attn, residual, post.weight, post.eps)
            after = self.layers[i + 1].input_layernorm if i + 1 < len(self.layers) else self.norm
            h, residual = add_rms_norm(layer.mlp(h), residual, after.weight, after.eps)
        return h
