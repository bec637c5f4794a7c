"""Triton linear for a few rows (decode at batch <= 16): y = x W^T (+ b), W [N, K] row-major.

Why: at batch 1 the talker's frame step spends 3.2 of its 5.4 ms in cuBLAS GEMMs (H100 profile,
benchmarks/results/2026-11-25-talker-frame-attention-h100.md). They read 5.2 GB of weights per frame
at about half the HBM bandwidth: 428 matrices of 4-50 MB, each an nvjet kernel of ~5-7 us, plus 103
split-K reduce launches. A few-row linear is a pure weight stream, and this kernel is shaped as one.

Grid: one program per BLOCK_N whole rows of W. The program walks its rows in BLOCK_K-wide slices
(for K <= MAX_BLOCK_K one slice holds the whole row, so every load of the program is issued at
once), and for each of the <= BLOCK_M rows of x forms the dot with the slice in fp32. W is read
exactly once; x (a few KB) comes from L2. BLOCK_N is chosen so that the grid covers the GPU several
times over even for N = 1024. No split-K, so there is no second launch and no workspace.

Numerics: products and sums in fp32 (bf16/fp16 widened exactly, by bits for bf16 so the
interpreter agrees), one rounding of the output (nearest even, kernels/bf16_bits.py). Summation
order differs from cuBLAS, so results agree to fp32 rounding before the output rounding, not bit
for bit. Capturable in a CUDA graph: no host syncs, the only allocation is the output.

GLU variant (`small_m_linear_silu_mul_triton`): the MLP's fused gate/up projection and its SwiGLU in
one launch. W is [2I, K] (gate rows, then up rows); a program forms BLOCK_N gate rows and the same
BLOCK_N up rows, rounds both sums to the dtype as the plain kernel stores them, and applies
kernels/silu_mul_triton.py's exact arithmetic (`_silu_mul_rounded`, with FMA contraction off as
there): one launch, no [M, 2I] round trip through memory. In the interpreter the output is bit for
bit silu_mul(small_m_linear(x, W)); on the GPU the plain kernel may contract its products and sums
into FMAs, so a gate/up sum can differ in its last fp32 bit before rounding (the same order-of-
summation slack the plain kernel has against cuBLAS).

Deferred-norm variants (kernels/small_m_linear.py's docstring says why):
- GLU + NORM (`small_m_linear_silu_mul_triton(..., norm_eps)`, no bias): x is the un-normalised
  residual stream. While walking its K slices each program also sums x^2 per row in fp32 (the slices
  of x are loaded anyway), then s = rsqrt(sumsq / K + eps) as kernels/rmsnorm_triton.py forms it (a
  correctly rounded divide, tl.rsqrt); the rounded gate and up are each multiplied by s and rounded
  again, then `_silu_mul_rounded`: silu_mul(small_m_linear(x, W), norm_source=x, eps). The sum of
  squares runs in the kernel's order (per slice, then across slices), torch's mean in its own, so
  the variance can differ in its last fp32 bit, which moves a scaled gate/up by an ulp now and then:
  in the interpreter every row equals that formula with the variance off by at most one fp32 ulp
  (tests/test_small_m_linear.py), and in bf16/fp16 nearly every element equals it unmoved (in fp32
  the whole row's scale moves with it). Every program of a row sums the same x in the same order,
  so s is one value per row. On the GPU tl.rsqrt is rsqrt.approx, torch's CUDA rsqrt need not agree
  bit for bit: the same one-ulp slack. Cost (H100, CUDA graph, weights past L2): none measurable at
  one row (the models' gate/up 7.0 -> 7.25 us and 21.3 -> 21.2 us), 10% at two (9.05 -> 9.95 us,
  24.4 -> 27.0 us: one more cross-warp reduction per row next to the two dot products).
- RESIDUAL (`small_m_linear_add_triton`): y is the residual, loaded (widened to fp32) before the
  K loop so its latency hides under the weight stream, added to the fp32 sum after the bias, and the
  total stored over it, rounded once. Each element is read and written by the one program that owns
  its columns, so in place is safe (x must not overlap it). Cost (H100, as above, o_proj and down at
  1-2 rows): no slower than the plain kernel (read in the epilogue instead: +0.7 to +2.3 us a call).

The module reads TRITON_INTERPRET when imported (triton.jit picks the interpreter at decoration).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.bf16_bits import from_f32 as _from_f32, to_f32 as _to_f32
from kernels.pdl import pdl_launch, wait_for_prior_grid
from kernels.rmsnorm_triton import _round_to
from kernels.silu_mul_triton import LAUNCH_OPTIONS as SILU_LAUNCH_OPTIONS, _silu_mul_rounded

SUPPORTED_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
MAX_ROWS = 16           # x rows this kernel takes (the decode buckets 1 and 8; larger M is a real GEMM)
MAX_BLOCK_K = 8192      # one slice per row up to this K (the models' largest K is 6144)
TARGET_PROGRAMS = 1024  # enough programs in flight to keep HBM busy (132 SMs x ~8)
MAX_TILE = 16384        # BLOCK_N x BLOCK_K elements held per program (64 fp32 registers per thread at 8 warps)


@triton.jit
def glu_epilogue(acc_gate, acc_up, sumsq, k_float, eps, dtype: tl.constexpr, NORM: tl.constexpr, EXP64: tl.constexpr):
    """fp32 gate and up sums [BM, BN] -> silu(gate) * up, fp32 holding `dtype` values: each half rounded
    as a GEMM would store it; with NORM scaled by s = rsqrt(sumsq / k_float + eps) per row (1/rms(x) as
    kernels/rmsnorm_triton.py forms it) and rounded again; then silu_mul's arithmetic."""
    gate = _round_to(acc_gate, dtype)
    up = _round_to(acc_up, dtype)
    if NORM:
        s = tl.rsqrt(tl.div_rn(sumsq, k_float) + eps)[:, None]
        gate = _round_to(gate * s, dtype)
        up = _round_to(up * s, dtype)
    return _silu_mul_rounded(gate, up, dtype, EXP64)


