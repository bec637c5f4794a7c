"""Fused attention prologue in Triton: per-head RMSNorm of q and k, then NeoX RoPE, in ONE launch.

Replaces ~24 small eager kernels per attention layer (pow, mean, add, rsqrt, mul, cast, mul by the
weight, cat/neg/slices, four muls and two adds for the rotation, for q and for k).

Grid: axis 0 = rows (b, l) of the [B, L] token grid, axis 1 = tiles of BLOCK_H heads, the q tiles
first and then the k tiles, so each program is all-q or all-k (one scalar branch picks the tensor,
weight and output) and no tile straddles the two. Why not one program per row looping over heads:
at decode B * L is 1..64, so a per-row loop would run 24 heads one after the other on a handful of
SMs; with heads spread over programs every program does exactly one load -> compute -> store round
trip and the launch finishes in about one memory latency. When there are many rows the launcher
folds several heads into one program (BLOCK_H > 1) so programs do not get tiny.

The cache-writing variant (_qk_norm_rope_write_kv_kernel, qk_norm_rope_write_kv_triton) is the
same launch with a third tile class: q tiles, k tiles, then v tiles. Its k tiles store the
normalised+rotated K straight into one layer's KV cache [S, KV, P, D] at row dest_rows[b], position
dest_positions[b] + l (no k_out), and its v tiles copy V unchanged to the same place in the V cache,
so the attention's two cache writes (an index_put_ or copy_ each) cost no launch of their own.
Destinations are read on the device (no host sync, capturable in a CUDA graph); one outside the
cache is skipped, not written (the eager reference would raise or wrap a negative index): callers
keep them in range.

Deferred input norm (HAS_NORM, the write variant only): the decoder layer folds its input RMSNorm's
weight into the fused q/k/v projection and runs the GEMM on the raw residual stream h, so q, k and v
each lack the per-token factor s = rsqrt(mean(h^2) + eps). Every program (q, k and v tiles alike)
computes s for its token from the row h[b, l, :] itself -- sum of squares in fp32, correctly
rounded divide by H_model, + eps, rsqrt, as kernels/rmsnorm_triton.py does -- and multiplies its
loaded heads by it, rounded once to the dtype, before the usual norm/RoPE math; the v tiles then
scale and round instead of copying bits. Recomputing s per program instead of in a separate pass
costs an L2-resident re-read of a 2-4 KB row per program and saves the RMSNorm launch the deferral
exists to remove (an H100, bf16, 16/8 heads of 128, in a CUDA graph: the launch took 1.8 -> 2.2-2.3
us at B=1 and 3.5 -> 4.4-4.6 us at B=256 with H_model 1024-2048, where rms_norm_triton alone takes
1.7-2.1 us); a program reads the row in chunks of at most NORM_CHUNK elements so an 8192-wide
row does not need 8192 live values in a one-warp program. The chunked tree sum differs from
PyTorch's order like the per-head sums below: the variance can move by one fp32 ulp.

Each program loads the low and the high half of its heads' rows as two [BLOCK_H, D/2] tiles: the
NeoX rotation pairs element j with element j + D/2, so with the halves loaded apart the rotation is
plain elementwise arithmetic (no gather, permute or second load).

Rounding: PyTorch computes every bf16/fp16 elementwise op in fp32 and rounds once, so the kernel
computes in fp32 and rounds at the same five points (normalized value, times weight, x * cos,
rotated * sin, the sum). bf16 rounding is done with integer bit arithmetic (round to nearest even,
as c10::BFloat16 does) instead of a cast because the Triton interpreter truncates fp32 -> bf16;
one code path then gives the same bits on GPU and in the interpreter. fp16 rounds with a cast
(correct in both). The launcher turns off FMA contraction (enable_fp_fusion=False) so that fp32
products are rounded like the separate eager kernels round them. 1/sqrt uses tl.math.rsqrt: the
libdevice rsqrtf that torch.rsqrt also uses on CUDA, and numpy's 1/sqrt in the interpreter, which is
what torch.rsqrt computes on CPU. The sum of squares is a tree reduction whose order differs from
PyTorch's, which can move the variance by one fp32 ulp (rarely visible after bf16 rounding).

The module reads TRITON_INTERPRET when it is imported (triton.jit picks the interpreter at
decoration time), so tests that want the CPU interpreter must set it before the first import.
"""
from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from kernels.bf16_bits import round_bf16_f32, to_f32 as _widen  # a load as exact fp32 (bf16 by bits)
from kernels.pdl import pdl_launch, wait_for_prior_grid
from kernels.qk_norm_rope import MAX_NORM_COLS, _check_norm_source as check_norm_source  # no triton there
from kernels.rmsnorm_triton import row_inverse_rms

