"""Frame attention in Triton: the code predictor's one-query decode step, QK-norm + RoPE, the K/V
cache write and the attention over the frame cache, in ONE launch.

Before, each predictor step ran two launches per layer: qk_norm_rope_write_kv (q/k normalised and
rotated, K and V written into the frame cache) and slot_decode_attention (the new query over the
cached keys). Both are latency-bound at these sizes (16 cached positions at most), so fusing them
saves one launch and one dependent trip through memory per layer and step (15 steps x 5 layers).

Grid (B, KV). A program owns batch row b (cache row b) and kv head g:
1. loads cos/sin of row b, normalises and rotates k[b, 0, g] and stores it at
   k_cache[b, g, position[b]], and copies v[b, 0, g] to v_cache[b, g, position[b]];
2. normalises and rotates the GROUP = H // KV query heads of g (query head h reads kv head
   h // GROUP), padded to BLOCK_H rows (a power of two; padded rows are never stored);
3. attends those queries over cache positions 0..position[b]: the earlier positions are loaded
   from the cache (masked: positions >= position[b] are never read, they hold an earlier frame's
   keys), the new key and value are the registers of step 1;
4. stores out[b, g * GROUP + h] (contiguous [B, H, D], q's dtype).

Why registers for the new key and no tl.debug_barrier(): a barrier would make the stores of step 1
visible to the loads of step 3 (bar.sync orders global memory within the CTA), but the loads would
then wait for the stores, one extra dependent memory round trip in a kernel that is nothing but
latency. With the new key in registers, the cache loads of earlier positions depend on nothing the
program computes and overlap the norm/rope math, and no program ever reads a position that anyone
writes during the launch (program (b, g) writes only [b, g, position[b]], which it does not read),
so there is no ordering to enforce at all. The registers hold exactly the stored values (fp32 of
the rounded K, V as loaded), so the attention sees the bits the cache gets.

Rounding of q and K: exactly kernels/qk_norm_rope_triton.py's (its docstring explains the rules):
fp32 math, rounded at the same five points with its `_round` (bf16 by bit arithmetic), rsqrt from
tl.math.rsqrt, no FMA contraction (its LAUNCH_OPTIONS). _norm_rope_heads itself does not fit (it
stores its result and returns nothing; here q is consumed in registers), so `_norm_rope_tile`
below is its arithmetic returning the values instead, with the rotation's negation done on the sign
bit (`_negate`: triton 3.6 compiles float `-x` as `0 - x`, which loses the sign of a zero); the
tests hold both q and K to the reference bit for bit.

Attention: fp32 throughout (scores, exp2 softmax with scale * log2(e) folded in, P.V), with the
products as broadcast-multiply-reduce over [BLOCK_H, BLOCK_N, D/2] tiles rather than tl.dot: GROUP
is 2 for the predictor, far below a tensor-core tile's 16 rows, and fp32 keeps the interpreter and
the GPU on one code path (the interpreter mis-evaluates bf16 dots). The whole cache fits one tile
(BLOCK_N = next power of two >= P, P <= MAX_POSITIONS), so the softmax is a plain two-pass one over
registers, not an online one. The output is rounded once (bf16 to nearest even by bits).

Measured (H100, triton 3.6, bf16 16/8/128, P = 16, inside a CUDA graph, us a call; the two
launches it replaces in brackets): B=1 4.67 (4.27), B=16 4.90 (4.63), B=64 6.16 (5.92), B=256
12.46 (12.00). Bit-exact q/K/V there too. So far no faster than the pair: inside a graph a launch
costs little, and one program now runs the norm, the rope and the attention back to back.

Positions must lie in [0, P) (not checked on the host: that would sync). Outside, nothing is
written and only positions in [0, min(position, P)) are read: the output then covers those plus the
new key. Capturable in a CUDA graph: no host syncs; the only allocation is the output.
The module reads TRITON_INTERPRET when imported (triton.jit picks the interpreter at decoration).
"""
from __future__ import annotations

from typing import Optional

import torch
import triton
import triton.language as tl

from kernels.bf16_bits import from_f32 as _from_f32, to_f32 as _to_f32
from kernels.frame_attention import check_args
from kernels.qk_norm_rope_triton import LAUNCH_OPTIONS, _load_rope_halves, _round

SUPPORTED_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
MIN_HEAD_DIM, MAX_HEAD_DIM = 16, 256
# The cache is one register tile; the predictor's frame has 16 positions. Longer caches belong to
# the slot kernel's looped, split attention.
MAX_POSITIONS = 32
_ROUND_MODE = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2}
_LOG2E = 1.4426950408889634


