"""One launch for a decode step's whole attention before o_proj: the q/k-norm + RoPE + KV write of
kernels/qk_norm_rope_triton.py and the slot decode attention of kernels/slot_attention_triton.py.

Why: at batch 256 the frame step runs that pair for 70 one-query code predictor layer passes, and
the first launch is ~4.4 us of mostly fixed cost (H200 profile,
2026-11-26-talker-profile-ops-dc64e31-h200.txt) plus a kernel boundary. Folding it into the
attention's programs removes the launch and the boundary and keeps only its few loads.

Grid (B, KV), one token per row (L = 1). Program (b, g) owns kv head g of row b, the same split of
work as the attention kernel, and first does that head's share of the prologue:
1. with a deferred input norm, the token's factor s = rsqrt(mean(h^2) + eps) from h[b] (as every
   program of the write kernel computes it);
2. q-norm + RoPE of the GROUP query heads that read kv head g, stored to q_out[b] (a scratch the
   caller may keep: it equals qk_norm_rope_write_kv's q_out);
3. k-norm + RoPE of kv head g into k_cache[rows[b], g, starts[b]], and V (scaled by s when
   deferred) into v_cache at the same place.
No other program reads or writes those addresses, so a CTA barrier is the only synchronization
needed: after it the program reloads its q heads and runs the attention loop (slot_attention_triton
.attend_keys) over keys 0..lengths[b]-1 of cache row slots[b], the new key included.

The prologue is the write kernel's code (_norm_rope_heads, _copy_heads, row_inverse_rms) with the
same rounding, so q_out and the caches are bit for bit what qk_norm_rope_write_kv writes. The launch
has FMA contraction off (the prologue needs it off to round each product as eager does), so the
attention's online softmax rounds its products separately: its output can differ from the separate
attention kernel's (contracted) by fp32 rounding, which bf16 output rounding nearly always hides.

Where it runs (fused_launch_fits): over a short cache, the code predictor's 16 positions, which the
attention never splits (with a key-range split, programs of other splits would read the new key
before it is written), and not under PDL. Elsewhere -- the talker's slot cache, PDL launches -- the
launcher runs the two kernels it replaces: measured, the one launch lost there.

Capturable in a CUDA graph: no host syncs; allocations are the output and the q scratch.
"""
from __future__ import annotations

from typing import Optional

import torch
import triton
import triton.language as tl

from kernels.bf16_bits import from_f32 as _from_f32, to_f32 as _to_f32
from kernels.pdl import pdl_launch, use_pdl, wait_for_prior_grid
from kernels.qk_norm_rope_triton import (
    LAUNCH_OPTIONS, MAX_HEAD_DIM, MIN_HEAD_DIM, NORM_CHUNK, SUPPORTED_DTYPES, _ROUND_MODE,
    _check, _check_cache_destination, _check_norm_source, _copy_heads, _load_rope_halves, _norm_rope_heads,
    qk_norm_rope_write_kv_triton,
)
from kernels.rmsnorm_triton import row_inverse_rms
from kernels.slot_attention_triton import (
    SHORT_CACHE_POSITIONS, SUPPORTED_HEAD_DIMS, _LOG2E, attend_keys, default_config, is_interpreting, normalize_rows,
    slot_decode_attention_triton,
)


