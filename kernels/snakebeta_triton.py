"""Fused Triton SnakeBeta: y = x + sin(x * a)^2 * b, one read of x and one write of y.

Optionally the input is first x + bias[c] + residual (a conv's bias and the residual stream added
in the same pass), and that sum can be stored too (the residual stream the next unit adds to).

Grid: axis 0 = tiles along time, axis 1 = tiles of channels, axis 2 = batch. Each program owns a
[BLOCK_C, BLOCK_T] tile of one batch item, so the channel of every row is known without any
integer division, a/b are loaded once per row, and long rows (T ~ 10^5) and short rows (T = 4 in the
first decoder stage, with C = 1536) both fill a program with BLOCK_C * BLOCK_T useful elements.

x, y, the residual and the sum each take full (batch, channel, time) strides. Triton specialises
integer arguments equal to 1, so for a channel-major tensor the unit time stride, and for a
time-major one ([B, T, C] memory) the unit channel stride, is a compile-time constant and the loads
vectorise along that axis; choose_config shapes the tile to match. When every operand is time-major
with dense rows (the decoder's case) a second kernel walks each row as one flat run instead
(_snake_beta_rows_kernel: no channel tile to pad).

The module reads TRITON_INTERPRET when it is imported (triton.jit picks the interpreter at
decoration time), so tests that want the CPU interpreter must set it before the first import.
"""
from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from kernels.snakebeta_config import RowsConfig, SnakeConfig, choose_config, choose_rows_config
from kernels.time_major import empty_in_layout, is_time_major

# Cody-Waite: pi = _PI_A + _PI_B + _PI_C, where _PI_A (8 significant bits) and _PI_B (9 bits) are
# short enough that k * _PI_A and k * _PI_B are exact in fp32 for |k| < 2^15, i.e. |x * a| up to
# ~1e5, far beyond decoder activations. The first two subtractions are therefore exact whether or
# not the multiply-add is fused, and the reduced argument stays within ~6e-8 of x*a - k*pi. (A
# two-part split whose high part carries all 24 bits relies on a fused fma to cancel k * pi_hi;
# Triton 3.6's interpreter evaluates tl.fma as a rounded multiply then an add, which left errors of
# ~4e-3 at |x * a| ~ 1e4.)
_PI_A = tl.constexpr(3.140625)
_PI_B = tl.constexpr(9.670257568359375e-04)  # 507 / 2^19
_PI_C = tl.constexpr(6.278329465203569e-07)  # pi - _PI_A - _PI_B, rounded to fp32
_INV_PI = tl.constexpr(0.3183098861837907)

SUPPORTED_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
# Grid axes 1 and 2 are limited to 65535 programs by CUDA.
_MAX_GRID_YZ = 65535


