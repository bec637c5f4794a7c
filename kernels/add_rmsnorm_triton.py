"""Fused Triton residual add + RMSNorm over the last dim: one launch reads x and residual once and
writes both the sum (the new residual stream) and its normalization.

Per row, in fp32:
  s  = round_to_sum_dtype(x + r)               -- PyTorch's add: fp32 sum, rounded once
  rstd = rsqrt(mean(s^2) + eps)
  y  = round_to_out(w * round_to_sum_dtype(s * rstd))
which is `summed = x + residual; weight * (summed.float() * rstd).to(summed.dtype)`, the
kernels.rmsnorm_reference order (see kernels/rmsnorm_triton.py for the normalization part; block
choice and bf16 rounding are shared with it). The sum dtype is torch.result_type(x, residual) and
the output dtype torch.result_type(weight, sum), as in eager PyTorch.

bf16 loads and stores go through _widen/_narrow (bit shifts): the Triton interpreter's bf16 <-> fp32
casts mangle subnormals (its converter renormalizes the mantissa and then drops the exponent), so a
plain cast would make interpreter results wrong where the GPU is right. On the GPU the shifts are
what the cvt would compile to anyway.

Capturable in a CUDA graph: no host syncs; the only allocations are the two outputs (plus a copy for
an input whose rows cannot be addressed with one row stride).
The module reads TRITON_INTERPRET when imported (triton.jit picks the interpreter at decoration).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.bf16_bits import to_f32 as _widen  # a load as exact fp32 (bf16 by bits)
from kernels.pdl import pdl_launch, wait_for_prior_grid

from kernels.rmsnorm_triton import MAX_COLS, _as_rows, _round_to, choose_block

SUPPORTED_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
# No FMA contraction: eager rounds s * s before summing and s * rstd before the cast.
LAUNCH_OPTIONS = {"enable_fp_fusion": False}


@triton.jit
def _narrow(v, dtype: tl.constexpr):
    """fp32 v that already holds `dtype` values (after _round_to) -> `dtype`, exact. bf16 keeps the
    high 16 bits; a NaN from arithmetic is quiet (bit 22 set), so it stays a NaN."""
    if dtype == tl.bfloat16:
        return (v.to(tl.uint32, bitcast=True) >> 16).to(tl.uint16).to(tl.bfloat16, bitcast=True)
    else:
        return v.to(dtype)


@triton.jit
def _add_rms_norm_kernel(
    x_ptr, r_ptr, w_ptr, y_ptr, s_ptr,
    num_rows, num_cols, num_cols_f, x_row_stride, r_row_stride, out_row_stride, eps,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    PDL: tl.constexpr,
):
    if PDL:   # first: nothing is read or written before the kernel ahead is done (kernels/pdl.py)
        wait_for_prior_grid()
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    col_ok = cols < num_cols
    mask = (rows < num_rows)[:, None] & col_ok[None, :]
    rows64 = rows.to(tl.int64)  # rows * stride can pass 2^31 elements

    x = _widen(tl.load(x_ptr + (rows64 * x_row_stride)[:, None] + cols[None, :], mask=mask, other=0.0))
    r = _widen(tl.load(r_ptr + (rows64 * r_row_stride)[:, None] + cols[None, :], mask=mask, other=0.0))
    s = _round_to(x + r, s_ptr.dtype.element_ty)  # x + residual, rounded once; masked lanes are 0
    out_offs = (rows64 * out_row_stride)[:, None] + cols[None, :]
    tl.store(s_ptr + out_offs, _narrow(s, s_ptr.dtype.element_ty), mask=mask)
    # correctly rounded mean; N as a float argument (an int 1 would be specialized to a constexpr)
    mean_sq = tl.div_rn(tl.sum(s * s, axis=1), num_cols_f)
    rstd = tl.rsqrt(mean_sq + eps)
    sn = _round_to(s * rstd[:, None], s_ptr.dtype.element_ty)  # (summed.float() * rstd).to(summed.dtype)
    w = _widen(tl.load(w_ptr + cols, mask=col_ok, other=0.0))
    y = _round_to(w[None, :] * sn, y_ptr.dtype.element_ty)  # weight * ..., rounded once
    tl.store(y_ptr + out_offs, _narrow(y, y_ptr.dtype.element_ty), mask=mask)


def is_interpreting() -> bool:
    """True when triton.jit built the interpreter (TRITON_INTERPRET=1 at import), not a GPU kernel."""
    return not isinstance(_add_rms_norm_kernel, triton.runtime.JITFunction)


def add_rms_norm_triton(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float,
                        block: tuple[int, int, int] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """x, residual: [..., N] (same shape, any row strides); weight: [N] ->
    (normed, summed), both contiguous [..., N]: summed = x + residual in
    torch.result_type(x, residual), normed = RMSNorm(summed) * weight in
    torch.result_type(weight, summed).

    `block` forces (BLOCK_M, BLOCK_N, num_warps) (tests); BLOCK_N must be a power of two >= N.
    """
    num_cols = x.shape[-1] if x.dim() else 0
    if x.dim() == 0 or residual.shape != x.shape or weight.shape != (num_cols,):
        raise ValueError(f"add_rms_norm_triton: need x and residual [..., N] of one shape and weight [N], got "
                         f"{tuple(x.shape)}, {tuple(residual.shape)} and {tuple(weight.shape)}")
    if any(t.dtype not in SUPPORTED_DTYPES for t in (x, residual, weight)):
        raise ValueError(f"add_rms_norm_triton supports {SUPPORTED_DTYPES}, got "
                         f"{x.dtype}, {residual.dtype} and {weight.dtype}")
    if num_cols > MAX_COLS:
        raise ValueError(f"add_rms_norm_triton supports rows of up to {MAX_COLS} elements, got {num_cols}")
    sum_dtype = torch.result_type(x, residual)
    summed = torch.empty(x.shape, dtype=sum_dtype, device=x.device)
    normed = torch.empty(x.shape, dtype=torch.promote_types(weight.dtype, sum_dtype), device=x.device)
    if summed.numel() == 0:
        return normed, summed
    x2, r2 = _as_rows(x, num_cols), _as_rows(residual, num_cols)
    s2, y2 = summed.view(-1, num_cols), normed.view(-1, num_cols)
    w = weight if weight.stride(0) == 1 else weight.contiguous()
    block_m, block_n, num_warps = block if block is not None else choose_block(x2.shape[0], num_cols)
    if block_n < num_cols:
        raise ValueError(f"BLOCK_N={block_n} < N={num_cols}")
    grid = (triton.cdiv(x2.shape[0], block_m),)
    _add_rms_norm_kernel[grid](
        x2, r2, w, y2, s2, x2.shape[0], num_cols, float(num_cols),
        x2.stride(0), r2.stride(0), s2.stride(0), float(eps),
        BLOCK_M=block_m, BLOCK_N=block_n, num_warps=num_warps, **LAUNCH_OPTIONS, **pdl_launch(x2.device),
    )
    return normed, summed