@triton.jit
def _norm_rope_attend_kernel(
    q_ptr, k_ptr, v_ptr, qw_ptr, kw_ptr, cos_ptr, sin_ptr, qo_ptr, kc_ptr, vc_ptr,
    rows_ptr, starts_ptr, slots_ptr, lengths_ptr, ns_ptr, out_ptr,
    num_cache_rows, num_cache_positions, eps, norm_cols, norm_cols_f, norm_eps, qk_scale,
    q_stride_b, q_stride_h, k_stride_b, k_stride_h, v_stride_b, v_stride_h,
    cos_stride_b, sin_stride_b, qo_stride_b, qo_stride_h,
    rows_stride, starts_stride, slots_stride, lengths_stride,
    kc_stride_s, kc_stride_h, kc_stride_p, vc_stride_s, vc_stride_h, vc_stride_p,
    ns_stride_b,
    GROUP: tl.constexpr, GROUP_PAD: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_H: tl.constexpr,
    BLOCK_N: tl.constexpr, ROUND: tl.constexpr, HAS_NORM: tl.constexpr, NORM_BLOCK: tl.constexpr,
    NORM_CHUNKS: tl.constexpr, DOT_FP32: tl.constexpr, PDL: tl.constexpr, SINGLE_TILE: tl.constexpr = False,
):
    if PDL:   # first: nothing is read or written before the kernel ahead is done (kernels/pdl.py)
        wait_for_prior_grid()
    b = tl.program_id(0).to(tl.int64)
    kv_head = tl.program_id(1)
    num_heads = tl.num_programs(1) * GROUP
    HALF: tl.constexpr = HEAD_DIM // 2

    if HAS_NORM:
        norm_scale = row_inverse_rms(ns_ptr + b * ns_stride_b, norm_cols, norm_cols_f, norm_eps,
                                     NORM_BLOCK, NORM_CHUNKS)
    else:
        norm_scale = 1.0
    cos_lo, cos_hi, sin_lo, sin_hi = _load_rope_halves(cos_ptr, sin_ptr, b, 0, cos_stride_b, 0, sin_stride_b, 0,
                                                       HALF)
    head0 = kv_head * GROUP
    # this kv head's query heads head0..head0+GROUP-1 (the mask bound is the group's end)
    _norm_rope_heads(q_ptr + b * q_stride_b, qw_ptr, qo_ptr + b * qo_stride_b,
                     cos_lo, cos_hi, sin_lo, sin_hi, head0, head0 + GROUP, q_stride_h, qo_stride_h, eps,
                     GROUP_PAD, HALF, ROUND, norm_scale, HAS_NORM)
    cache_row = tl.load(rows_ptr + b * rows_stride).to(tl.int64)
    cache_pos = tl.load(starts_ptr + b * starts_stride).to(tl.int64)
    in_cache = (cache_row >= 0) & (cache_row < num_cache_rows) & (cache_pos >= 0) & (cache_pos < num_cache_positions)
    if in_cache:  # out of range: skipped rather than written outside the cache (as the write kernel does)
        _norm_rope_heads(k_ptr + b * k_stride_b, kw_ptr, kc_ptr + cache_row * kc_stride_s + cache_pos * kc_stride_p,
                         cos_lo, cos_hi, sin_lo, sin_hi, kv_head, kv_head + 1, k_stride_h, kc_stride_h, eps,
                         1, HALF, ROUND, norm_scale, HAS_NORM)
        _copy_heads(v_ptr + b * v_stride_b, vc_ptr + cache_row * vc_stride_s + cache_pos * vc_stride_p,
                    kv_head, kv_head + 1, v_stride_h, vc_stride_h, 1, HEAD_DIM, norm_scale, HAS_NORM, ROUND)
    # the new key/value and q heads were stored by this program's threads; make them visible to all
    # of them (bar.sync orders the CTA's global writes before the loads below)
    tl.debug_barrier()

    slot = tl.load(slots_ptr + b * slots_stride).to(tl.int64)
    length = tl.load(lengths_ptr + b * lengths_stride).to(tl.int32)
    length = tl.maximum(tl.minimum(length, num_cache_positions), 0)
    offs_h = tl.arange(0, BLOCK_H)
    offs_d = tl.arange(0, HEAD_DIM)
    head_ok = offs_h < GROUP
    heads = head0 + offs_h
    q = tl.load(qo_ptr + b * qo_stride_b + heads[:, None] * qo_stride_h + offs_d[None, :],
                mask=head_ok[:, None], other=0.0)
    if DOT_FP32:
        q = _to_f32(q)
    acc, m_i, l_i = attend_keys(q, kc_ptr + slot * kc_stride_s + kv_head * kc_stride_h,
                                vc_ptr + slot * vc_stride_s + kv_head * vc_stride_h, kc_stride_p, vc_stride_p,
                                0, length, qk_scale, BLOCK_H, BLOCK_N, HEAD_DIM, DOT_FP32, SINGLE_TILE)
    out = normalize_rows(acc, l_i)  # length 0 -> zeros, not NaN
    out_offs = (b * num_heads + heads)[:, None] * HEAD_DIM + offs_d[None, :]
    tl.store(out_ptr + out_offs, _from_f32(out, out_ptr.dtype.element_ty), mask=head_ok[:, None])


