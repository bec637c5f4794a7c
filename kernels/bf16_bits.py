"""bf16 <-> fp32 by bits, for kernels whose bf16 dots must also run in the Triton interpreter.

The interpreter multiplies the raw uint16 patterns in a bf16 dot, mangles bf16 subnormals in casts
and truncates fp32 -> bf16; kernels that test bf16 on the CPU widen tiles with `to_f32` and multiply
in fp32 there, and round outputs with `from_f32` (nearest even, as the GPU's cvt.rn) on both paths.

`round_bf16_f32` is the kernels' "round to bf16, keep computing in fp32" step (eager PyTorch rounds
after every bf16 op). On the GPU it is the hardware conversion there and back (cvt.rn.bf16.f32, the
same nearest-even result): two instructions instead of the bit trick's seven integer ones, which made
the ALU the busiest pipe of the code predictor's one-launch attention (Nsight Compute, H100, batch
256: 42.6%, 2286 instructions a warp). Under the interpreter, whose cast truncates, it is the bits.
"""
from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _jit_probe():
    pass


# True where triton.jit builds GPU kernels, False under TRITON_INTERPRET (a constexpr the kernels read)
HW_CASTS = tl.constexpr(isinstance(_jit_probe, triton.runtime.JITFunction))


@triton.jit
def round_bf16_f32(v):
    """fp32 v -> the nearest bf16 value (ties to even), still as fp32. A NaN stays a NaN (on the GPU
    the canonical one, as torch's own rounding gives)."""
    if HW_CASTS:
        return v.to(tl.bfloat16).to(tl.float32)
    else:
        bits = v.to(tl.uint32, bitcast=True)
        bits = (bits + (((bits >> 16) & 1) + 0x7FFF)) & 0xFFFF0000
        return tl.where(v != v, v, bits.to(tl.float32, bitcast=True))


@triton.jit
def to_f32(v):
    """A loaded tile as exact fp32 (bf16 by bits: the interpreter's bf16 cast mangles subnormals)."""
    if v.dtype == tl.bfloat16:
        return (v.to(tl.uint16, bitcast=True).to(tl.uint32) << 16).to(tl.float32, bitcast=True)
    else:
        return v.to(tl.float32)


@triton.jit
def from_f32(v, dtype: tl.constexpr):
    """fp32 -> dtype; bf16 rounded to nearest even: the hardware cast (cvt.rn) on the GPU, by bits under
    the interpreter (its cast truncates). NaN stays NaN."""
    if HW_CASTS:
        return v.to(dtype)
    elif dtype == tl.bfloat16:
        bits = v.to(tl.uint32, bitcast=True)
        rounded = (bits + (0x7FFF + ((bits >> 16) & 1))) >> 16
        rounded = tl.where(v != v, bits >> 16, rounded)
        return rounded.to(tl.uint16).to(tl.bfloat16, bitcast=True)
    else:
        return v.to(dtype)
