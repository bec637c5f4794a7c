"""Fused Triton RMSNorm over the last dim: one read of x, one write of y, one launch per call.

Per row: rstd = rsqrt(mean(x^2) + eps) in fp32; xn = round_to_x_dtype(x * rstd); y = round_to_out(w * xn)
with w * xn multiplied in fp32 -- exactly `weight * (x32 * rstd).to(x.dtype)` in PyTorch, where a
bf16 * bf16 elementwise product is computed in fp32 and rounded once.

bf16 rounding is done by hand (round-to-nearest-even on the fp32 bits, as c10::BFloat16 does): the
GPU's cvt.rn gives the same bits, but the Triton interpreter truncates fp32 -> bf16, and one code
path for both keeps the interpreter tests meaningful. It costs a few integer ops per element in a
kernel bound by launch latency and memory.

Grid: one program per BLOCK_M rows. Rows of >= 1024 elements get a program each (8 warps cover a
2048-wide bf16 row with 16-byte loads). Short rows (head_dim = 128 for the per-head q/k norms)
are packed several per program when there are enough rows to keep the GPU busy (prefill: thousands
of head-rows), because a one-warp program per 256-byte row wastes most of the SM's block slots;
at decode (tens of rows) they stay one per program so the rows spread over SMs.

Capturable in a CUDA graph: no host syncs; the only allocation is the output (torch.empty_like).
The module reads TRITON_INTERPRET when imported (triton.jit picks the interpreter at decoration).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.bf16_bits import round_bf16_f32, to_f32 as _widen  # a load as exact fp32 (bf16 by bits)
from kernels.pdl import pdl_launch, wait_for_prior_grid

SUPPORTED_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
MAX_COLS = 8192
_TILE_ELEMS = 1024  # target elements per program when packing short rows
_MIN_PROGRAMS = 256  # do not pack rows below this many programs (keep ~2 per SM on an H100/H200)


@triton.jit
def row_inverse_rms(row_ptr, num_cols, num_cols_f, eps, BLOCK: tl.constexpr, CHUNKS: tl.constexpr):
    """rsqrt(mean(h^2) + eps) of one row h = row_ptr[0:num_cols] (unit stride), as an fp32 scalar:
    the deferred norms' factor, recomputed by each program that applies it (kernels/silu_mul_triton.py,
    kernels/qk_norm_rope_triton.py).

    _rms_norm_kernel's math: squares in fp32 (bf16 widened by bits: the interpreter's cast mangles
    subnormals), a correctly rounded divide by N (Triton's plain '/' is approximate; N comes as a
    float argument, an int 1 would be specialized to a constexpr), tl.rsqrt. The row is read in
    CHUNKS chunks of BLOCK (a constexpr count, so the loads issue at once) into one elementwise
    accumulator, summed at the end: a different order than torch's, so the variance may differ from
    eager's by one fp32 ulp. Launch with FMA contraction off so each square is rounded."""
    cols = tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for chunk in tl.static_range(CHUNKS):
        idx = chunk * BLOCK + cols
        h = _widen(tl.load(row_ptr + idx, mask=idx < num_cols, other=0.0))
        acc += h * h
    return tl.rsqrt(tl.div_rn(tl.sum(acc, axis=0), num_cols_f) + eps)


@triton.jit
def _round_to(v, dtype: tl.constexpr):
    """Round fp32 v to `dtype` (round-to-nearest-even) and return it widened back to fp32."""
    if dtype == tl.bfloat16:
        return round_bf16_f32(v)   # the hardware cast on the GPU, the bits under the interpreter
    elif dtype == tl.float16:
        return v.to(tl.float16).to(tl.float32)
    else:
        return v