@triton.jit
def _snake_beta_kernel(
    x_ptr, a_ptr, b_ptr, y_ptr,
    bias_ptr, r_ptr, s_ptr,
    num_channels, num_samples,
    x_stride_b, x_stride_c, x_stride_t,
    y_stride_b, y_stride_c, y_stride_t,
    r_stride_b, r_stride_c, r_stride_t,
    s_stride_b, s_stride_c, s_stride_t,
    BLOCK_C: tl.constexpr, BLOCK_T: tl.constexpr, FAST_SIN: tl.constexpr,
    HAS_BIAS: tl.constexpr, HAS_RESIDUAL: tl.constexpr, WRITE_SUM: tl.constexpr,
):
    pid_t = tl.program_id(0)
    pid_c = tl.program_id(1)
    pid_b = tl.program_id(2).to(tl.int64)  # int64: b * stride overflows int32 past 2^31 elements

    chans = pid_c * BLOCK_C + tl.arange(0, BLOCK_C)  # [BLOCK_C]
    times = pid_t * BLOCK_T + tl.arange(0, BLOCK_T)  # [BLOCK_T]
    chan_ok = chans < num_channels
    mask = chan_ok[:, None] & (times < num_samples)[None, :]  # [BLOCK_C, BLOCK_T]

    a = tl.load(a_ptr + chans, mask=chan_ok, other=0.0)[:, None]  # [BLOCK_C, 1] fp32
    b = tl.load(b_ptr + chans, mask=chan_ok, other=0.0)[:, None]
    chans64 = chans.to(tl.int64)
    times64 = times.to(tl.int64)  # time-major rows: t * C, and the batch offset, in 64 bits
    x_offs = (pid_b * x_stride_b + chans64 * x_stride_c)[:, None] + (times64 * x_stride_t)[None, :]
    y_offs = (pid_b * y_stride_b + chans64 * y_stride_c)[:, None] + (times64 * y_stride_t)[None, :]

    x = tl.load(x_ptr + x_offs, mask=mask, other=0.0).to(tl.float32)
    # The decoder's conv bias and residual add ride along: one pass over the activation instead of
    # three (a broadcast bias add and a strided residual add each cost a full read and write).
    if HAS_BIAS:
        x = x + tl.load(bias_ptr + chans, mask=chan_ok, other=0.0).to(tl.float32)[:, None]
    if HAS_RESIDUAL:
        r_offs = (pid_b * r_stride_b + chans64 * r_stride_c)[:, None] + (times64 * r_stride_t)[None, :]
        x = x + tl.load(r_ptr + r_offs, mask=mask, other=0.0).to(tl.float32)
    if WRITE_SUM:
        s_offs = (pid_b * s_stride_b + chans64 * s_stride_c)[:, None] + (times64 * s_stride_t)[None, :]
        tl.store(s_ptr + s_offs, x.to(s_ptr.dtype.element_ty), mask=mask)
    # The cast rounds to nearest even on GPU; the interpreter truncates fp32 -> bf16 (tests allow 1 ulp).
    tl.store(y_ptr + y_offs, _snake(x, a, b, FAST_SIN).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _snake_beta_rows_kernel(
    x_ptr, a_ptr, b_ptr, y_ptr,
    bias_ptr, r_ptr, s_ptr,
    row_numel,
    x_stride_b, y_stride_b, r_stride_b, s_stride_b,
    NUM_CHANNELS: tl.constexpr, BLOCK: tl.constexpr, FAST_SIN: tl.constexpr,
    HAS_BIAS: tl.constexpr, HAS_RESIDUAL: tl.constexpr, WRITE_SUM: tl.constexpr,
):
    """Time-major operands whose rows are dense ([T, C] contiguous per batch item): a row is one
    flat run of T * C elements, so a program takes BLOCK consecutive elements whatever C is (the
    decoder's 96 channels would leave a quarter of a 128-wide channel tile idle) and finds each
    element's channel as offset % C, a constant divisor."""
    pid = tl.program_id(0)
    pid_b = tl.program_id(1).to(tl.int64)
    offs = pid * BLOCK + tl.arange(0, BLOCK)  # int32: the launcher keeps rows below 2^31 elements
    mask = offs < row_numel
    chans = offs % NUM_CHANNELS
    a = tl.load(a_ptr + chans, mask=mask, other=0.0)  # fp32 tables of C entries: L1 hits
    b = tl.load(b_ptr + chans, mask=mask, other=0.0)
    x = tl.load(x_ptr + pid_b * x_stride_b + offs, mask=mask, other=0.0).to(tl.float32)
    if HAS_BIAS:
        x = x + tl.load(bias_ptr + chans, mask=mask, other=0.0).to(tl.float32)
    if HAS_RESIDUAL:
        x = x + tl.load(r_ptr + pid_b * r_stride_b + offs, mask=mask, other=0.0).to(tl.float32)
    if WRITE_SUM:
        tl.store(s_ptr + pid_b * s_stride_b + offs, x.to(s_ptr.dtype.element_ty), mask=mask)
    tl.store(y_ptr + pid_b * y_stride_b + offs, _snake(x, a, b, FAST_SIN).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _snake(x, a, b, FAST_SIN: tl.constexpr):
    """x + sin(x * a)^2 * b in fp32."""
    z = x * a
    # sin^2 has period pi: reduce to [-pi/2, pi/2] so the hardware approximation stays accurate.
    k = tl.floor(z * _INV_PI + 0.5)
    r = tl.fma(-k, _PI_A, z)
    r = tl.fma(-k, _PI_B, r)
    r = tl.fma(-k, _PI_C, r)
    if FAST_SIN:
        # MUFU sine: abs error ~2^-21 on [-pi, pi], a few instructions instead of libdevice's ~30.
        s = tl.inline_asm_elementwise(
            "sin.approx.f32 $0, $1;", "=f,f", [r], dtype=tl.float32, is_pure=True, pack=1
        )
    else:
        s = tl.sin(r)
    return x + s * s * b


def is_interpreting() -> bool:
    """True when triton.jit built the interpreter (TRITON_INTERPRET=1 at import), not a GPU kernel."""
    return not isinstance(_snake_beta_kernel, triton.runtime.JITFunction)


@functools.lru_cache(maxsize=None)
def _num_sms(device: torch.device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count


def snake_beta_triton(
    x: torch.Tensor,
    alpha_exp: torch.Tensor,
    inv_beta: torch.Tensor,
    out: torch.Tensor | None = None,
    config: SnakeConfig | None = None,
    *,
    bias: torch.Tensor | None = None,
    residual: torch.Tensor | None = None,
    sum_out: torch.Tensor | None = None,
) -> torch.Tensor:
    """x: [B, C, T], any strides (channel-major, time-major or a view); alpha_exp, inv_beta: [C] fp32.

    Returns snake(x [+ bias] [+ residual]) as [B, C, T] in x's dtype, dense in x's layout
    (empty_in_layout), or writes into `out` (any strides; it may be x itself: every element is read
    before it is written by the same program). bias: [C] (any float dtype); residual: x's shape and
    dtype, any strides; sum_out: where to store x + bias + residual itself (the decoder's residual
    stream), same rules as `out`.
    """
    if x.dim() != 3:
        raise ValueError(f"snake_beta_triton expects x of shape [B, C, T], got {tuple(x.shape)}")
    if x.dtype not in SUPPORTED_DTYPES:
        raise ValueError(f"snake_beta_triton supports {SUPPORTED_DTYPES}, got {x.dtype}")
    num_batch, num_channels, num_samples = x.shape
    a = alpha_exp.to(device=x.device, dtype=torch.float32).contiguous()  # no-op when precomputed
    b = inv_beta.to(device=x.device, dtype=torch.float32).contiguous()
    out = _checked_out(out, x, "out")
    if residual is not None:
        if residual.shape != x.shape or residual.dtype != x.dtype:
            raise ValueError(f"residual must match x ({tuple(x.shape)}, {x.dtype}), "
                             f"got {tuple(residual.shape)}, {residual.dtype}")
    if sum_out is not None:
        sum_out = _checked_out(sum_out, x, "sum_out")
    if bias is not None:
        if tuple(bias.shape) != (num_channels,):
            raise ValueError(f"bias must have shape [{num_channels}], got {tuple(bias.shape)}")
        bias = bias.contiguous()
    if x.numel() == 0:
        return out
    use_gpu = x.is_cuda and not is_interpreting()
    num_sms = _num_sms(x.device) if use_gpu else 1  # interpreter: fewer programs
    operands = [x, out] + [t for t in (residual, sum_out) if t is not None]
    if config is None and all(_row_dense_time_major(t) for t in operands) and x[0].numel() < 2**31:
        rows = choose_rows_config(num_channels * num_samples, x.element_size(), num_batch=num_batch,
                                  is_cuda=use_gpu, num_sms=num_sms)
        _launch_rows(x, a, b, out, bias, residual, sum_out, rows)
        return out
    if config is None:
        config = choose_config(
            num_channels, num_samples, x.element_size(), num_batch=num_batch,
            is_cuda=use_gpu, num_sms=num_sms, time_major=is_time_major(x),
        )
    num_c_tiles = triton.cdiv(num_channels, config.block_c)
    if num_c_tiles > _MAX_GRID_YZ:
        raise ValueError(f"{num_channels} channels need {num_c_tiles} channel tiles > {_MAX_GRID_YZ}")
    num_t_tiles = triton.cdiv(num_samples, config.block_t)
    # Unused operands point at x (never read: their constexpr flags are off) with zero strides.
    rs = residual if residual is not None else x
    ss = sum_out if sum_out is not None else out
    # Batches beyond the grid's z limit go in slices; views keep the strides, no copies.
    for b0 in range(0, num_batch, _MAX_GRID_YZ):
        b1 = b0 + _MAX_GRID_YZ
        xs, ys, r_rows, s_rows = x[b0:b1], out[b0:b1], rs[b0:b1], ss[b0:b1]
        grid = (num_t_tiles, num_c_tiles, xs.shape[0])
        _snake_beta_kernel[grid](
            xs, a, b, ys,
            bias if bias is not None else a, r_rows, s_rows,
            num_channels, num_samples,
            xs.stride(0), xs.stride(1), xs.stride(2),
            ys.stride(0), ys.stride(1), ys.stride(2),
            r_rows.stride(0), r_rows.stride(1), r_rows.stride(2),
            s_rows.stride(0), s_rows.stride(1), s_rows.stride(2),
            BLOCK_C=config.block_c, BLOCK_T=config.block_t, FAST_SIN=config.fast_sin,
            HAS_BIAS=bias is not None, HAS_RESIDUAL=residual is not None, WRITE_SUM=sum_out is not None,
            num_warps=config.num_warps,
        )
    return out


def _launch_rows(x, a, b, out, bias, residual, sum_out, rows: RowsConfig) -> None:
    """The flat-row kernel over row-dense time-major operands (grid: row tiles x batch items)."""
    rs = residual if residual is not None else x
    ss = sum_out if sum_out is not None else out
    row_numel = x.shape[1] * x.shape[2]
    for b0 in range(0, x.shape[0], _MAX_GRID_YZ):
        b1 = b0 + _MAX_GRID_YZ
        xs, ys, r_rows, s_rows = x[b0:b1], out[b0:b1], rs[b0:b1], ss[b0:b1]
        _snake_beta_rows_kernel[(triton.cdiv(row_numel, rows.block), xs.shape[0])](
            xs, a, b, ys, bias if bias is not None else a, r_rows, s_rows, row_numel,
            xs.stride(0), ys.stride(0), r_rows.stride(0), s_rows.stride(0),
            NUM_CHANNELS=x.shape[1], BLOCK=rows.block, FAST_SIN=rows.fast_sin,
            HAS_BIAS=bias is not None, HAS_RESIDUAL=residual is not None, WRITE_SUM=sum_out is not None,
            num_warps=rows.num_warps,
        )


def _row_dense_time_major(t: torch.Tensor) -> bool:
    """Time-major with each batch item's [T, C] block contiguous (a time slice of a time-major
    buffer qualifies: only its batch stride differs)."""
    return is_time_major(t) and t.stride(2) == t.shape[1]


def snake_beta_fused_triton(
    x: torch.Tensor,
    alpha_exp: torch.Tensor,
    inv_beta: torch.Tensor,
    bias: torch.Tensor | None,
    residual: torch.Tensor | None,
    return_sum: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(snake(x + bias + residual), the sum itself or None): the dispatcher's fused entry point."""
    sum_out = empty_in_layout(x) if return_sum else None
    y = snake_beta_triton(x, alpha_exp, inv_beta, bias=bias, residual=residual, sum_out=sum_out)
    return y, sum_out


def _checked_out(out: torch.Tensor | None, x: torch.Tensor, name: str) -> torch.Tensor:
    if out is None:
        return empty_in_layout(x)
    if out.shape != x.shape or out.dtype != x.dtype or out.device != x.device:
        raise ValueError(
            f"{name} must match x ({tuple(x.shape)}, {x.dtype}, {x.device}), "
            f"got {tuple(out.shape)}, {out.dtype}, {out.device}"
        )
    return out
