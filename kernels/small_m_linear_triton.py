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
The module reads TRITON_INTERPRET when imported (triton.jit picks the interpreter at decoration).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.bf16_bits import from_f32 as _from_f32, to_f32 as _to_f32
from kernels.pdl import pdl_launch, wait_for_prior_grid

SUPPORTED_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
MAX_ROWS = 16           # x rows this kernel takes (the decode buckets 1 and 8; larger M is a real GEMM)
MAX_BLOCK_K = 8192      # one slice per row up to this K (the models' largest K is 6144)
TARGET_PROGRAMS = 1024  # enough programs in flight to keep HBM busy (132 SMs x ~8)
MAX_TILE = 16384        # BLOCK_N x BLOCK_K elements held per program (64 fp32 registers per thread at 8 warps)


@triton.jit
def _small_m_linear_kernel(x_ptr, w_ptr, b_ptr, y_ptr, M, N, K, stride_xm, stride_wn, stride_ym,
                           BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                           HAS_BIAS: tl.constexpr, PDL: tl.constexpr):
    if PDL:   # first: nothing is read or written before the kernel ahead is done (kernels/pdl.py)
        wait_for_prior_grid()
    pid = tl.program_id(0)
    offs_n = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    n_ok = offs_n < N
    offs_k = tl.arange(0, BLOCK_K)
    rows_m = tl.arange(0, BLOCK_M)
    w_rows = w_ptr + offs_n.to(tl.int64)[:, None] * stride_wn
    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k = k0 + offs_k
        k_ok = k < K
        w = _to_f32(tl.load(w_rows + k[None, :], mask=n_ok[:, None] & k_ok[None, :], other=0.0))  # [BN, BK]
        for m in tl.static_range(BLOCK_M):
            # rows past M load nothing and their sums are never stored
            row_ok = tl.full([BLOCK_K], m, tl.int32) < M
            x = _to_f32(tl.load(x_ptr + m * stride_xm + k, mask=k_ok & row_ok, other=0.0))     # [BK]
            part = tl.sum(w * x[None, :], axis=1)                                             # [BN]
            acc += tl.where(rows_m[:, None] == m, part[None, :], 0.0)
    if HAS_BIAS:
        acc += _to_f32(tl.load(b_ptr + offs_n, mask=n_ok, other=0.0))[None, :]
    y_offs = rows_m[:, None] * stride_ym + offs_n[None, :]
    tl.store(y_ptr + y_offs, _from_f32(acc, y_ptr.dtype.element_ty), mask=(rows_m[:, None] < M) & n_ok[None, :])


def is_interpreting() -> bool:
    """True when triton.jit built the interpreter (TRITON_INTERPRET=1 at import), not a GPU kernel."""
    return not isinstance(_small_m_linear_kernel, triton.runtime.JITFunction)


def choose_blocks(m: int, n: int, k: int) -> tuple[int, int, int, int]:
    """(BLOCK_M, BLOCK_N, BLOCK_K, num_warps): the whole row per slice up to MAX_BLOCK_K, then as many
    rows per program as keep the tile within MAX_TILE and the grid near TARGET_PROGRAMS (at least 1)."""
    block_m = triton.next_power_of_2(max(m, 1))
    block_k = min(MAX_BLOCK_K, triton.next_power_of_2(k))
    block_n = max(1, min(MAX_TILE // block_k, triton.next_power_of_2(max(1, n // TARGET_PROGRAMS))))
    num_warps = 8 if block_n * block_k >= 8192 else 4
    return block_m, block_n, block_k, num_warps


def small_m_linear_triton(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, *,
                          block_n: int | None = None, num_warps: int | None = None) -> torch.Tensor:
    """x [M, K] (M <= MAX_ROWS, last dim contiguous), weight [N, K] (last dim contiguous), bias [N]
    or None, one dtype -> y [M, N] contiguous in x's dtype. block_n / num_warps override the choice
    (tests, tuning)."""
    if x.dim() != 2 or weight.dim() != 2 or x.shape[1] != weight.shape[1]:
        raise ValueError(f"small_m_linear_triton: x [M, K] and weight [N, K] disagree: {tuple(x.shape)} vs "
                         f"{tuple(weight.shape)}")
    if x.dtype not in SUPPORTED_DTYPES or weight.dtype != x.dtype or (bias is not None and bias.dtype != x.dtype):
        raise ValueError(f"small_m_linear_triton: x, weight and bias must share a dtype in {SUPPORTED_DTYPES}")
    m, k = x.shape
    n = weight.shape[0]
    if m > MAX_ROWS:
        raise ValueError(f"small_m_linear_triton takes at most {MAX_ROWS} rows, got {m}")
    if bias is not None and tuple(bias.shape) != (n,):
        raise ValueError(f"small_m_linear_triton: bias must be [{n}], got {tuple(bias.shape)}")
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)
    if y.numel() == 0:
        return y
    if x.stride(1) != 1:
        x = x.contiguous()
    if weight.stride(1) != 1:
        weight = weight.contiguous()
    if bias is not None and bias.stride(0) != 1:
        bias = bias.contiguous()
    block_m, chosen_n, block_k, chosen_warps = choose_blocks(m, n, k)
    block_n = chosen_n if block_n is None else block_n
    if block_n < 1 or block_n & (block_n - 1):
        raise ValueError(f"block_n must be a power of two >= 1, got {block_n}")
    _small_m_linear_kernel[(triton.cdiv(n, block_n),)](
        x, weight, y if bias is None else bias, y, m, n, k, x.stride(0), weight.stride(0), y.stride(0),
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, HAS_BIAS=bias is not None,
        num_warps=chosen_warps if num_warps is None else num_warps, **pdl_launch(x.device),
    )
    return y