def choose_num_warps(batch: int, num_kv_heads: int) -> int:
    """2 warps while the grid is small, 1 once B * KV >= 512 programs fill the GPU. H200, triton 3.6,
    bf16 16/8/128, P = 16, in a CUDA graph (us a call, 1/2/4 warps): B=1 5.6/4.6/5.1, B=64
    6.2/6.5/7.2, B=256 12.6/17.4/21.3."""
    return 1 if batch * num_kv_heads >= 512 else 2


@triton.jit
def _negate(x):
    """-x by flipping the sign bit. Triton 3.6 (the GPU image's) lowers float `-x` to `0 - x`, on the
    GPU and in the interpreter alike, which turns -(+0.0) into +0.0 where torch.neg gives -0.0, and
    a zero q or K element then has the wrong sign bit (triton >= 3.7 emits a true fneg)."""
    return (x.to(tl.uint32, bitcast=True) ^ 0x80000000).to(tl.float32, bitcast=True)


@triton.jit
def _norm_rope_tile(x_rows, w_ptr, cos_lo, cos_hi, sin_lo, sin_hi, row_ok, eps,
                    HALF: tl.constexpr, ROUND: tl.constexpr):
    """RMSNorm then NeoX RoPE of the rows x_rows [R, 1] (pointers to each head's first element,
    masked by row_ok [R, 1]) -> (low half, high half) as fp32 [R, HALF] tiles holding the rounded
    values. _norm_rope_heads's arithmetic, rounding point for rounding point, returning instead of
    storing (and with a sign-exact negation, see _negate); masked rows come out as zeros."""
    cols = tl.arange(0, HALF)[None, :]
    x_lo = tl.load(x_rows + cols, mask=row_ok, other=0.0).to(tl.float32)
    x_hi = tl.load(x_rows + HALF + cols, mask=row_ok, other=0.0).to(tl.float32)

    var = (tl.sum(x_lo * x_lo, axis=1) + tl.sum(x_hi * x_hi, axis=1)) / (2 * HALF)
    rstd = tl.math.rsqrt(var + eps)[:, None]

    w_lo = tl.load(w_ptr + cols).to(tl.float32)
    w_hi = tl.load(w_ptr + HALF + cols).to(tl.float32)
    y_lo = _round(w_lo * _round(x_lo * rstd, ROUND), ROUND)
    y_hi = _round(w_hi * _round(x_hi * rstd, ROUND), ROUND)

    # rotated = cat(-y[HALF:], y[:HALF]); out = y * cos + rotated * sin
    out_lo = _round(_round(y_lo * cos_lo, ROUND) + _round(_negate(y_hi) * sin_lo, ROUND), ROUND)
    out_hi = _round(_round(y_hi * cos_hi, ROUND) + _round(y_lo * sin_hi, ROUND), ROUND)
    return out_lo, out_hi