@triton.jit
def _small_m_linear_kernel(x_ptr, w_ptr, b_ptr, y_ptr, M, N, K, stride_xm, stride_wn, stride_ym, k_float, eps,
                           BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                           HAS_BIAS: tl.constexpr, GLU: tl.constexpr, NORM: tl.constexpr, RESIDUAL: tl.constexpr,
                           EXP64: tl.constexpr, PDL: tl.constexpr):
    """y [M, N] = x W[:N]^T (+ b); GLU: y = silu(x W[:N]^T + b[:N]) * (x W[N:2N]^T + b[N:2N]);
    NORM (with GLU, no bias): gate and up each scaled by s = rsqrt(sum(x^2) / k_float + eps) per row
    before the SwiGLU; RESIDUAL (not with GLU): y += x W^T (+ b) in place, y read in fp32, rounded once."""
    if PDL:   # first: nothing is read or written before the kernel ahead is done (kernels/pdl.py)
        wait_for_prior_grid()
    pid = tl.program_id(0)
    offs_n = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    n_ok = offs_n < N
    offs_k = tl.arange(0, BLOCK_K)
    rows_m = tl.arange(0, BLOCK_M)
    w_rows = w_ptr + offs_n.to(tl.int64)[:, None] * stride_wn
    up_rows = w_rows + N * stride_wn   # GLU only: the up half of W
    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    acc_up = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    sumsq = tl.zeros([BLOCK_M], tl.float32)   # NORM only: sum of x^2 per row
    y_offs = rows_m[:, None] * stride_ym + offs_n[None, :]
    y_mask = (rows_m[:, None] < M) & n_ok[None, :]
    if RESIDUAL:   # loaded first: its latency hides under the weight stream (module docstring)
        residual = _to_f32(tl.load(y_ptr + y_offs, mask=y_mask, other=0.0))
    for k0 in range(0, K, BLOCK_K):
        k = k0 + offs_k
        k_ok = k < K
        w_mask = n_ok[:, None] & k_ok[None, :]
        w = _to_f32(tl.load(w_rows + k[None, :], mask=w_mask, other=0.0))                  # [BN, BK]
        if GLU:
            w_up = _to_f32(tl.load(up_rows + k[None, :], mask=w_mask, other=0.0))
        for m in tl.static_range(BLOCK_M):
            # rows past M load nothing and their sums are never stored
            row_ok = tl.full([BLOCK_K], m, tl.int32) < M
            x = _to_f32(tl.load(x_ptr + m * stride_xm + k, mask=k_ok & row_ok, other=0.0))     # [BK]
            part = tl.sum(w * x[None, :], axis=1)                                             # [BN]
            acc += tl.where(rows_m[:, None] == m, part[None, :], 0.0)
            if GLU:
                part_up = tl.sum(w_up * x[None, :], axis=1)
                acc_up += tl.where(rows_m[:, None] == m, part_up[None, :], 0.0)
            if NORM:   # the slice of x is here anyway: its squares cost no load
                sumsq += tl.where(rows_m == m, tl.sum(x * x, axis=0), 0.0)
    if HAS_BIAS:
        acc += _to_f32(tl.load(b_ptr + offs_n, mask=n_ok, other=0.0))[None, :]
        if GLU:
            acc_up += _to_f32(tl.load(b_ptr + N + offs_n, mask=n_ok, other=0.0))[None, :]
    if RESIDUAL:   # each element read and written by this program alone: in place is safe
        acc += residual
    if GLU:
        acc = glu_epilogue(acc, acc_up, sumsq, k_float, eps, y_ptr.dtype.element_ty, NORM, EXP64)
    tl.store(y_ptr + y_offs, _from_f32(acc, y_ptr.dtype.element_ty), mask=y_mask)


