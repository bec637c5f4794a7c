"""The MLP's fused gate/up projection and its SwiGLU in one tensor-core launch, for decode batches of
17..512 rows: y [M, I] = silu(x W[:I]^T) * (x W[I:]^T), optionally with the deferred RMSNorm's row
factor s = rsqrt(mean(x^2) + eps) applied to gate and up first.

Why: at batch 256 the frame step runs the GEMM then kernels/silu_mul.py for 103 layer passes (28
talker, 75 code predictor). The SwiGLU launch reads the [M, 2I] GEMM output back and recomputes each
row's 1/rms from x: 0.34 ms a step on the H100 (2026-11-27-talker-profile-599b4fa-h100.json), a
kernel boundary each, for work the GEMM's epilogue can do on values it already holds.

One program owns a [BLOCK_M, BLOCK_N] tile of y: it accumulates the gate tile (W rows n) and the up
tile (W rows I + n) over the whole K in fp32 with tl.dot, and, with NORM, the row sums of x^2 from
the x tiles it loads anyway. The epilogue is kernels/small_m_linear_triton.py's GLU epilogue: gate
and up rounded to the dtype (what the GEMM would store), scaled by s and rounded again (NORM), then
kernels/silu_mul_triton.py's arithmetic (`_silu_mul_rounded`). So the result equals
silu_mul(gate_up, norm_source=x) for this kernel's own gate_up; against cuBLAS's gate_up it differs
where the fp32 sums, taken in another order, round to another bf16 value.

Program order: the m tiles of one weight column tile are adjacent programs, so W (megabytes) streams
from HBM once and x (a few hundred KB) is what the L2 serves again.
No host syncs; the only allocation is the output. Capturable in a CUDA graph.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.bf16_bits import from_f32 as _from_f32, to_f32 as _to_f32
from kernels.pdl import pdl_launch, wait_for_prior_grid
from kernels.rmsnorm_triton import _round_to
from kernels.silu_mul_triton import LAUNCH_OPTIONS, _silu_mul_rounded

SUPPORTED_DTYPES = (torch.bfloat16, torch.float16)
MIN_ROWS, MAX_ROWS = 17, 512   # below: the few-row kernel or cuBLAS; above: prefill (cuBLAS + silu_mul)


@triton.jit
def _glu_gemm_kernel(x_ptr, w_ptr, y_ptr, M, I, K, stride_xm, stride_wn, stride_ym, k_float, eps,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, NORM: tl.constexpr,
                     EXP64: tl.constexpr, DOT_FP32: tl.constexpr, PDL: tl.constexpr):
    if PDL:   # first: nothing is read or written before the kernel ahead is done (kernels/pdl.py)
        wait_for_prior_grid()
    pid = tl.program_id(0)
    num_m = tl.cdiv(M, BLOCK_M)
    pid_m = pid % num_m
    pid_n = pid // num_m
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    m_ok = offs_m < M
    n_ok = offs_n < I
    x_rows = x_ptr + offs_m.to(tl.int64)[:, None] * stride_xm
    gate_rows = w_ptr + offs_n.to(tl.int64)[:, None] * stride_wn
    up_rows = gate_rows + I * stride_wn
    acc_gate = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    acc_up = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    sumsq = tl.zeros([BLOCK_M], tl.float32)   # NORM only: sum of x^2 per row
    for k0 in range(0, K, BLOCK_K):
        k = k0 + offs_k
        k_ok = k < K
        x = tl.load(x_rows + k[None, :], mask=m_ok[:, None] & k_ok[None, :], other=0.0)        # [BM, BK]
        w_mask = n_ok[:, None] & k_ok[None, :]
        w_gate = tl.load(gate_rows + k[None, :], mask=w_mask, other=0.0)                        # [BN, BK]
        w_up = tl.load(up_rows + k[None, :], mask=w_mask, other=0.0)
        if DOT_FP32:   # the interpreter: its bf16 dot and casts mangle values; exact fp32 by bits
            x = _to_f32(x)
            w_gate = _to_f32(w_gate)
            w_up = _to_f32(w_up)
        acc_gate = tl.dot(x, tl.trans(w_gate), acc_gate)
        acc_up = tl.dot(x, tl.trans(w_up), acc_up)
        if NORM:   # the x tile is here anyway: its squares cost no load
            xf = _to_f32(x)
            sumsq += tl.sum(xf * xf, axis=1)
    dtype = y_ptr.dtype.element_ty
    gate = _round_to(acc_gate, dtype)   # what the GEMM would store
    up = _round_to(acc_up, dtype)
    if NORM:   # 1/rms(x) as kernels/rmsnorm_triton.py forms it; each half scaled and rounded again
        s = tl.rsqrt(tl.div_rn(sumsq, k_float) + eps)[:, None]
        gate = _round_to(gate * s, dtype)
        up = _round_to(up * s, dtype)
    y = _silu_mul_rounded(gate, up, dtype, EXP64)
    y_offs = offs_m.to(tl.int64)[:, None] * stride_ym + offs_n[None, :]
    tl.store(y_ptr + y_offs, _from_f32(y, dtype), mask=m_ok[:, None] & n_ok[None, :])


def is_interpreting() -> bool:
    """True when triton.jit built the interpreter (TRITON_INTERPRET=1 at import), not a GPU kernel."""
    return not isinstance(_glu_gemm_kernel, triton.runtime.JITFunction)


def choose_config(m: int, inter: int, k: int) -> tuple[int, int, int, int, int]:
    """(BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages) for an [m, k] x [2*inter, k]^T problem."""
    block_m = 64 if m <= 64 else 128
    return block_m, 64, 64, 4, 4


def glu_gemm_triton(x: torch.Tensor, weight: torch.Tensor, norm_eps: float | None = None, *,
                    config: tuple[int, int, int, int, int] | None = None) -> torch.Tensor:
    """x [M, K], weight [2I, K] (gate rows, then up rows), both of one dtype with unit last stride ->
    y [M, I] = silu(x W[:I]^T) * (x W[I:]^T), contiguous. norm_eps: gate and up scaled by
    rsqrt(mean(x^2) + norm_eps) per row first (the deferred RMSNorm; x is the un-normalised input).
    config forces (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages) (benchmarks, tests)."""
    if x.dim() != 2 or weight.dim() != 2 or x.shape[1] != weight.shape[1] or weight.shape[0] % 2:
        raise ValueError(f"glu_gemm_triton: need x [M, K] and weight [2I, K], got {tuple(x.shape)} and "
                         f"{tuple(weight.shape)}")
    if x.dtype not in SUPPORTED_DTYPES or weight.dtype != x.dtype or weight.device != x.device:
        raise ValueError(f"glu_gemm_triton: x and weight must share one dtype of {SUPPORTED_DTYPES} and a device, "
                         f"got {x.dtype} on {x.device} and {weight.dtype} on {weight.device}")
    if x.stride(1) != 1 or weight.stride(1) != 1:
        raise ValueError("glu_gemm_triton: x and weight need unit stride along K")
    m, k = x.shape
    inter = weight.shape[0] // 2
    y = torch.empty((m, inter), dtype=x.dtype, device=x.device)
    if y.numel() == 0:
        return y
    block_m, block_n, block_k, num_warps, num_stages = config or choose_config(m, inter, k)
    grid = (triton.cdiv(m, block_m) * triton.cdiv(inter, block_n),)
    stages = {} if is_interpreting() else {"num_stages": num_stages}
    _glu_gemm_kernel[grid](
        x, weight, y, m, inter, k, x.stride(0), weight.stride(0), y.stride(0), float(k),
        0.0 if norm_eps is None else float(norm_eps), BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k,
        NORM=norm_eps is not None, EXP64=is_interpreting(), DOT_FP32=is_interpreting(), num_warps=num_warps, **stages,
        **LAUNCH_OPTIONS, **pdl_launch(x.device),
    )
    return y
