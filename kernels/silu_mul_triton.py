"""Fused Triton SwiGLU activation: out = silu(gate) * up from the fused gate/up GEMM output.

Replaces two eager kernels (silu, then mul, with the [..., I] silu intermediate written to memory
and read back) with one launch that reads gate_up [..., 2*I] once and writes out [..., I] once.

Rounding, as PyTorch does it for bf16/fp16 (fp32 keeps every value in fp32):
  s = round(g / (1 + exp(-g)))   -- fp32 exp, a correctly rounded fp32 divide, rounded to the dtype
  out = round(s * u)             -- fp32 product of two dtype values, rounded once
bf16 rounding is by hand (round to nearest even on the fp32 bits, kernels.rmsnorm_triton._round_to)
because the interpreter truncates fp32 -> bf16, and bf16 values are widened and narrowed by bit
shifts (kernels.add_rmsnorm_triton._widen/_narrow) because the interpreter's bf16 <-> fp32 casts
mangle subnormals; on the GPU this costs a few integer ops per element in a launch/memory-bound kernel.

exp: on the GPU, libdevice's __nv_expf -- the same expf that PyTorch's CUDA silu kernel calls
(compiled without fast math) -- rather than tl.exp's ex2.approx(x * log2e), whose error grows with
|x|. In the interpreter (EXP64), exp is computed in fp64 and rounded to fp32, i.e. a correctly
rounded expf: it reproduces CPU PyTorch's F.silu on every one of the 2^16 bf16 and 2^16 fp16
inputs (numpy's fp32 exp misses 3 fp16 values). libdevice cannot run in the interpreter. Triton
links libdevice's flush-to-zero variant; that changes nothing here (exp of a subnormal is 1, and a
subnormal exp result disappears in 1 + e), but GPU bit-equality with torch is not tested on CPU.

Deferred RMSNorm (HAS_NORM, the launcher's `norm_source`; why: kernels/silu_mul.py): gate_up came
from a GEMM that read the un-normalised residual stream h [..., H], so before the activation each
row is scaled by s = rsqrt(mean(h^2) + eps), computed as kernels/rmsnorm_triton.py computes rstd:
h widened to fp32 (bf16 by bits), squares summed in fp32, a correctly rounded divide by H, then
tl.rsqrt -- numpy's 1/sqrt in the interpreter, which is what torch.rsqrt computes on CPU; on the GPU
PTX rsqrt.approx.ftz, the instruction CUDA's rsqrtf (torch.rsqrt's CUDA kernel) is built on (ftz
cannot matter with the models' eps = 1e-6: var + eps is never subnormal). Then g = round(g * s),
u = round(u * s) to the dtype -- the reference's one rounding of `(gate_up.float() * scale).to(dtype)`
-- and the two roundings above. Every program (row, column tile) reduces its whole row of h itself,
in chunks of NORM_BLOCK (one chunk up to H = 2048, which covers the real H = 1024/2048): a few KB
re-read from L2 by the 3-6 tiles of a row, cheaper than a second launch or a cross-program exchange.
The sum of squares is a tree reduction (per lane across chunks, then across lanes) whose order
differs from PyTorch's (a vectorized cascade on CPU, another tree on CUDA), which can move the
variance by an fp32 ulp or, rarely, a few (<= 3 measured), and s likewise (<= 4 ulps: s can sit in
a lower binade than the variance). g * s then rounds to a neighbouring bf16/fp16 value where it sits
within an fp32 ulp of a rounding tie: rare (fp16: < 1 element in 10^4, bf16 fewer), bounded and
explained row by row in tests/test_silu_mul.py; fp32 results move in their last bits.

Grid: axis 0 = rows, axis 1 = tiles of BLOCK output columns (I = 3072/6144 -> 3..6 tiles of 1024),
so a one-row decode step still spreads over several SMs. Capturable in a CUDA graph: no host
syncs; the only allocation is the output (plus a copy for inputs whose rows cannot be addressed with
one row stride and unit column stride).
The module reads TRITON_INTERPRET when imported (triton.jit picks the interpreter at decoration).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice

from kernels.add_rmsnorm_triton import _narrow, _widen
from kernels.pdl import pdl_launch, wait_for_prior_grid
from kernels.rmsnorm_triton import _as_rows, _round_to, row_inverse_rms

SUPPORTED_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
MAX_BLOCK = 1024
MAX_NORM_BLOCK = 2048  # h elements reduced per chunk: 16 fp32 per thread at 4 warps; H = 1024/2048 in one
_MAX_GRID_Y = 65535  # CUDA limit on grid axis 1
# No FMA contraction: eager rounds h * h before summing it and g * s before the cast to the dtype.
LAUNCH_OPTIONS = {"enable_fp_fusion": False}


@triton.jit
def _silu_mul_rounded(g, u, dtype: tl.constexpr, EXP64: tl.constexpr):
    """fp32 g, u holding `dtype` values -> fp32 holding round(round(silu(g)) * u) in `dtype`, torch's
    two roundings (module docstring). Shared with the small-M GLU linear (kernels/small_m_linear_triton.py)."""
    if EXP64:  # interpreter: correctly rounded fp32 exp
        e = tl.exp((-g).to(tl.float64)).to(tl.float32)
    else:  # GPU: __nv_expf, what torch's CUDA silu uses
        e = libdevice.exp(-g)
    s = _round_to(tl.div_rn(g, 1.0 + e), dtype)  # F.silu(gate) in gate's dtype
    return _round_to(s * u, dtype)  # * up, rounded once


@triton.jit
def _silu_mul_kernel(
    gu_ptr, out_ptr, h_ptr, inter, gu_row_stride, out_row_stride, h_row_stride, h_cols, h_cols_f, eps,
    BLOCK: tl.constexpr, NORM_BLOCK: tl.constexpr, NORM_CHUNKS: tl.constexpr, HAS_NORM: tl.constexpr,
    EXP64: tl.constexpr,
    PDL: tl.constexpr,
):
    if PDL:   # first: nothing is read or written before the kernel ahead is done (kernels/pdl.py)
        wait_for_prior_grid()
    row = tl.program_id(0).to(tl.int64)  # row * stride can pass 2^31 elements
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < inter
    gate_ptrs = gu_ptr + row * gu_row_stride + cols
    g = _widen(tl.load(gate_ptrs, mask=mask, other=0.0))
    u = _widen(tl.load(gate_ptrs + inter, mask=mask, other=0.0))
    if HAS_NORM:  # deferred RMSNorm: scale the row by rsqrt(mean(h^2) + eps) (module docstring)
        # every program of the row recomputes it (no FMA: LAUNCH_OPTIONS keeps each square rounded)
        scale = row_inverse_rms(h_ptr + row * h_row_stride, h_cols, h_cols_f, eps, NORM_BLOCK, NORM_CHUNKS)
        g = _round_to(g * scale, out_ptr.dtype.element_ty)  # (gate_up.float() * scale).to(dtype)
        u = _round_to(u * scale, out_ptr.dtype.element_ty)
    y = _silu_mul_rounded(g, u, out_ptr.dtype.element_ty, EXP64)  # gate_up, h and out share the dtype
    tl.store(out_ptr + row * out_row_stride + cols, _narrow(y, out_ptr.dtype.element_ty), mask=mask)


def is_interpreting() -> bool:
    """True when triton.jit built the interpreter (TRITON_INTERPRET=1 at import), not a GPU kernel."""
    return not isinstance(_silu_mul_kernel, triton.runtime.JITFunction)


def choose_block(inter: int) -> tuple[int, int]:
    """(BLOCK output columns per program, num_warps): 1024 columns and 4 warps for the real sizes
    (8 elements per thread: one 16-byte bf16 load of gate and one of up)."""
    block = min(MAX_BLOCK, triton.next_power_of_2(max(inter, 1)))
    return block, max(1, min(4, block // 256))


def choose_norm_block(h_cols: int) -> int:
    """NORM_BLOCK: the whole row of h in one chunk up to MAX_NORM_BLOCK, chunks of that beyond."""
    return min(MAX_NORM_BLOCK, triton.next_power_of_2(max(h_cols, 1)))


def silu_mul_triton(gate_up: torch.Tensor, norm_source: torch.Tensor | None = None, eps: float = 0.0, *,
                    block: tuple[int, int] | None = None, norm_block: int | None = None) -> torch.Tensor:
    """gate_up [..., 2*I] (gate first, then up; any leading strides, e.g. a chunk view) ->
    contiguous [..., I] = silu(gate) * up in gate_up's dtype.

    norm_source: None, or h [..., H] (gate_up's leading dims and dtype): the input of a deferred
    RMSNorm, whose factor rsqrt(mean(h^2) + eps) scales each row of gate_up first (module docstring).
    `block` forces (BLOCK, num_warps) and `norm_block` NORM_BLOCK (tests); both must be powers of two.
    """
    if gate_up.dim() == 0 or gate_up.shape[-1] % 2:
        raise ValueError(f"silu_mul_triton: need gate_up [..., 2*I], got {tuple(gate_up.shape)}")
    if gate_up.dtype not in SUPPORTED_DTYPES:
        raise ValueError(f"silu_mul_triton supports {SUPPORTED_DTYPES}, got {gate_up.dtype}")
    if norm_source is not None and (norm_source.dim() == 0 or norm_source.shape[:-1] != gate_up.shape[:-1]
                                    or norm_source.shape[-1] == 0 or norm_source.dtype != gate_up.dtype):
        raise ValueError(f"silu_mul_triton: need norm_source [..., H >= 1] with gate_up's leading dims and dtype, "
                         f"got {tuple(norm_source.shape)} {norm_source.dtype} for gate_up {tuple(gate_up.shape)} "
                         f"{gate_up.dtype}")
    inter = gate_up.shape[-1] // 2
    out = torch.empty(gate_up.shape[:-1] + (inter,), dtype=gate_up.dtype, device=gate_up.device)
    if out.numel() == 0:
        return out
    gu2, out2 = _as_rows(gate_up, 2 * inter), out.view(-1, inter)
    block_n, num_warps = block if block is not None else choose_block(inter)
    if block_n < 1 or block_n & (block_n - 1):
        raise ValueError(f"BLOCK must be a power of two, got {block_n}")
    if norm_source is None:  # HAS_NORM off: the h arguments are never read (gu2 stands in for the pointer)
        h2, h_cols, norm_block_n = gu2, 1, 1
    else:
        h_cols = norm_source.shape[-1]
        h2 = _as_rows(norm_source, h_cols)
        norm_block_n = norm_block if norm_block is not None else choose_norm_block(h_cols)
        if norm_block_n < 1 or norm_block_n & (norm_block_n - 1):
            raise ValueError(f"NORM_BLOCK must be a power of two, got {norm_block_n}")
    grid = (gu2.shape[0], triton.cdiv(inter, block_n))
    if grid[1] > _MAX_GRID_Y:
        raise ValueError(f"too many column tiles ({grid[1]}) for grid axis 1")
    _silu_mul_kernel[grid](
        gu2, out2, h2, inter, gu2.stride(0), out2.stride(0), h2.stride(0), h_cols, float(h_cols), float(eps),
        BLOCK=block_n, NORM_BLOCK=norm_block_n, NORM_CHUNKS=triton.cdiv(h_cols, norm_block_n),
        HAS_NORM=norm_source is not None, EXP64=is_interpreting(),
        num_warps=num_warps, **LAUNCH_OPTIONS, **pdl_launch(gu2.device),
    )
    return out
