"""Triton causal conv1d for the vocoder's conv decoder: implicit GEMM over (tap, input channel).

y[b, o, t] = bias[o] + sum_k sum_i W[k, o, i] * X[b, i, t + k*d - ctx], ctx = (K-1)*d, where X is x
for positions >= 0 and the slot's stored tail (or zeros) for the ctx positions before it. So a
streaming step needs neither [tail ++ x] materialised nor a second conv for the first ctx outputs.

Why not cuDNN: the decoder's convs are stride 1 with few channels (96..1536) over long rows (up
to 48000 samples per row at batch 64), in [B, C, T] layout. cuDNN runs them as NHWC kernels with
a transpose in and out and at ~20 TFLOP/s on an H100 (2.4 ms for 96 channels x 48000 x 64 rows,
against ~0.4 ms to read and write the activation once). Here each program owns a
[BLOCK_CO, BLOCK_T] output tile, reads its input rows along time (coalesced, [B, C, T] as is) once
per tap from cache, and feeds tensor cores with [BLOCK_CO, BLOCK_CI] x [BLOCK_CI, BLOCK_T] dots.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.bf16_bits import from_f32, to_f32
from kernels.causal_conv_config import ConvConfig, choose_conv_config

SUPPORTED_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
_MAX_GRID_YZ = 65535


@triton.jit
def _causal_conv_kernel(
    x_ptr, tail_ptr, w_ptr, bias_ptr, y_ptr,
    c_out, num_samples,
    x_stride_b, x_stride_c,
    tail_stride_b, tail_stride_c,
    y_stride_b, y_stride_c,
    C_IN: tl.constexpr, K: tl.constexpr, DILATION: tl.constexpr,
    HAS_TAIL: tl.constexpr, HAS_BIAS: tl.constexpr,
    BLOCK_CO: tl.constexpr, BLOCK_CI: tl.constexpr, BLOCK_T: tl.constexpr,
    DOT_FP32: tl.constexpr,
):
    pid_t = tl.program_id(0)
    pid_co = tl.program_id(1)
    pid_b = tl.program_id(2).to(tl.int64)
    context_len: tl.constexpr = (K - 1) * DILATION

    outs = pid_co * BLOCK_CO + tl.arange(0, BLOCK_CO)  # [BLOCK_CO] output channels
    times = pid_t * BLOCK_T + tl.arange(0, BLOCK_T)  # [BLOCK_T] output positions
    out_ok = outs < c_out
    time_ok = times < num_samples
    acc = tl.zeros((BLOCK_CO, BLOCK_T), dtype=tl.float32)
    x_row = x_ptr + pid_b * x_stride_b
    tail_row = tail_ptr + pid_b * tail_stride_b
    for k in tl.static_range(K):
        src = times + (k * DILATION - context_len)  # [BLOCK_T] input positions of tap k (< 0: tail)
        from_x = time_ok & (src >= 0)
        # C_IN is a compile-time constant: a handful of values in the decoder, and a loop with
        # constant bounds (the interpreter of triton < 3.7 cannot take runtime bounds under numpy >= 2.4).
        for ci0 in range(0, C_IN, BLOCK_CI):
            ins = ci0 + tl.arange(0, BLOCK_CI)  # [BLOCK_CI]
            in_ok = ins < C_IN
            w = tl.load(w_ptr + (k * c_out + outs[:, None]) * C_IN + ins[None, :],
                        mask=out_ok[:, None] & in_ok[None, :], other=0.0)  # [BLOCK_CO, BLOCK_CI]
            chan_offs = ins.to(tl.int64)[:, None]
            xv = tl.load(x_row + chan_offs * x_stride_c + src[None, :],
                         mask=in_ok[:, None] & from_x[None, :], other=0.0)  # [BLOCK_CI, BLOCK_T]
            if HAS_TAIL:
                # Only the first tile of a row has src < 0: elsewhere this load is fully masked.
                from_tail = time_ok & (src < 0)
                tv = tl.load(tail_row + chan_offs * tail_stride_c + (src + context_len)[None, :],
                             mask=in_ok[:, None] & from_tail[None, :], other=0.0)
                xv = tl.where(from_tail[None, :], tv, xv)
            if DOT_FP32:  # fp32 inputs (no tf32), or bf16 under the interpreter (see kernels/bf16_bits.py)
                acc = tl.dot(to_f32(w), to_f32(xv), acc, input_precision="ieee")
            else:
                acc = tl.dot(w, xv, acc)
    if HAS_BIAS:
        acc += to_f32(tl.load(bias_ptr + outs, mask=out_ok, other=0.0))[:, None]
    y_offs = pid_b * y_stride_b + outs.to(tl.int64)[:, None] * y_stride_c + times[None, :]
    tl.store(y_ptr + y_offs, from_f32(acc, y_ptr.dtype.element_ty), mask=out_ok[:, None] & time_ok[None, :])


def is_interpreting() -> bool:
    return not isinstance(_causal_conv_kernel, triton.runtime.JITFunction)


def causal_conv1d_triton(
    x: torch.Tensor,
    weight_kco: torch.Tensor,
    dilation: int,
    tail: torch.Tensor | None,
    bias: torch.Tensor | None,
    config: ConvConfig | None = None,
) -> torch.Tensor:
    """x [B, C_in, T] (time stride 1), weight_kco [K, C_out, C_in] contiguous, tail [B, C_in, (K-1)*d]
    (time stride 1) or None (zeros), bias [C_out] or None -> [B, C_out, T] contiguous, x's dtype."""
    if x.dim() != 3 or weight_kco.dim() != 3 or x.shape[1] != weight_kco.shape[2]:
        raise ValueError(f"causal_conv1d_triton: x [B, C_in, T] and weight [K, C_out, C_in] disagree: "
                         f"{tuple(x.shape)} vs {tuple(weight_kco.shape)}")
    if x.dtype not in SUPPORTED_DTYPES or weight_kco.dtype != x.dtype:
        raise ValueError(f"causal_conv1d_triton: x and weight must share a dtype in {SUPPORTED_DTYPES}, "
                         f"got {x.dtype} and {weight_kco.dtype}")
    num_batch, c_in, num_samples = x.shape
    num_taps, c_out, _ = weight_kco.shape
    context_len = (num_taps - 1) * dilation
    if x.stride(2) != 1:
        x = x.contiguous()
    weight_kco = weight_kco.contiguous()
    if tail is not None:
        if tuple(tail.shape) != (num_batch, c_in, context_len):
            raise ValueError(f"causal_conv1d_triton: tail must be [{num_batch}, {c_in}, {context_len}], "
                             f"got {tuple(tail.shape)}")
        if tail.stride(2) != 1:
            tail = tail.contiguous()
    y = torch.empty((num_batch, c_out, num_samples), device=x.device, dtype=x.dtype)
    if y.numel() == 0:
        return y
    if config is None:
        config = choose_conv_config(c_in, c_out, num_samples, num_batch, interpreted=is_interpreting())
    grid_co = triton.cdiv(c_out, config.block_co)
    grid_t = triton.cdiv(num_samples, config.block_t)
    tail_arg = tail if tail is not None else x
    for b0 in range(0, num_batch, _MAX_GRID_YZ):
        xs, ys, ts = x[b0:b0 + _MAX_GRID_YZ], y[b0:b0 + _MAX_GRID_YZ], tail_arg[b0:b0 + _MAX_GRID_YZ]
        _causal_conv_kernel[(grid_t, grid_co, xs.shape[0])](
            xs, ts, weight_kco, bias if bias is not None else weight_kco, ys,
            c_out, num_samples,
            xs.stride(0), xs.stride(1),
            ts.stride(0), ts.stride(1),
            ys.stride(0), ys.stride(1),
            C_IN=c_in, K=num_taps, DILATION=dilation, HAS_TAIL=tail is not None, HAS_BIAS=bias is not None,
            BLOCK_CO=config.block_co, BLOCK_CI=config.block_ci, BLOCK_T=config.block_t,
            DOT_FP32=x.dtype == torch.float32 or (x.dtype == torch.bfloat16 and is_interpreting()),
            num_warps=config.num_warps, num_stages=config.num_stages,
        )
    return y