@triton.jit
def _frame_attention_kernel(
    q_ptr, k_ptr, v_ptr, qw_ptr, kw_ptr, cos_ptr, sin_ptr, kc_ptr, vc_ptr, pos_ptr, out_ptr, qo_ptr,
    num_positions, eps, qk_scale,
    q_stride_b, q_stride_h, k_stride_b, k_stride_h, v_stride_b, v_stride_h,
    cos_stride_b, sin_stride_b, pos_stride,
    kc_stride_s, kc_stride_h, kc_stride_p, vc_stride_s, vc_stride_h, vc_stride_p,
    GROUP: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr, HALF: tl.constexpr,
    ROUND: tl.constexpr, WRITE_Q: tl.constexpr,
):
    b = tl.program_id(0).to(tl.int64)  # int64: b * stride can pass 2^31 at large batches
    kv_head = tl.program_id(1)
    num_heads = tl.num_programs(1) * GROUP
    cols = tl.arange(0, HALF)[None, :]  # [1, HALF]
    out_ty = kc_ptr.dtype.element_ty

    # the token's single position (L = 1): cos/sin row l = 0, no l stride needed
    cos_lo, cos_hi, sin_lo, sin_hi = _load_rope_halves(cos_ptr, sin_ptr, b, 0, cos_stride_b, 0,
                                                       sin_stride_b, 0, HALF)
    pos = tl.load(pos_ptr + b * pos_stride).to(tl.int64)
    in_cache = (pos >= 0) & (pos < num_positions)

    # 1. the new key (normalised + rotated) and value: registers for step 3, and the cache
    one_row = tl.full([1, 1], True, tl.int1)
    k_lo, k_hi = _norm_rope_tile(k_ptr + b * k_stride_b + kv_head * k_stride_h + tl.zeros([1, 1], tl.int64),
                                 kw_ptr, cos_lo, cos_hi, sin_lo, sin_hi, one_row, eps, HALF, ROUND)
    v_row = v_ptr + b * v_stride_b + kv_head * v_stride_h
    v_lo_raw = tl.load(v_row + cols)  # [1, HALF], stored unchanged
    v_hi_raw = tl.load(v_row + HALF + cols)
    if in_cache:  # out of contract: skipped rather than written outside the cache
        kc_row = kc_ptr + b * kc_stride_s + kv_head * kc_stride_h + pos * kc_stride_p
        vc_row = vc_ptr + b * vc_stride_s + kv_head * vc_stride_h + pos * vc_stride_p
        tl.store(kc_row + cols, k_lo.to(out_ty))  # exact: values are already representable
        tl.store(kc_row + HALF + cols, k_hi.to(out_ty))
        tl.store(vc_row + cols, v_lo_raw)
        tl.store(vc_row + HALF + cols, v_hi_raw)
    v_lo = _to_f32(v_lo_raw)  # exact (bf16 by bits: the interpreter's cast mangles subnormals)
    v_hi = _to_f32(v_hi_raw)

    # 2. the GROUP query heads of this kv head, padded to BLOCK_H rows
    offs_h = tl.arange(0, BLOCK_H)[:, None]  # [BLOCK_H, 1]
    head_ok = offs_h < GROUP
    heads = kv_head * GROUP + offs_h
    q_lo, q_hi = _norm_rope_tile(q_ptr + b * q_stride_b + heads.to(tl.int64) * q_stride_h, qw_ptr,
                                 cos_lo, cos_hi, sin_lo, sin_hi, head_ok, eps, HALF, ROUND)
    out_rows = (b * num_heads + heads) * (2 * HALF)  # [BLOCK_H, 1] offsets into [B, H, D]
    if WRITE_Q:  # tests: the rounded q, to hold it to the reference bit for bit
        tl.store(qo_ptr + out_rows + cols, q_lo.to(qo_ptr.dtype.element_ty), mask=head_ok)
        tl.store(qo_ptr + out_rows + HALF + cols, q_hi.to(qo_ptr.dtype.element_ty), mask=head_ok)

    # 3. attention over the earlier positions 0..pos-1 (cache) and pos itself (registers)
    offs_n = tl.arange(0, BLOCK_N)
    key_ok = (offs_n < pos) & (offs_n < num_positions)  # never position pos or later: stale keys
    kc_base = kc_ptr + b * kc_stride_s + kv_head * kc_stride_h + offs_n[:, None] * kc_stride_p
    vc_base = vc_ptr + b * vc_stride_s + kv_head * vc_stride_h + offs_n[:, None] * vc_stride_p
    kc_lo = _to_f32(tl.load(kc_base + cols, mask=key_ok[:, None], other=0.0))  # [BLOCK_N, HALF]
    kc_hi = _to_f32(tl.load(kc_base + HALF + cols, mask=key_ok[:, None], other=0.0))
    vc_lo = _to_f32(tl.load(vc_base + cols, mask=key_ok[:, None], other=0.0))
    vc_hi = _to_f32(tl.load(vc_base + HALF + cols, mask=key_ok[:, None], other=0.0))

    # scores in the log2 domain: [BLOCK_H, BLOCK_N] for the cache, [BLOCK_H] for the new key
    s = (tl.sum(q_lo[:, None, :] * kc_lo[None, :, :], axis=2)
         + tl.sum(q_hi[:, None, :] * kc_hi[None, :, :], axis=2)) * qk_scale
    s = tl.where(key_ok[None, :], s, float("-inf"))
    s_new = (tl.sum(q_lo * k_lo, axis=1) + tl.sum(q_hi * k_hi, axis=1)) * qk_scale
    m = tl.maximum(tl.max(s, axis=1), s_new)  # finite: the new key is always there
    p = tl.exp2(s - m[:, None])  # 0 for masked positions
    p_new = tl.exp2(s_new - m)[:, None]  # [BLOCK_H, 1]
    denom = tl.sum(p, axis=1)[:, None] + p_new
    acc_lo = tl.sum(p[:, :, None] * vc_lo[None, :, :], axis=1) + p_new * v_lo  # [BLOCK_H, HALF]
    acc_hi = tl.sum(p[:, :, None] * vc_hi[None, :, :], axis=1) + p_new * v_hi

    # 4. the output, rounded once
    out_el = out_ptr.dtype.element_ty
    tl.store(out_ptr + out_rows + cols, _from_f32(acc_lo / denom, out_el), mask=head_ok)
    tl.store(out_ptr + out_rows + HALF + cols, _from_f32(acc_hi / denom, out_el), mask=head_ok)