SUPPORTED_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
MIN_HEAD_DIM = 16
MAX_HEAD_DIM = 256
MAX_BLOCK_H = 8
NORM_CHUNK = 2048     # norm_source elements per load: 64 fp32 values per thread in a one-warp program
_ROUND_MODE = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2}
_MAX_GRID_Y = 65535  # CUDA limit on grid axis 1
# No FMA contraction: eager PyTorch rounds every product before the add (and x * x before the sum).
LAUNCH_OPTIONS = {"enable_fp_fusion": False}


@triton.jit
def _negate(x):
    """-x for fp32 x by flipping the sign bit. Triton 3.6 (the GPU image's) lowers float `-x` to
    `0 - x`, on the GPU and in the interpreter, and 0 - (+0.0) is +0.0 where torch.neg gives -0.0:
    a rotated element 0 * cos - 0 * sin then lost eager's sign (triton >= 3.7 emits a true fneg)."""
    return (x.to(tl.uint32, bitcast=True) ^ 0x80000000).to(tl.float32, bitcast=True)


@triton.jit
def _round(x, ROUND: tl.constexpr):
    """Round fp32 values to the storage dtype and return them as fp32 (0: fp32, 1: bf16, 2: fp16)."""
    if ROUND == 1:
        return round_bf16_f32(x)   # nearest even; the hardware cast on the GPU (kernels/bf16_bits.py)
    elif ROUND == 2:
        return x.to(tl.float16).to(tl.float32)
    else:
        return x


@triton.jit
def _norm_rope_heads(
    x_row, w_ptr, o_row, cos_lo, cos_hi, sin_lo, sin_hi,
    head0, num_heads, x_stride_h, o_stride_h, eps,
    BLOCK_H: tl.constexpr, HALF: tl.constexpr, ROUND: tl.constexpr,
    norm_scale, HAS_NORM: tl.constexpr,
):
    """Per-head RMSNorm + NeoX RoPE of heads head0..head0+BLOCK_H-1 (those < num_heads) of one
    token. HAS_NORM: the loaded values are first multiplied by norm_scale (the token's deferred
    input-norm factor) and rounded once to the dtype; otherwise norm_scale is not used."""
    heads = head0 + tl.arange(0, BLOCK_H)
    cols = tl.arange(0, HALF)
    mask = (heads < num_heads)[:, None]  # [BLOCK_H, 1]
    heads64 = heads.to(tl.int64)[:, None]

    x_ptrs = x_row + heads64 * x_stride_h + cols[None, :]
    x_lo = tl.load(x_ptrs, mask=mask, other=0.0).to(tl.float32)  # [BLOCK_H, HALF]
    x_hi = tl.load(x_ptrs + HALF, mask=mask, other=0.0).to(tl.float32)
    if HAS_NORM:  # the deferred input norm: (x.float() * s).to(x.dtype), then the usual math on that
        x_lo = _round(x_lo * norm_scale, ROUND)
        x_hi = _round(x_hi * norm_scale, ROUND)

    var = (tl.sum(x_lo * x_lo, axis=1) + tl.sum(x_hi * x_hi, axis=1)) / (2 * HALF)
    rstd = tl.math.rsqrt(var + eps)[:, None]  # [BLOCK_H, 1]

    w_lo = tl.load(w_ptr + cols).to(tl.float32)[None, :]
    w_hi = tl.load(w_ptr + HALF + cols).to(tl.float32)[None, :]
    y_lo = _round(w_lo * _round(x_lo * rstd, ROUND), ROUND)
    y_hi = _round(w_hi * _round(x_hi * rstd, ROUND), ROUND)

    # rotated = cat(-y[HALF:], y[:HALF]); out = y * cos + rotated * sin
    out_lo = _round(_round(y_lo * cos_lo, ROUND) + _round(_negate(y_hi) * sin_lo, ROUND), ROUND)
    out_hi = _round(_round(y_hi * cos_hi, ROUND) + _round(y_lo * sin_hi, ROUND), ROUND)

    o_ptrs = o_row + heads64 * o_stride_h + cols[None, :]
    out_ty = o_row.dtype.element_ty
    tl.store(o_ptrs, out_lo.to(out_ty), mask=mask)  # exact: values are already representable
    tl.store(o_ptrs + HALF, out_hi.to(out_ty), mask=mask)