def fused_launch_fits(batch: int, num_kv: int, num_positions: int, head_dim: int, dtype: torch.dtype,
                      device: torch.device) -> bool:
    """True where the one launch pays: a short cache (the code predictor's 16-position frame cache),
    which never splits, and no PDL launch.

    - A long cache (the talker's slot cache) keeps the pair: at batch 256 its programs run in ~5
      waves of 3 per SM, and each wave pays the prologue's latency before its first K/V load, so the
      one launch took 56.5 us against 43.1 us for the attention alone and ~4.7 us for the write
      kernel (H200, 256 positions; benchmarks/results/2026-11-26-attention-order-2618664-h200.json).
      The predictor's 2048 one-warp programs fit in about one wave, so the prologue's latency is
      paid about once.
    - Under PDL (the talker's 1-2 row graphs, kernels/pdl.py) a kernel boundary costs little and the
      pair's prologue runs on 4x the programs (H200, batch 1: 3.13 ms a step with the pair, 3.20 ms
      with one launch). 2026-11-26-fused-attention-h200.md has the figures."""
    if use_pdl(device) or num_positions > SHORT_CACHE_POSITIONS:
        return False
    return default_config(batch, num_kv, num_positions, head_dim, dtype, device)[3] == 1


def norm_rope_attend_triton(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor,
    cos: torch.Tensor, sin: torch.Tensor, eps: float, k_cache: torch.Tensor, v_cache: torch.Tensor,
    dest_rows: torch.Tensor, dest_positions: torch.Tensor, slots: torch.Tensor, lengths: torch.Tensor,
    scale: float, norm_source: Optional[torch.Tensor] = None, norm_eps: float = 0.0,
    one_launch: Optional[bool] = None, num_warps: Optional[int] = None, num_stages: Optional[int] = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """qk_norm_rope_write_kv_triton then slot_decode_attention_triton for one token per row, in one
    launch where the attention would not split (otherwise those two launches).

    q [B, 1, H, D], k/v [B, 1, KV, D] (last dim contiguous, other strides free), weights [D],
    cos/sin [B, 1, D], caches [S, KV, P, D] (one layer, written in place), dest_rows/dest_positions
    [B] where row b's K/V go, slots/lengths [B] which cache row it attends over and how many keys
    (any strides, 0 included). norm_source [B, 1, H_model] or None: the deferred input norm.

    one_launch: None lets fused_launch_fits choose; True runs the one kernel wherever the attention
    would not split (tests, benchmarks); False runs the pair. num_warps / num_stages override the
    attention kernel's choice for the one launch (benchmarks sweep them).

    Returns (attention output [B, H, D], q_out [B, H, 1, D]), both contiguous."""
    _check(q, k, q_weight, k_weight, cos, sin)
    _check_cache_destination(k, v, k_cache, v_cache, dest_rows, dest_positions)
    if norm_source is not None:
        _check_norm_source(q, norm_source)
    batch, seq_len, num_heads, head_dim = q.shape
    num_kv, num_positions = k.shape[2], k_cache.shape[2]
    if seq_len != 1:
        raise ValueError(f"norm_rope_attend_triton takes one token per row, got L = {seq_len}")
    if q.dtype not in SUPPORTED_DTYPES or any(t.dtype != q.dtype for t in (k, q_weight, k_weight, cos, sin)):
        raise ValueError(f"norm_rope_attend_triton needs one dtype of {SUPPORTED_DTYPES} for q, k, v, the weights, "
                         f"cos/sin and the caches")
    if head_dim not in SUPPORTED_HEAD_DIMS or not MIN_HEAD_DIM <= head_dim <= MAX_HEAD_DIM or num_heads % num_kv:
        raise ValueError(f"norm_rope_attend_triton: head_dim must be one of {SUPPORTED_HEAD_DIMS} and H a "
                         f"multiple of KV, got q {tuple(q.shape)}, k {tuple(k.shape)}")
    for name, t in (("slots", slots), ("lengths", lengths)):
        if t.shape != (batch,) or t.dtype not in (torch.int64, torch.int32) or t.device != q.device:
            raise ValueError(f"norm_rope_attend_triton: {name} must be int64/int32 [{batch}] on {q.device}, "
                             f"got {t.dtype} {tuple(t.shape)} on {t.device}")
    if one_launch is None:
        one_launch = fused_launch_fits(batch, num_kv, num_positions, head_dim, q.dtype, q.device)
    elif one_launch:   # forced, but never with a key-range split (the new key would not be seen)
        one_launch = default_config(batch, num_kv, num_positions, head_dim, q.dtype, q.device)[3] == 1
    if not one_launch:
        q_out = qk_norm_rope_write_kv_triton(q, k, v, q_weight, k_weight, cos, sin, eps, k_cache, v_cache,
                                             dest_rows, dest_positions, norm_source, norm_eps)
        out = slot_decode_attention_triton(q_out[:, :, 0], k_cache, v_cache, slots, lengths, scale)
        return out, q_out

    q, k, v, cos, sin = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v, cos, sin))
    q_weight, k_weight = q_weight.contiguous(), k_weight.contiguous()
    q_out = torch.empty((batch, num_heads, 1, head_dim), device=q.device, dtype=q.dtype)
    out = torch.empty((batch, num_heads, head_dim), device=q.device, dtype=q.dtype)
    if batch == 0:
        return out, q_out
    if norm_source is None:  # ns_ptr is never read: q stands in, the norm arguments are placeholders
        ns, norm_cols, ns_stride, norm_block, norm_chunks = q, 1, 0, 1, 0
    else:
        ns = norm_source if norm_source.stride(-1) == 1 else norm_source.contiguous()
        norm_cols, ns_stride = ns.shape[2], ns.stride(0)
        norm_block = min(triton.next_power_of_2(norm_cols), NORM_CHUNK)
        norm_chunks = triton.cdiv(norm_cols, norm_block)
    block_n, default_warps, default_stages, _ = default_config(batch, num_kv, num_positions, head_dim, q.dtype,
                                                               q.device)
    num_warps = num_warps or default_warps
    num_stages = num_stages or default_stages
    stage_option = {} if num_stages is None else {"num_stages": num_stages}
    group = num_heads // num_kv
    dot_fp32 = q.dtype == torch.float32 or (q.dtype == torch.bfloat16 and is_interpreting())
    _norm_rope_attend_kernel[(batch, num_kv)](
        q, k, v, q_weight, k_weight, cos, sin, q_out, k_cache, v_cache,
        dest_rows, dest_positions, slots, lengths, ns, out,
        k_cache.shape[0], num_positions, float(eps), norm_cols, float(norm_cols), float(norm_eps),
        float(scale) * _LOG2E,
        q.stride(0), q.stride(2), k.stride(0), k.stride(2), v.stride(0), v.stride(2),
        cos.stride(0), sin.stride(0), q_out.stride(0), q_out.stride(1),
        dest_rows.stride(0), dest_positions.stride(0), slots.stride(0), lengths.stride(0),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), v_cache.stride(0), v_cache.stride(1), v_cache.stride(2),
        ns_stride,
        GROUP=group, GROUP_PAD=triton.next_power_of_2(group), HEAD_DIM=head_dim,
        BLOCK_H=max(16, triton.next_power_of_2(group)), BLOCK_N=block_n, ROUND=_ROUND_MODE[q.dtype],
        HAS_NORM=norm_source is not None, NORM_BLOCK=norm_block, NORM_CHUNKS=norm_chunks, DOT_FP32=dot_fp32,
        SINGLE_TILE=num_positions <= block_n,   # the key range is [0, length <= num_positions)
        num_warps=num_warps, **stage_option, **LAUNCH_OPTIONS, **pdl_launch(q.device),
    )
    return out, q_out
