"""Building blocks of the Qwen3-style decoder stacks used by the talker and the code predictor.

Parameter names mirror the official modules (`self_attn.q_proj`, `mlp.gate_proj`, ...) so the
checkpoint loads with a strict name-for-name copy. Attention does not own a cache: the caller
passes a KV store, which is how one layer serves a slot prefill, a batched decode over the static
slot cache and the code predictor's per-frame cache. A `KVStore` takes this call's keys/values and
returns everything to attend over (prefill, chunks); a `CacheKVStore` (the decode steps) names
where in its cache they go, the layer's fused q/k-norm + RoPE launch writes them there, and the
store attends over its cache.

Deferred norms (decode steps over a cache store; `DecoderStack.fold_norms`): each layer's two
RMSNorms cost no launch of their own. RMSNorm(h) * w feeding a bias-free projection W equals
(h @ (W * w)^T) * s, with s = 1/rms(h) one scalar per token, so the norm weights are folded into the
columns of the fused q/k/v and gate/up weights once at init (the norm modules keep unit weights, so
every other path computes the same function), the GEMMs read the un-normalised residual stream h,
and s is applied by the kernel that consumes each GEMM's output: the q/k-norm + RoPE + KV-write
launch (q, k and v) and the SwiGLU launch. The residual adds go into the o_proj and down_proj
GEMMs, which add their result into h in place (kernels.small_m_linear.linear_add_: cuBLAS's beta=1
epilogue, or the few-row kernel's). Two launches fewer per layer pass (206 per frame step at 1.7B).
The rounding differs from the norm-then-GEMM order at the level of one bf16 rounding of the
activations (the factor is applied to the GEMM output instead of its input).
"""
from __future__ import annotations

import os
from typing import NamedTuple, Protocol

import torch
import torch.nn.functional as F
from torch import nn

from kernels.add_rmsnorm import add_rms_norm
from kernels.norm_rope_attend import norm_rope_attend
from kernels.qk_norm_rope import qk_norm_rope, qk_norm_rope_write_kv
from kernels.rmsnorm import rms_norm
from kernels.small_m_linear import linear, linear_add_, linear_silu_mul
from talker_service.model.config import DecoderStackConfig

DEFERRED_NORM_ENV = "QWEN3_TTS_DEFERRED_NORM"  # "0": keep the norm launches (A/B runs); else fold at init


def deferred_norm_wanted() -> bool:
    """Whether fold_norms should fold (module docstring); QWEN3_TTS_DEFERRED_NORM=0 says no."""
    return os.environ.get(DEFERRED_NORM_ENV, "1") != "0"


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

    def one_token_target(self, layer_idx: int) -> "KVReadTarget | None":
        """For a call of one token per row: which cache row each row attends over and how many keys
        (this call's included), so the layer can write and attend in one launch
        (kernels/norm_rope_attend.py); None where this call has more than one token per row, or where
        the store's cache is better served by two launches (the talker's long slot cache)."""