@triton.jit
def _load_rope_halves(cos_ptr, sin_ptr, b, pos, cos_stride_b, cos_stride_l, sin_stride_b, sin_stride_l,
                      HALF: tl.constexpr):
    """cos/sin of token (b, pos) as four fp32 [1, HALF] tiles: cos low/high half, sin low/high half."""
    cols = tl.arange(0, HALF)
    cos_row = cos_ptr + b * cos_stride_b + pos * cos_stride_l
    sin_row = sin_ptr + b * sin_stride_b + pos * sin_stride_l
    cos_lo = tl.load(cos_row + cols).to(tl.float32)[None, :]
    cos_hi = tl.load(cos_row + HALF + cols).to(tl.float32)[None, :]
    sin_lo = tl.load(sin_row + cols).to(tl.float32)[None, :]
    sin_hi = tl.load(sin_row + HALF + cols).to(tl.float32)[None, :]
    return cos_lo, cos_hi, sin_lo, sin_hi


@triton.jit
def _copy_heads(x_row, o_row, head0, num_heads, x_stride_h, o_stride_h,
                BLOCK_H: tl.constexpr, HEAD_DIM: tl.constexpr,
                norm_scale, HAS_NORM: tl.constexpr, ROUND: tl.constexpr):
    """Copy heads head0..head0+BLOCK_H-1 (those < num_heads) of one token, bits unchanged; with
    HAS_NORM each value is multiplied by the token's deferred-norm factor and rounded once instead."""
    heads = head0 + tl.arange(0, BLOCK_H)
    cols = tl.arange(0, HEAD_DIM)
    mask = (heads < num_heads)[:, None]
    heads64 = heads.to(tl.int64)[:, None]
    x = tl.load(x_row + heads64 * x_stride_h + cols[None, :], mask=mask)
    if HAS_NORM:
        # (v.float() * s).to(v.dtype): _round leaves a value the store's cast keeps exactly (bf16:
        # the interpreter's truncating cast is then exact too)
        x = _round(_widen(x) * norm_scale, ROUND).to(o_row.dtype.element_ty)
    tl.store(o_row + heads64 * o_stride_h + cols[None, :], x, mask=mask)