@triton.jit
def _rms_norm_kernel(
    x_ptr, w_ptr, y_ptr,
    num_rows, num_cols, num_cols_f, x_row_stride, y_row_stride, eps,
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

    x = tl.load(x_ptr + (rows64 * x_row_stride)[:, None] + cols[None, :], mask=mask, other=0.0)
    x = x.to(tl.float32)
    # mean as sum / N with a correctly rounded divide (Triton's plain fp32 '/' is approximate);
    # N also comes as a float argument: an int 1 would be specialized to a constexpr.
    mean_sq = tl.div_rn(tl.sum(x * x, axis=1), num_cols_f)
    rstd = tl.rsqrt(mean_sq + eps)
    xn = _round_to(x * rstd[:, None], x_ptr.dtype.element_ty)  # x32.to(x.dtype)
    w = tl.load(w_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)
    y = _round_to(w[None, :] * xn, y_ptr.dtype.element_ty)  # weight * ..., rounded once
    tl.store(y_ptr + (rows64 * y_row_stride)[:, None] + cols[None, :],
             y.to(y_ptr.dtype.element_ty), mask=mask)  # exact: y already holds an output-dtype value


def is_interpreting() -> bool:
    """True when triton.jit built the interpreter (TRITON_INTERPRET=1 at import), not a GPU kernel."""
    return not isinstance(_rms_norm_kernel, triton.runtime.JITFunction)


def choose_block(num_rows: int, num_cols: int) -> tuple[int, int, int]:
    """(BLOCK_M rows per program, BLOCK_N, num_warps) for a [num_rows, num_cols] launch."""
    block_n = triton.next_power_of_2(num_cols)
    block_m = max(1, _TILE_ELEMS // block_n)
    while block_m > 1 and triton.cdiv(num_rows, block_m) < _MIN_PROGRAMS:
        block_m //= 2
    num_warps = min(8, max(1, block_m * block_n // 256))  # >= 8 elements per thread up to 2048 wide
    return block_m, block_n, num_warps


def _as_rows(x: torch.Tensor, num_cols: int) -> torch.Tensor:
    """x as [rows, num_cols] with unit column stride, a view when the leading dims collapse."""
    if x.stride(-1) == 1:
        try:
            return x.view(-1, num_cols)
        except RuntimeError:
            pass
    return x.contiguous().view(-1, num_cols)


def rms_norm_triton(x: torch.Tensor, weight: torch.Tensor, eps: float,
                    block: tuple[int, int, int] | None = None) -> torch.Tensor:
    """x: [..., N]; weight: [N] -> contiguous [..., N] in torch.result_type(weight, x).

    `block` forces (BLOCK_M, BLOCK_N, num_warps) (tests); BLOCK_N must be a power of two >= N.
    """
    num_cols = x.shape[-1] if x.dim() else 0
    if x.dim() == 0 or weight.shape != (num_cols,):
        raise ValueError(f"rms_norm_triton: need x [..., N] and weight [N], got {tuple(x.shape)} "
                         f"and {tuple(weight.shape)}")
    if x.dtype not in SUPPORTED_DTYPES or weight.dtype not in SUPPORTED_DTYPES:
        raise ValueError(f"rms_norm_triton supports {SUPPORTED_DTYPES}, got {x.dtype} and {weight.dtype}")
    if num_cols > MAX_COLS:
        raise ValueError(f"rms_norm_triton supports rows of up to {MAX_COLS} elements, got {num_cols}")
    out = torch.empty_like(x, dtype=torch.result_type(weight, x), memory_format=torch.contiguous_format)
    if out.numel() == 0:
        return out
    x2, y2 = _as_rows(x, num_cols), out.view(-1, num_cols)
    w = weight if weight.stride(0) == 1 else weight.contiguous()
    block_m, block_n, num_warps = block if block is not None else choose_block(x2.shape[0], num_cols)
    if block_n < num_cols:
        raise ValueError(f"BLOCK_N={block_n} < N={num_cols}")
    grid = (triton.cdiv(x2.shape[0], block_m),)
    _rms_norm_kernel[grid](
        x2, w, y2, x2.shape[0], num_cols, float(num_cols), x2.stride(0), y2.stride(0), float(eps),
        BLOCK_M=block_m, BLOCK_N=block_n, num_warps=num_warps, **pdl_launch(x2.device),
    )
    return out