def is_interpreting() -> bool:
    """True when triton.jit built the interpreter (TRITON_INTERPRET=1 at import), not a GPU kernel."""
    return not isinstance(_small_m_linear_kernel, triton.runtime.JITFunction)


def choose_blocks(m: int, n: int, k: int, tiles: int = 1) -> tuple[int, int, int, int]:
    """(BLOCK_M, BLOCK_N, BLOCK_K, num_warps): the whole row per slice up to MAX_BLOCK_K, then as many
    rows per program as keep the tile within MAX_TILE and the grid near TARGET_PROGRAMS (at least 1).
    tiles: W tiles a program holds at once (2 for the GLU variant: gate and up)."""
    block_m = triton.next_power_of_2(max(m, 1))
    block_k = min(MAX_BLOCK_K, triton.next_power_of_2(k))
    block_n = max(1, min(MAX_TILE // (tiles * block_k), triton.next_power_of_2(max(1, n // TARGET_PROGRAMS))))
    num_warps = 8 if tiles * block_n * block_k >= 8192 else 4
    return block_m, block_n, block_k, num_warps


def _checked(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, name: str):
    """The launchers' argument checks; -> x, weight, bias with unit last strides."""
    if x.dim() != 2 or weight.dim() != 2 or x.shape[1] != weight.shape[1]:
        raise ValueError(f"{name}: x [M, K] and weight [N, K] disagree: {tuple(x.shape)} vs {tuple(weight.shape)}")
    if x.dtype not in SUPPORTED_DTYPES or weight.dtype != x.dtype or (bias is not None and bias.dtype != x.dtype):
        raise ValueError(f"{name}: x, weight and bias must share a dtype in {SUPPORTED_DTYPES}")
    if x.shape[0] > MAX_ROWS:
        raise ValueError(f"{name} takes at most {MAX_ROWS} rows, got {x.shape[0]}")
    if bias is not None and tuple(bias.shape) != (weight.shape[0],):
        raise ValueError(f"{name}: bias must be [{weight.shape[0]}], got {tuple(bias.shape)}")
    if x.stride(1) != 1:
        x = x.contiguous()
    if weight.stride(1) != 1:
        weight = weight.contiguous()
    if bias is not None and bias.stride(0) != 1:
        bias = bias.contiguous()
    return x, weight, bias


def _blocks(m: int, n: int, k: int, tiles: int, block_n: int | None, num_warps: int | None):
    """choose_blocks with the launchers' block_n / num_warps overrides applied (and block_n checked)."""
    block_m, chosen_n, block_k, chosen_warps = choose_blocks(m, n, k, tiles)
    block_n = chosen_n if block_n is None else block_n
    if block_n < 1 or block_n & (block_n - 1):
        raise ValueError(f"block_n must be a power of two >= 1, got {block_n}")
    return block_m, block_n, block_k, chosen_warps if num_warps is None else num_warps


def small_m_linear_triton(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, *,
                          block_n: int | None = None, num_warps: int | None = None) -> torch.Tensor:
    """x [M, K] (M <= MAX_ROWS, last dim contiguous), weight [N, K] (last dim contiguous), bias [N]
    or None, one dtype -> y [M, N] contiguous in x's dtype. block_n / num_warps override the choice
    (tests, tuning)."""
    x, weight, bias = _checked(x, weight, bias, "small_m_linear_triton")
    m, k = x.shape
    n = weight.shape[0]
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)
    if y.numel() == 0:
        return y
    block_m, block_n, block_k, num_warps = _blocks(m, n, k, 1, block_n, num_warps)
    _small_m_linear_kernel[(triton.cdiv(n, block_n),)](
        x, weight, y if bias is None else bias, y, m, n, k, x.stride(0), weight.stride(0), y.stride(0),
        float(k), 0.0, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, HAS_BIAS=bias is not None, GLU=False,
        NORM=False, RESIDUAL=False, EXP64=False, num_warps=num_warps, **pdl_launch(x.device),
    )
    return y


def small_m_linear_add_triton(residual: torch.Tensor, x: torch.Tensor, weight: torch.Tensor,
                              bias: torch.Tensor | None = None, *, block_n: int | None = None,
                              num_warps: int | None = None) -> torch.Tensor:
    """residual [M, N] (last dim contiguous) += x W^T (+ bias), in place, rounded once (the RESIDUAL
    variant, module docstring); x, weight, bias as small_m_linear_triton, residual in their dtype and
    on their device, not overlapping x. Returns residual."""
    x, weight, bias = _checked(x, weight, bias, "small_m_linear_add_triton")
    m, k = x.shape
    n = weight.shape[0]
    if residual.dim() != 2 or tuple(residual.shape) != (m, n):
        raise ValueError(f"small_m_linear_add_triton: residual must be [{m}, {n}], got {tuple(residual.shape)}")
    if residual.dtype != x.dtype or residual.device != x.device:
        raise ValueError(f"small_m_linear_add_triton: residual ({residual.dtype}, {residual.device}) must match "
                         f"x ({x.dtype}, {x.device})")
    if n > 1 and residual.stride(1) != 1:
        raise ValueError("small_m_linear_add_triton: residual needs a unit last stride (it is written in place)")
    if residual.numel() == 0:
        return residual
    block_m, block_n, block_k, num_warps = _blocks(m, n, k, 1, block_n, num_warps)
    _small_m_linear_kernel[(triton.cdiv(n, block_n),)](
        x, weight, residual if bias is None else bias, residual, m, n, k, x.stride(0), weight.stride(0),
        residual.stride(0), float(k), 0.0, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k,
        HAS_BIAS=bias is not None, GLU=False, NORM=False, RESIDUAL=True, EXP64=False, num_warps=num_warps,
        **pdl_launch(x.device),
    )
    return residual


def small_m_linear_silu_mul_triton(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
                                   norm_eps: float | None = None, *, block_n: int | None = None,
                                   num_warps: int | None = None) -> torch.Tensor:
    """x [M, K] (M <= MAX_ROWS), weight [2I, K] (gate rows, then up rows), bias [2I] or None ->
    y [M, I] = silu(gate) * up (silu_mul_triton(small_m_linear_triton(x, weight, bias)), module docstring).
    norm_eps (deferred RMSNorm, no bias): gate/up scaled by rsqrt(mean(x^2) + norm_eps) per row first,
    as silu_mul(gate_up, norm_source=x, eps=norm_eps)."""
    x, weight, bias = _checked(x, weight, bias, "small_m_linear_silu_mul_triton")
    if weight.shape[0] % 2:
        raise ValueError(f"small_m_linear_silu_mul_triton: weight needs gate and up halves, got "
                         f"{tuple(weight.shape)}")
    if norm_eps is not None and bias is not None:
        raise ValueError("small_m_linear_silu_mul_triton: norm_eps with a bias (1/rms(x) must not scale it)")
    m, k = x.shape
    inter = weight.shape[0] // 2
    y = torch.empty((m, inter), dtype=x.dtype, device=x.device)
    if y.numel() == 0:
        return y
    block_m, block_n, block_k, num_warps = _blocks(m, inter, k, 2, block_n, num_warps)
    _small_m_linear_kernel[(triton.cdiv(inter, block_n),)](
        x, weight, y if bias is None else bias, y, m, inter, k, x.stride(0), weight.stride(0), y.stride(0),
        float(k), 0.0 if norm_eps is None else float(norm_eps), BLOCK_M=block_m, BLOCK_N=block_n,
        BLOCK_K=block_k, HAS_BIAS=bias is not None, GLU=True, NORM=norm_eps is not None, RESIDUAL=False,
        EXP64=is_interpreting(), num_warps=num_warps, **SILU_LAUNCH_OPTIONS, **pdl_launch(x.device),
    )
    return y