def is_interpreting() -> bool:
    """True when triton.jit built the interpreter (TRITON_INTERPRET=1 at import), not a GPU kernel."""
    return not isinstance(_frame_attention_kernel, triton.runtime.JITFunction)


def block_sizes(num_heads: int, num_kv_heads: int, num_positions: int) -> tuple[int, int]:
    """(BLOCK_H, BLOCK_N): the query group and the cache, each padded to a power of two."""
    return triton.next_power_of_2(num_heads // num_kv_heads), triton.next_power_of_2(num_positions)


def frame_attention_triton(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_weight: torch.Tensor,
                           k_weight: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, eps: float,
                           k_cache: torch.Tensor, v_cache: torch.Tensor, position: torch.Tensor, scale: float, *,
                           q_out: Optional[torch.Tensor] = None, num_warps: Optional[int] = None) -> torch.Tensor:
    """q [B, 1, H, D], k/v [B, 1, KV, D] (last dim contiguous, other strides free: views of one fused
    projection), weights [D], cos/sin [B, 1, D], k_cache/v_cache [S >= B, KV, P, D] (one layer of the
    frame cache; head_dim contiguous, written in place; P <= MAX_POSITIONS), position [B] int64/int32
    (any stride, 0 included: an expanded scalar), all but position in one dtype of SUPPORTED_DTYPES;
    D a power of two in [MIN_HEAD_DIM, MAX_HEAD_DIM].

    Writes K (normalised+rotated) and V at [b, :, position[b]] and returns contiguous [B, H, D]:
    query head h of row b over cache positions 0..position[b] of row b, kv head h // (H // KV).
    q_out (tests): a contiguous [B, H, D] tensor of q's dtype that receives the rounded q.
    No host syncs: capturable in a CUDA graph."""
    check_args(q, k, v, q_weight, k_weight, cos, sin, k_cache, v_cache, position)  # the op's own checks
    dtype = q.dtype
    if dtype not in SUPPORTED_DTYPES:
        raise ValueError(f"frame_attention_triton supports {SUPPORTED_DTYPES}, got {dtype}")
    batch, _, num_heads, head_dim = q.shape
    num_kv, num_positions = k_cache.shape[1], k_cache.shape[2]
    if head_dim & (head_dim - 1) or not MIN_HEAD_DIM <= head_dim <= MAX_HEAD_DIM:
        raise ValueError(f"frame_attention_triton needs a power-of-two head_dim in [{MIN_HEAD_DIM}, "
                         f"{MAX_HEAD_DIM}], got {head_dim}")
    if not 1 <= num_positions <= MAX_POSITIONS:
        raise ValueError(f"frame_attention_triton holds the cache in one tile: P must be in [1, {MAX_POSITIONS}], "
                         f"got {num_positions}")
    if k_cache.stride(-1) != 1 or v_cache.stride(-1) != 1:
        raise ValueError("frame_attention_triton writes in place: the caches' head_dim must be contiguous")
    if q_out is not None and (q_out.shape != (batch, num_heads, head_dim) or q_out.dtype != dtype
                              or not q_out.is_contiguous() or q_out.device != q.device):
        raise ValueError(f"frame_attention_triton: q_out must be a contiguous {dtype} [{batch}, {num_heads}, "
                         f"{head_dim}] on {q.device}")

    q, k, v, cos, sin = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v, cos, sin))
    q_weight, k_weight = q_weight.contiguous(), k_weight.contiguous()
    out = torch.empty((batch, num_heads, head_dim), dtype=dtype, device=q.device)
    if batch == 0:
        return out
    block_h, block_n = block_sizes(num_heads, num_kv, num_positions)
    _frame_attention_kernel[(batch, num_kv)](
        q, k, v, q_weight, k_weight, cos, sin, k_cache, v_cache, position, out,
        out if q_out is None else q_out,  # unused unless WRITE_Q (constexpr branch)
        num_positions, float(eps), float(scale) * _LOG2E,
        q.stride(0), q.stride(2), k.stride(0), k.stride(2), v.stride(0), v.stride(2),
        cos.stride(0), sin.stride(0), position.stride(0),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2),
        GROUP=num_heads // num_kv, BLOCK_H=block_h, BLOCK_N=block_n, HALF=head_dim // 2,
        ROUND=_ROUND_MODE[dtype], WRITE_Q=q_out is not None,
        num_warps=choose_num_warps(batch, num_kv) if num_warps is None else num_warps, **LAUNCH_OPTIONS,
    )
    return out