@triton.jit
def _qk_norm_rope_kernel(
    q_ptr, k_ptr, qw_ptr, kw_ptr, cos_ptr, sin_ptr, qo_ptr, ko_ptr,
    seq_len, num_q_heads, num_kv_heads, eps,
    q_stride_b, q_stride_l, q_stride_h,
    k_stride_b, k_stride_l, k_stride_h,
    cos_stride_b, cos_stride_l, sin_stride_b, sin_stride_l,
    qo_stride_b, qo_stride_h, qo_stride_l,
    ko_stride_b, ko_stride_h, ko_stride_l,
    BLOCK_H: tl.constexpr, HALF: tl.constexpr, ROUND: tl.constexpr,
    PDL: tl.constexpr,
):
    if PDL:   # first: nothing is read or written before the kernel ahead is done (kernels/pdl.py)
        wait_for_prior_grid()
    row = tl.program_id(0)
    tile = tl.program_id(1)
    b = (row // seq_len).to(tl.int64)  # int64: b * stride overflows int32 on long prefills
    pos = (row % seq_len).to(tl.int64)

    cos_lo, cos_hi, sin_lo, sin_hi = _load_rope_halves(cos_ptr, sin_ptr, b, pos, cos_stride_b, cos_stride_l,
                                                       sin_stride_b, sin_stride_l, HALF)

    num_q_tiles = tl.cdiv(num_q_heads, BLOCK_H)
    if tile < num_q_tiles:
        _norm_rope_heads(
            q_ptr + b * q_stride_b + pos * q_stride_l, qw_ptr,
            qo_ptr + b * qo_stride_b + pos * qo_stride_l,
            cos_lo, cos_hi, sin_lo, sin_hi,
            tile * BLOCK_H, num_q_heads, q_stride_h, qo_stride_h, eps,
            BLOCK_H, HALF, ROUND, 1.0, False,
        )
    else:
        _norm_rope_heads(
            k_ptr + b * k_stride_b + pos * k_stride_l, kw_ptr,
            ko_ptr + b * ko_stride_b + pos * ko_stride_l,
            cos_lo, cos_hi, sin_lo, sin_hi,
            (tile - num_q_tiles) * BLOCK_H, num_kv_heads, k_stride_h, ko_stride_h, eps,
            BLOCK_H, HALF, ROUND, 1.0, False,
        )


@triton.jit
def _qk_norm_rope_write_kv_kernel(
    q_ptr, k_ptr, v_ptr, qw_ptr, kw_ptr, cos_ptr, sin_ptr, qo_ptr, kc_ptr, vc_ptr, rows_ptr, starts_ptr, ns_ptr,
    seq_len, num_q_heads, num_kv_heads, num_cache_rows, num_cache_positions, eps,
    norm_cols, norm_cols_f, norm_eps,
    q_stride_b, q_stride_l, q_stride_h,
    k_stride_b, k_stride_l, k_stride_h,
    v_stride_b, v_stride_l, v_stride_h,
    cos_stride_b, cos_stride_l, sin_stride_b, sin_stride_l,
    qo_stride_b, qo_stride_h, qo_stride_l,
    rows_stride, starts_stride,
    kc_stride_s, kc_stride_h, kc_stride_p,
    vc_stride_s, vc_stride_h, vc_stride_p,
    ns_stride_b, ns_stride_l,
    BLOCK_H: tl.constexpr, HALF: tl.constexpr, ROUND: tl.constexpr,
    HAS_NORM: tl.constexpr, NORM_BLOCK: tl.constexpr, NORM_CHUNKS: tl.constexpr,
    PDL: tl.constexpr,
):
    """Grid (B * L, q tiles + k tiles + v tiles). q as _qk_norm_rope_kernel; K (normalised and
    rotated) and V (copied) go to the caches at [dest_rows[b], :, dest_positions[b] + l].
    HAS_NORM: q, k and v are first scaled by the token's deferred input-norm factor, computed from
    ns_ptr's row [b, l, 0:norm_cols] (unit stride) in every program (ns_ptr unused otherwise)."""
    if PDL:   # first: nothing is read or written before the kernel ahead is done (kernels/pdl.py)
        wait_for_prior_grid()
    row = tl.program_id(0)
    tile = tl.program_id(1)
    b = (row // seq_len).to(tl.int64)
    pos = (row % seq_len).to(tl.int64)
    num_q_tiles = tl.cdiv(num_q_heads, BLOCK_H)
    num_kv_tiles = tl.cdiv(num_kv_heads, BLOCK_H)
    if HAS_NORM:
        norm_scale = row_inverse_rms(ns_ptr + b * ns_stride_b + pos * ns_stride_l, norm_cols, norm_cols_f,
                                    norm_eps, NORM_BLOCK, NORM_CHUNKS)
    else:
        norm_scale = 1.0

    if tile < num_q_tiles:
        cos_lo, cos_hi, sin_lo, sin_hi = _load_rope_halves(cos_ptr, sin_ptr, b, pos, cos_stride_b, cos_stride_l,
                                                           sin_stride_b, sin_stride_l, HALF)
        _norm_rope_heads(
            q_ptr + b * q_stride_b + pos * q_stride_l, qw_ptr,
            qo_ptr + b * qo_stride_b + pos * qo_stride_l,
            cos_lo, cos_hi, sin_lo, sin_hi,
            tile * BLOCK_H, num_q_heads, q_stride_h, qo_stride_h, eps,
            BLOCK_H, HALF, ROUND, norm_scale, HAS_NORM,
        )
    else:
        cache_row = tl.load(rows_ptr + b * rows_stride).to(tl.int64)
        cache_pos = tl.load(starts_ptr + b * starts_stride).to(tl.int64) + pos
        in_cache = (cache_row >= 0) & (cache_row < num_cache_rows) & (cache_pos >= 0) & (cache_pos < num_cache_positions)
        if in_cache:  # out of range: skipped rather than written outside the cache
            if tile < num_q_tiles + num_kv_tiles:
                cos_lo, cos_hi, sin_lo, sin_hi = _load_rope_halves(cos_ptr, sin_ptr, b, pos, cos_stride_b,
                                                                   cos_stride_l, sin_stride_b, sin_stride_l, HALF)
                _norm_rope_heads(
                    k_ptr + b * k_stride_b + pos * k_stride_l, kw_ptr,
                    kc_ptr + cache_row * kc_stride_s + cache_pos * kc_stride_p,
                    cos_lo, cos_hi, sin_lo, sin_hi,
                    (tile - num_q_tiles) * BLOCK_H, num_kv_heads, k_stride_h, kc_stride_h, eps,
                    BLOCK_H, HALF, ROUND, norm_scale, HAS_NORM,
                )
            else:
                _copy_heads(
                    v_ptr + b * v_stride_b + pos * v_stride_l,
                    vc_ptr + cache_row * vc_stride_s + cache_pos * vc_stride_p,
                    (tile - num_q_tiles - num_kv_tiles) * BLOCK_H, num_kv_heads, v_stride_h, vc_stride_h,
                    BLOCK_H, 2 * HALF, norm_scale, HAS_NORM, ROUND,
                )


def is_interpreting() -> bool:
    """True when triton.jit built the interpreter (TRITON_INTERPRET=1 at import), not a GPU kernel."""
    return not isinstance(_qk_norm_rope_kernel, triton.runtime.JITFunction)


@functools.lru_cache(maxsize=None)
def _num_sms(device: torch.device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count


def choose_block_h(num_rows: int, num_q_heads: int, num_kv_heads: int, num_sms: int, num_v_heads: int = 0) -> int:
    """Heads per program: 1 while that leaves <= ~4 programs per SM (decode: latency, spread the
    work), doubled while the grid would still have >= 4 programs per SM (prefill: fewer, fuller
    programs), capped by MAX_BLOCK_H and by the head counts. num_v_heads: the cache-writing
    variant's V heads, whose copy tiles are programs too."""
    cap = min(MAX_BLOCK_H, triton.next_power_of_2(max(num_q_heads, num_kv_heads)))
    block_h = 1
    while block_h < cap:
        nxt = 2 * block_h
        programs = num_rows * (triton.cdiv(num_q_heads, nxt) + triton.cdiv(num_kv_heads, nxt)
                               + triton.cdiv(num_v_heads, nxt))
        if programs < 4 * num_sms:
            break
        block_h = nxt
    return block_h


def _head_tiling(q: torch.Tensor, num_rows: int, num_kv_heads: int, block_h: int | None,
                 num_v_heads: int = 0) -> tuple[int, int]:
    """(heads per program, tiles on grid axis 1): block_h as given (checked) or chosen for the device."""
    num_q_heads = q.shape[2]
    if block_h is None:
        use_gpu = q.is_cuda and not is_interpreting()
        block_h = choose_block_h(num_rows, num_q_heads, num_kv_heads,
                                 _num_sms(q.device) if use_gpu else 1, num_v_heads)  # interpreter: fewer programs
    elif block_h < 1 or block_h & (block_h - 1):
        raise ValueError(f"block_h must be a power of two >= 1, got {block_h}")
    num_tiles = sum(triton.cdiv(n, block_h) for n in (num_q_heads, num_kv_heads, num_v_heads))
    if num_tiles > _MAX_GRID_Y:
        raise ValueError(f"too many head tiles ({num_tiles}) for grid axis 1")
    return block_h, num_tiles


def _num_warps(block_h: int, head_dim: int) -> int:
    return max(1, min(4, block_h * head_dim // 256))


def _check(q: torch.Tensor, k: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor,
           cos: torch.Tensor, sin: torch.Tensor) -> None:
    if q.dim() != 4 or k.dim() != 4:
        raise ValueError(f"qk_norm_rope expects q [B, L, H, D] and k [B, L, KV, D], got {tuple(q.shape)} and {tuple(k.shape)}")
    batch, seq_len, _, head_dim = q.shape
    if k.shape[0] != batch or k.shape[1] != seq_len or k.shape[3] != head_dim:
        raise ValueError(f"qk_norm_rope: k {tuple(k.shape)} does not match q {tuple(q.shape)} in B, L or D")
    for name, t, shape in (("q_weight", q_weight, (head_dim,)), ("k_weight", k_weight, (head_dim,)),
                           ("cos", cos, (batch, seq_len, head_dim)), ("sin", sin, (batch, seq_len, head_dim))):
        if tuple(t.shape) != shape:
            raise ValueError(f"qk_norm_rope: {name} must have shape {list(shape)}, got {tuple(t.shape)}")
        if t.device != q.device:
            raise ValueError(f"qk_norm_rope: {name} is on {t.device} but q is on {q.device}")
    if k.device != q.device:
        raise ValueError(f"qk_norm_rope: k is on {k.device} but q is on {q.device}")


def qk_norm_rope_triton(
    q: torch.Tensor,
    k: torch.Tensor,
    q_weight: torch.Tensor,
    k_weight: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    eps: float,
    block_h: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """q [B, L, H, D], k [B, L, KV, D] (last dim contiguous, any other strides: views of one fused
    projection are fine), weights [D], cos/sin [B, L, D] (any B/L strides, e.g. expanded), all of
    one dtype in SUPPORTED_DTYPES; D a power of two in [16, 256].

    Returns contiguous q_out [B, H, L, D] and k_out [B, KV, L, D]. No host syncs: the launch can be
    captured in a CUDA graph.
    """
    _check(q, k, q_weight, k_weight, cos, sin)
    dtype = q.dtype
    if dtype not in SUPPORTED_DTYPES:
        raise ValueError(f"qk_norm_rope_triton supports {SUPPORTED_DTYPES}, got {dtype}")
    if any(t.dtype != dtype for t in (k, q_weight, k_weight, cos, sin)):
        raise ValueError("qk_norm_rope_triton needs q, k, the weights and cos/sin in one dtype")
    batch, seq_len, num_q_heads, head_dim = q.shape
    num_kv_heads = k.shape[2]
    if head_dim & (head_dim - 1) or not MIN_HEAD_DIM <= head_dim <= MAX_HEAD_DIM:
        raise ValueError(f"qk_norm_rope_triton needs a power-of-two head_dim in [{MIN_HEAD_DIM}, {MAX_HEAD_DIM}], got {head_dim}")

    q, k, cos, sin = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, cos, sin))
    q_weight, k_weight = q_weight.contiguous(), k_weight.contiguous()
    q_out = torch.empty((batch, num_q_heads, seq_len, head_dim), device=q.device, dtype=dtype)
    k_out = torch.empty((batch, num_kv_heads, seq_len, head_dim), device=q.device, dtype=dtype)
    num_rows = batch * seq_len
    if num_rows == 0 or num_q_heads + num_kv_heads == 0:
        return q_out, k_out

    block_h, num_tiles = _head_tiling(q, num_rows, num_kv_heads, block_h)
    num_warps = _num_warps(block_h, head_dim)

    _qk_norm_rope_kernel[(num_rows, num_tiles)](
        q, k, q_weight, k_weight, cos, sin, q_out, k_out,
        seq_len, num_q_heads, num_kv_heads, float(eps),
        q.stride(0), q.stride(1), q.stride(2),
        k.stride(0), k.stride(1), k.stride(2),
        cos.stride(0), cos.stride(1), sin.stride(0), sin.stride(1),
        q_out.stride(0), q_out.stride(1), q_out.stride(2),
        k_out.stride(0), k_out.stride(1), k_out.stride(2),
        BLOCK_H=block_h, HALF=head_dim // 2, ROUND=_ROUND_MODE[dtype],
        num_warps=num_warps, **LAUNCH_OPTIONS, **pdl_launch(q.device),
    )
    return q_out, k_out


_INDEX_DTYPES = (torch.int64, torch.int32)


def _check_cache_destination(k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                             dest_rows: torch.Tensor, dest_positions: torch.Tensor) -> None:
    if v.shape != k.shape or v.dtype != k.dtype or v.device != k.device:
        raise ValueError(f"qk_norm_rope_write_kv: v {tuple(v.shape)} {v.dtype} must match k {tuple(k.shape)} {k.dtype}")
    batch, _, num_kv_heads, head_dim = k.shape
    if k_cache.dim() != 4 or v_cache.shape != k_cache.shape or (k_cache.shape[1], k_cache.shape[3]) != (num_kv_heads, head_dim):
        raise ValueError(f"qk_norm_rope_write_kv expects k/v caches [S, {num_kv_heads}, P, {head_dim}] of one shape, "
                         f"got {tuple(k_cache.shape)} and {tuple(v_cache.shape)}")
    if k_cache.dtype != k.dtype or v_cache.dtype != k.dtype:
        raise ValueError(f"qk_norm_rope_write_kv_triton needs the caches in k's dtype {k.dtype}, "
                         f"got {k_cache.dtype} and {v_cache.dtype}")
    if k_cache.stride(-1) != 1 or v_cache.stride(-1) != 1:
        raise ValueError("qk_norm_rope_write_kv_triton writes in place: the caches' head_dim must be contiguous")
    for name, t in (("dest_rows", dest_rows), ("dest_positions", dest_positions)):
        if t.shape != (batch,) or t.dtype not in _INDEX_DTYPES:
            raise ValueError(f"qk_norm_rope_write_kv: {name} must be int64/int32 [{batch}], got {t.dtype} {tuple(t.shape)}")
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache), ("dest_rows", dest_rows),
                    ("dest_positions", dest_positions)):
        if t.device != k.device:
            raise ValueError(f"qk_norm_rope_write_kv: {name} is on {t.device} but k is on {k.device}")


def _check_norm_source(q: torch.Tensor, norm_source: torch.Tensor) -> None:
    """The dispatcher's checks (shape, dtype, device), then this kernel's own limit on the row width."""
    check_norm_source(q, norm_source)
    if norm_source.shape[2] > MAX_NORM_COLS:
        raise ValueError(f"qk_norm_rope_write_kv_triton: norm_source's H_model must be in [1, {MAX_NORM_COLS}], "
                         f"got {norm_source.shape[2]}")


def qk_norm_rope_write_kv_triton(
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
    block_h: int | None = None,
) -> torch.Tensor:
    """qk_norm_rope_triton that stores K in the cache instead of returning it, and copies V there too,
    in the same launch. v [B, L, KV, D] like k; k_cache/v_cache [S, KV, P, D] (one layer; head_dim
    contiguous, written in place) in the dtype of q; dest_rows/dest_positions [B] int64/int32 (any
    stride, e.g. an expanded scalar): token (b, l) goes to [dest_rows[b], :, dest_positions[b] + l].

    norm_source [B, L, H_model] (H_model <= MAX_NORM_COLS; any strides, copied if the last dim is
    not contiguous) in q's dtype: the residual stream a projection with the input RMSNorm deferred
    read; q, k and v are first scaled by rsqrt(mean(norm_source^2) + norm_eps) of their token and
    rounded to the dtype (kernels/qk_norm_rope_reference.py). None: no scaling, V copied bit for bit.

    Returns contiguous q_out [B, H, L, D]. No host syncs: the launch can be captured in a CUDA graph.
    """
    _check(q, k, q_weight, k_weight, cos, sin)
    _check_cache_destination(k, v, k_cache, v_cache, dest_rows, dest_positions)
    if norm_source is not None:
        _check_norm_source(q, norm_source)
    dtype = q.dtype
    if dtype not in SUPPORTED_DTYPES:
        raise ValueError(f"qk_norm_rope_write_kv_triton supports {SUPPORTED_DTYPES}, got {dtype}")
    if any(t.dtype != dtype for t in (k, q_weight, k_weight, cos, sin)):
        raise ValueError("qk_norm_rope_write_kv_triton needs q, k, v, the weights, cos/sin and the caches in one dtype")
    batch, seq_len, num_q_heads, head_dim = q.shape
    num_kv_heads = k.shape[2]
    if head_dim & (head_dim - 1) or not MIN_HEAD_DIM <= head_dim <= MAX_HEAD_DIM:
        raise ValueError(f"qk_norm_rope_write_kv_triton needs a power-of-two head_dim in [{MIN_HEAD_DIM}, {MAX_HEAD_DIM}], got {head_dim}")

    q, k, v, cos, sin = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v, cos, sin))
    q_weight, k_weight = q_weight.contiguous(), k_weight.contiguous()
    q_out = torch.empty((batch, num_q_heads, seq_len, head_dim), device=q.device, dtype=dtype)
    num_rows = batch * seq_len
    if num_rows == 0 or num_q_heads + num_kv_heads == 0:
        return q_out

    block_h, num_tiles = _head_tiling(q, num_rows, num_kv_heads, block_h, num_v_heads=num_kv_heads)
    if norm_source is None:  # ns_ptr is never read: q stands in, the norm arguments are placeholders
        ns, norm_cols, ns_strides, norm_block, norm_chunks = q, 1, (0, 0), 1, 0
    else:
        ns = norm_source if norm_source.stride(-1) == 1 else norm_source.contiguous()
        norm_cols, ns_strides = ns.shape[2], (ns.stride(0), ns.stride(1))
        norm_block = min(triton.next_power_of_2(norm_cols), NORM_CHUNK)
        norm_chunks = triton.cdiv(norm_cols, norm_block)
    _qk_norm_rope_write_kv_kernel[(num_rows, num_tiles)](
        q, k, v, q_weight, k_weight, cos, sin, q_out, k_cache, v_cache, dest_rows, dest_positions, ns,
        seq_len, num_q_heads, num_kv_heads, k_cache.shape[0], k_cache.shape[2], float(eps),
        norm_cols, float(norm_cols), float(norm_eps),
        q.stride(0), q.stride(1), q.stride(2),
        k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2),
        cos.stride(0), cos.stride(1), sin.stride(0), sin.stride(1),
        q_out.stride(0), q_out.stride(1), q_out.stride(2),
        dest_rows.stride(0), dest_positions.stride(0),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2),
        *ns_strides,
        BLOCK_H=block_h, HALF=head_dim // 2, ROUND=_ROUND_MODE[dtype],
        HAS_NORM=norm_source is not None, NORM_BLOCK=norm_block, NORM_CHUNKS=norm_chunks,
        num_warps=_num_warps(block_h, head_dim), **LAUNCH_OPTIONS, **pdl_launch(q.device),
    )
    return q_out