class KVReadTarget(NamedTuple):
    """What a one-token decode call attends over: keys 0..lengths[b]-1 of cache row slots[b]."""
    slots: torch.Tensor    # [B] int64 (any stride)
    lengths: torch.Tensor  # [B] int64 (any stride): the new key included


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
        return self._split(linear(x, *self._qkv))

    def _split(self, qkv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The fused projection [..., (heads + 2 kv heads) * head_dim] as views of q, k and v."""
        q_size, kv_size = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        return qkv.split((q_size, kv_size, kv_size), dim=-1)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, kv: KVStore | CacheKVStore,
                mask: torch.Tensor | None) -> torch.Tensor:
        out = self.attend(x, cos, sin, kv, mask)
        return linear(out, self.o_proj.weight, self.o_proj.bias)

    def attend(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, kv: KVStore | CacheKVStore,
               mask: torch.Tensor | None, norm_eps: float | None = None,
               qkv: torch.Tensor | None = None) -> torch.Tensor:
        """Everything before o_proj: x [B, L, hidden] -> attention output [B, L, heads * head_dim].

        norm_eps (deferred norm, module docstring): x is the un-normalised residual stream, the input
        norm's weight is folded into the q/k/v weight, and the q/k-norm launch scales q, k and v by
        1/rms(x) with this eps; only over a cache store (the decode steps).
        qkv [B, L, (heads + 2 kv heads) * head_dim]: x's fused q/k/v projection, already known (the
        code predictor looks it up in a table, CodePredictor._qkv_tables), so the GEMM is skipped."""
        batch, length, _ = x.shape
        q, k, v = self._project(x) if qkv is None else self._split(qkv)
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
            deferred = {} if norm_eps is None else {"norm_source": x, "norm_eps": norm_eps}
            read_target = kv.one_token_target(self.layer_idx) if length == 1 else None
            if read_target is not None:
                # one token per row: the write and the attention are one launch
                out = norm_rope_attend(q, k, v, *norm_args, *write_target(self.layer_idx),
                                       *read_target, self.head_dim ** -0.5, **deferred)
                return out.view(batch, length, self.num_heads * self.head_dim)
            q = qk_norm_rope_write_kv(q, k, v, *norm_args, *write_target(self.layer_idx), **deferred)
            out = kv.attend(self.layer_idx, q, mask)
        else:
            if norm_eps is not None:
                raise ValueError("a deferred input norm needs a cache store (the decode steps)")
            q, k = qk_norm_rope(q, k, *norm_args)
            k_all, v_all = kv.update(self.layer_idx, k, v.transpose(1, 2))
            out = grouped_attention(q, k_all, v_all, mask)  # [B, H, L, D]
        return out.transpose(1, 2).reshape(batch, length, self.num_heads * self.head_dim)


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
        return linear(self.activation(x), self.down_proj.weight, self.down_proj.bias)

    def activation(self, x: torch.Tensor, norm_eps: float | None = None) -> torch.Tensor:
        """silu(gate(x)) * up(x), the input of down_proj (after fuse_projections). One GEMM for gate
        and up, one launch for silu(gate) * up (kernels/silu_mul.py); at a few rows one launch for
        both (kernels/small_m_linear.py). norm_eps (deferred norm, module docstring): x is the
        un-normalised residual stream, the norm weight is in the gate/up weight, 1/rms(x) is applied
        before the SwiGLU."""
        weight, bias = self._gate_up
        return linear_silu_mul(x, weight, bias, norm_eps=norm_eps)


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
        self.deferred_norm = False  # fold_norms() done: decode steps take the deferred-norm route

    def fuse_projections(self, fold_norms: bool | None = None) -> None:
        """q/k/v and gate/up of every layer as one GEMM each (see fuse_linears), then fold_norms()
        unless fold_norms is False (None: as QWEN3_TTS_DEFERRED_NORM says, on by default)."""
        for layer in self.layers:
            layer.self_attn.fuse_projections()
            layer.mlp.fuse_projections()
        if deferred_norm_wanted() if fold_norms is None else fold_norms:
            self.fold_norms()

    def fold_norms(self) -> bool:
        """Fold every layer's input and post-attention norm weight into the fused q/k/v and gate/up
        weights (module docstring: deferred norms) and set those norm weights to one, so every path
        still computes the same function; the decode steps then skip the norm launches. The product
        is formed in fp32 and rounded once. Not done (False) where a projection has a bias (the 1/rms
        factor must not scale it) or before fuse_projections. Idempotent: a second fold multiplies by
        the unit weights."""
        fused = [(layer.self_attn._qkv, layer.input_layernorm, layer.mlp._gate_up, layer.post_attention_layernorm)
                 for layer in self.layers]
        if any(qkv is None or gate_up is None or qkv[1] is not None or gate_up[1] is not None
               for qkv, _, gate_up, _ in fused):
            return False
        with torch.no_grad():
            for qkv, input_norm, gate_up, post_norm in fused:
                for weight, norm in ((qkv[0], input_norm), (gate_up[0], post_norm)):
                    # in place: the q/k/v (gate/up) Linear weights are views of the fused tensor
                    weight.copy_(weight.float() * norm.weight.float()[None, :])
                    norm.weight.fill_(1.0)
        self.deferred_norm = True
        return True

    def run(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, kv: KVStore | CacheKVStore,
            mask: torch.Tensor | None, consume_input: bool = False,
            first_qkv: torch.Tensor | None = None) -> torch.Tensor:
        """x [B, L, hidden] -> post-final-norm hidden [B, L, hidden].

        The same sums as calling each layer in turn, but every residual add is done by the norm that
        follows it (kernels/add_rmsnorm.py: one launch returns the sum and its normalization), or,
        after fold_norms() and over a cache store, by the GEMM before it (module docstring: deferred
        norms). That route keeps the residual stream in place: x itself when consume_input says the
        caller is done with it (a fresh temporary), a copy otherwise.

        first_qkv: layer 0's fused q/k/v projection of x with the folded weight (`qkv_weight(0)`),
        already known; only on the deferred route (elsewhere layer 0 projects the normalised x)."""
        if self.deferred_norm and hasattr(kv, "write_target"):
            # the stream is updated in place through [-1, hidden] views: a copy is made contiguous
            h = x if consume_input else x.clone(memory_format=torch.contiguous_format)
            return self._run_deferred(h, cos, sin, kv, mask, first_qkv)
        if first_qkv is not None:
            raise ValueError("first_qkv is the folded projection of the deferred-norm route (a cache store "
                             "after fold_norms); this call takes the norm-first route")
        residual = x
        h = self.layers[0].input_layernorm(x)
        for i, layer in enumerate(self.layers):
            attn = layer.self_attn(h, cos, sin, kv, mask)
            post = layer.post_attention_layernorm
            h, residual = add_rms_norm(attn, residual, post.weight, post.eps)
            after = self.layers[i + 1].input_layernorm if i + 1 < len(self.layers) else self.norm
            h, residual = add_rms_norm(layer.mlp(h), residual, after.weight, after.eps)
        return h

    def qkv_weight(self, layer_idx: int) -> torch.Tensor | None:
        """The fused q/k/v weight [q + 2 kv, hidden] the deferred route multiplies the raw residual
        stream by (the input norm folded in); None off that route or with a q/k/v bias."""
        qkv = self.layers[layer_idx].self_attn._qkv
        if not self.deferred_norm or qkv is None or qkv[1] is not None:
            return None
        return qkv[0]

    def _run_deferred(self, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, kv: CacheKVStore,
                      mask: torch.Tensor | None, first_qkv: torch.Tensor | None = None) -> torch.Tensor:
        """run() with folded norms over a cache store; h [B, L, hidden] is the residual stream, updated
        in place. Per layer: q/k/v GEMM (layer 0: first_qkv where given), q/k-norm + RoPE + KV write
        (scaled by 1/rms(h)), attention, o_proj added into h, gate/up GEMM, SwiGLU (scaled by
        1/rms(h)), down_proj added into h."""
        for i, layer in enumerate(self.layers):
            attn = layer.self_attn.attend(h, cos, sin, kv, mask, norm_eps=layer.input_layernorm.eps,
                                          qkv=first_qkv if i == 0 else None)
            o_proj = layer.self_attn.o_proj
            linear_add_(h, attn, o_proj.weight, o_proj.bias)
            act = layer.mlp.activation(h, norm_eps=layer.post_attention_layernorm.eps)
            down = layer.mlp.down_proj
            linear_add_(h, act, down.weight, down.bias)
        return self.norm(h)
