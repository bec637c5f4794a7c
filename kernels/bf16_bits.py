"""bf16 <-> fp32 by bits, for kernels whose bf16 dots must also run in the Triton interpreter.

The interpreter multiplies the raw uint16 patterns in a bf16 dot, mangles bf16 subnormals in casts
and truncates fp32 -> bf16; kernels that test bf16 on the CPU widen tiles with `to_f32` and multiply
in fp32 there, and round outputs with `from_f32` (nearest even, as the GPU's cvt.rn) on both paths.
"""
from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def to_f32(v):
    """A loaded tile as exact fp32 (bf16 by bits: the interpreter's bf16 cast mangles subnormals)."""
    if v.dtype == tl.bfloat16:
        return (v.to(tl.uint16, bitcast=True).to(tl.uint32) << 16).to(tl.float32, bitcast=True)
    else:
        return v.to(tl.float32)


@triton.jit
def from_f32(v, dtype: tl.constexpr):
    """fp32 -> dtype; bf16 rounded to nearest even by bits (the GPU's cvt.rn, which the interpreter's
    truncating cast is not). NaN stays NaN."""
    if dtype == tl.bfloat16:
        bits = v.to(tl.uint32, bitcast=True)
        rounded = (bits + (0x7FFF + ((bits >> 16) & 1))) >> 16
        rounded = tl.where(v != v, bits >> 16, rounded)
        return rounded.to(tl.uint16).to(tl.bfloat16, bitcast=True)
    else:
        return v.to(dtype)
