"""Decode attention in one op: q/k-norm + RoPE + KV write, then slot decode attention over the cache,
as one custom op, qwen3tts::norm_rope_attend, backed by one Triton launch
(kernels/norm_rope_attend_triton.py) where it can run, and by the two ops it fuses elsewhere:
qk_norm_rope_write_kv (kernels/qk_norm_rope.py) then slot_decode_attention (kernels/slot_attention.py),
each with its own routing. That pair is also the reference the kernel is tested against.

Used by the code predictor's one-token steps over its 16-position frame cache (every step after the
frame's first): per layer pass one launch instead of two, 70 a frame step. The talker's layers keep
the pair: over their long slot cache the one launch measured slower
(kernels/norm_rope_attend_triton.fused_launch_fits).

Routing, in order:
1. autograd needs gradients of the result -> the pair, outside the op;
inside the op:
2. QWEN3_TTS_FUSED_ATTENTION=0 -> the pair (A/B runs; read per call, so set it before a graph capture);
3. what either kernel of the pair would not take on Triton (dtype, head_dim, cache strides, a
   norm_source wider than 8192, no rows, CPU tensors unless QWEN3_TTS_NORM_ATTEND_CPU_TRITON=1 with
   TRITON_INTERPRET=1) -> the pair;
4. a Triton failure of this kernel was recorded earlier -> the pair;
5. otherwise the Triton launcher, which itself runs the pair's two kernels where the one launch does
   not pay (a long cache, PDL launches; kernels/norm_rope_attend_triton.fused_launch_fits). A failure
   to import, compile or launch is logged once, remembered, and this call and every later one use
   the pair.
Argument checks (metadata only, no host sync) raise ValueError before the op: those of the pair.
"""
from __future__ import annotations

import os
from typing import Optional

import torch

from kernels import qk_norm_rope as _qk
from kernels import slot_attention as _attn
from kernels.triton_route import TritonRoute

CPU_TRITON_ENV = "QWEN3_TTS_NORM_ATTEND_CPU_TRITON"
ENV = "QWEN3_TTS_FUSED_ATTENTION"  # "0": always the two-op pair

_route = TritonRoute("norm+RoPE+attention", "kernels.norm_rope_attend_triton", "norm_rope_attend_triton",
                     CPU_TRITON_ENV, __name__)
triton_failure = _route.triton_failure
reset_triton_failure = _route.reset_failure


def _pair(q, k, v, q_weight, k_weight, cos, sin, eps, k_cache, v_cache, dest_rows, dest_positions, slots,
          lengths, scale, norm_source=None, norm_eps=0.0) -> torch.Tensor:
    """The two ops this one fuses: [B, H, D] attention output, K/V written into the caches."""
    q_out = _qk.qk_norm_rope_write_kv(q, k, v, q_weight, k_weight, cos, sin, eps, k_cache, v_cache, dest_rows,
                                      dest_positions, norm_source, norm_eps)
    return _attn.slot_decode_attention(q_out[:, :, 0], k_cache, v_cache, slots, lengths, scale)


def _pair_takes_triton(q, k, v, q_weight, k_weight, cos, sin, k_cache, v_cache, norm_source) -> bool:
    """Both ops of the pair would run their Triton kernels on these arguments."""
    return (_qk._wants_triton_write_kv(q, k, v, q_weight, k_weight, cos, sin, k_cache, v_cache, norm_source)
            and _attn._wants_triton(q[:, 0]))


def _wants_triton(q, k, v, q_weight, k_weight, cos, sin, k_cache, v_cache, norm_source) -> bool:
    if os.environ.get(ENV, "1") == "0":
        return False
    return _pair_takes_triton(q, k, v, q_weight, k_weight, cos, sin, k_cache, v_cache, norm_source) and \
        _route.allows(q)


@torch.library.custom_op("qwen3tts::norm_rope_attend", mutates_args=("k_cache", "v_cache"))
def norm_rope_attend_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_weight: torch.Tensor,
                        k_weight: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, eps: float,
                        k_cache: torch.Tensor, v_cache: torch.Tensor, dest_rows: torch.Tensor,
                        dest_positions: torch.Tensor, slots: torch.Tensor, lengths: torch.Tensor, scale: float,
                        norm_source: Optional[torch.Tensor] = None, norm_eps: float = 0.0) -> torch.Tensor:
    """The op body: one launch or the pair; a fresh contiguous [B, H, D], K/V in the caches."""
    args = (q, k, v, q_weight, k_weight, cos, sin, eps, k_cache, v_cache, dest_rows, dest_positions, slots,
            lengths, scale, norm_source, norm_eps)
    if not _wants_triton(q, k, v, q_weight, k_weight, cos, sin, k_cache, v_cache, norm_source):
        return _pair(*args).contiguous()
    # the launcher returns (out, q_out); the pair stands in after a recorded failure
    return _route.run(args, lambda *a: (_pair(*a).contiguous(), None), wanted=True)[0]


@norm_rope_attend_op.register_fake
def _norm_rope_attend_fake(q, k, v, q_weight, k_weight, cos, sin, eps, k_cache, v_cache, dest_rows, dest_positions,
                           slots, lengths, scale, norm_source=None, norm_eps=0.0):
    batch, _, num_heads, head_dim = q.shape
    return q.new_empty((batch, num_heads, head_dim))


def norm_rope_attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_weight: torch.Tensor,
                     k_weight: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, eps: float,
                     k_cache: torch.Tensor, v_cache: torch.Tensor, dest_rows: torch.Tensor,
                     dest_positions: torch.Tensor, slots: torch.Tensor, lengths: torch.Tensor, scale: float,
                     norm_source: Optional[torch.Tensor] = None, norm_eps: float = 0.0) -> torch.Tensor:
    """One token per row: q [B, 1, H, D], k/v [B, 1, KV, D] (views of one projection are fine),
    q/k-norm weights [D], cos/sin [B, 1, D]; k_cache/v_cache [S, KV, P, D] (one layer; mutated);
    row b's normalised+rotated K and its V go to [dest_rows[b], :, dest_positions[b]], then its
    query heads attend over keys 0..lengths[b]-1 of cache row slots[b] (that new key included when
    slots == dest_rows and lengths == dest_positions + 1, as in every decode step). norm_source
    [B, 1, H_model] or None: the deferred input norm (kernels/qk_norm_rope.py).

    Returns [B, H, D] in q's dtype: slot_decode_attention(qk_norm_rope_write_kv(...)[:, :, 0], ...),
    up to the fp32 rounding of the attention's softmax (kernels/norm_rope_attend_triton.py). No host
    syncs (capturable)."""
    if q.dim() != 4 or q.shape[1] != 1:
        raise ValueError(f"norm_rope_attend takes one token per row: q [B, 1, H, D], got {tuple(q.shape)}")
    _qk._check_args(q, k, q_weight, k_weight, cos, sin)
    _qk._check_write_kv_args(k, v, k_cache, v_cache, dest_rows, dest_positions)
    _qk._check_norm_source(q, norm_source)
    _attn._check_args(q[:, 0], k_cache, v_cache, slots, lengths)
    tensors = (q, k, v, q_weight, k_weight, cos, sin) + (() if norm_source is None else (norm_source,))
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        return _pair(q, k, v, q_weight, k_weight, cos, sin, eps, k_cache, v_cache, dest_rows, dest_positions, slots,
                     lengths, scale, norm_source, norm_eps)
    return norm_rope_attend_op(q, k, v, q_weight, k_weight, cos, sin, float(eps), k_cache, v_cache, dest_rows,
                               dest_positions, slots, lengths, float(scale), norm_source, float(norm_eps))
