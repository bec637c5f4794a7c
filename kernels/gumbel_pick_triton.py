"""Fused seeded Gumbel-max pick: one Triton launch replaces the ~25 eager launches of
`gumbel_for_tokens` + add + argmax + gather at the end of every sampling (the decode step is
launch-bound at small batch).

One program per row, the row's K candidates (K <= 4096) in one block. Per candidate, bit for bit as
kernels/hash_hash_noise.py:
    token_part = mix32((token + TOKEN_SALT) mod 2**32)        (or hashes[token], the same values)
    bits       = mix32(key ^ token_part)
    u          = ((bits >> 9) + 0.5) * 2**-23                   fp32, exact
    score      = value + (-log(-log(u)))                        fp32
then the FIRST index of the maximum score (torch.argmax; a NaN score counts as the maximum, as in
torch) and out[row] = token_ids[row, index].

The reference keeps 32-bit lanes in int64 with `& 0xFFFFFFFF` after each multiply (multipliers < 2**31);
here the lanes are uint32 with wrap-around multiplies and logical shifts, which give the same low
32 bits. `tl.log` on fp32 lowers to libdevice's __nv_logf (checked in the sm_90 PTX; Triton links
its flush-to-zero variant, which differs only on subnormals, and none occur: u >= 2**-24, -log(u) >=
2**-24), the function behind CUDA's logf and so behind torch.log on CUDA. The fp32 arithmetic around
it has no multiply-add pair to contract (fp fusion is pinned off anyway). tests/test_gumbel_pick.py
has a CUDA-only test comparing all 2**23 possible noise values with torch.log's. In the interpreter
tl.log is numpy's log: ~32% of the noise values differ from torch's CPU ones (<= 1e-6 absolute);
the picks still matched (see the tests for the measurement).

Capturable in a CUDA graph: no host syncs; the only allocation is the output (torch.empty).
The module reads TRITON_INTERPRET when imported (triton.jit picks the interpreter at decoration).
"""
from __future__ import annotations

from typing import Optional

import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice

from kernels.gumbel_pick_reference import check_args

MAX_K = 4096
# hash_noise.py's constants (tests check they match); constexpr so the compiled kernel may read them
TOKEN_SALT = tl.constexpr(0x2545F491)  # noise._TOKEN_SALT
MUL_A = tl.constexpr(0x7FEB352D)  # noise._MUL_A
MUL_B = tl.constexpr(0x5BD1E995)  # noise._MUL_B
UNIFORM_SHIFT = tl.constexpr(9)  # 32 - noise._UNIFORM_BITS


@triton.jit
def _mix32(x):
    """noise.mix32 on uint32 lanes (wrap-around multiplies = the reference's & 0xFFFFFFFF)."""
    x = x ^ (x >> 16)
    x = x * MUL_A
    x = x ^ (x >> 15)
    x = x * MUL_B
    x = x ^ (x >> 16)
    x = x * MUL_A
    return x ^ (x >> 15)


@triton.jit
def _token_part(token):
    """hash_noise.py's token half for int64 vocabulary ids: mix32((token + TOKEN_SALT) & 0xFFFFFFFF)."""
    return _mix32((token + TOKEN_SALT).to(tl.uint32))


@triton.jit
def _gumbel_from_bits(bits):
    """fp32 Gumbel noise from 32 hash bits: -log(-log(((bits >> 9) + 0.5) * 2**-23)), as hash_noise.py."""
    uniform = ((bits >> UNIFORM_SHIFT).to(tl.float32) + 0.5) * 1.1920928955078125e-07  # 2**-23, exact
    return -tl.log(-tl.log(uniform))


@triton.jit
def _first_argmax(values, cols, ok, BLOCK: tl.constexpr):
    """torch.argmax of values[ok] along one block: the first index of the maximum, a NaN counting
    as the maximum (the first NaN wins). Shared by the pick kernels and sample_rows."""
    is_nan = (values != values) & ok
    finite = tl.where(is_nan | (~ok), float("-inf"), values)
    best = tl.max(finite, axis=0)
    first = tl.min(tl.where(ok & (finite == best), cols, BLOCK), axis=0)
    first_nan = tl.min(tl.where(is_nan, cols, BLOCK), axis=0)
    return tl.where(first_nan < BLOCK, first_nan, first)


@triton.jit
def _softmax(values, ok, LIBDEVICE_EXP: tl.constexpr):
    """softmax of values over the ok lanes (0 elsewhere): exp is libdevice's __nv_expf on the GPU
    (CUDA's expf, as torch's softmax), tl.exp in the interpreter; the division is IEEE."""
    shifted = values - tl.max(values, axis=0)
    if LIBDEVICE_EXP:
        expd = libdevice.exp(shifted)
    else:
        expd = tl.exp(shifted)
    expd = tl.where(ok, expd, 0.0)
    return tl.div_rn(expd, tl.sum(expd, axis=0))


@triton.jit
def _gumbel_max_token(value, cols, ok, row, tokens_ptr, tokens_row_stride, keys_ptr, keys_stride, hashes_ptr,
                      HAS_HASHES: tl.constexpr, BLOCK_K: tl.constexpr):
    """Add each candidate's hash-noise Gumbel draw to `value` [BLOCK_K] and return the token of the
    first maximum (a NaN score wins, as in torch.argmax). Shared by gumbel_pick and warp_pick."""
    token = tl.load(tokens_ptr + row * tokens_row_stride + cols, mask=ok, other=0)
    key = tl.load(keys_ptr + row * keys_stride).to(tl.uint32)
    if HAS_HASHES:
        token_part = tl.load(hashes_ptr + token, mask=ok, other=0).to(tl.uint32)
    else:
        token_part = _token_part(token)
    score = value + _gumbel_from_bits(_mix32(key ^ token_part))
    pick = _first_argmax(score, cols, ok, BLOCK_K)
    return tl.load(tokens_ptr + row * tokens_row_stride + pick)


@triton.jit
def _gumbel_pick_kernel(
    values_ptr, tokens_ptr, keys_ptr, hashes_ptr, out_ptr,
    num_cols, values_row_stride, tokens_row_stride, keys_stride,
    HAS_HASHES: tl.constexpr, BLOCK_K: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_K)
    ok = cols < num_cols
    value = tl.load(values_ptr + row * values_row_stride + cols, mask=ok, other=float("-inf"))
    token = _gumbel_max_token(value, cols, ok, row, tokens_ptr, tokens_row_stride, keys_ptr, keys_stride, hashes_ptr,
                              HAS_HASHES, BLOCK_K)
    tl.store(out_ptr + row, token)


def is_interpreting() -> bool:
    """True when triton.jit built the interpreter (TRITON_INTERPRET=1 at import), not a GPU kernel."""
    return not isinstance(_gumbel_pick_kernel, triton.runtime.JITFunction)


def choose_block(num_cols: int) -> tuple[int, int]:
    """(BLOCK_K, num_warps) for rows of num_cols candidates."""
    block_k = max(16, triton.next_power_of_2(num_cols))
    return block_k, min(8, max(1, block_k // 256))


def pick_operands(name: str, values: torch.Tensor, token_ids: torch.Tensor, hashes: Optional[torch.Tensor]):
    """What both pick launchers (gumbel_pick, warp_pick) prepare: the int64 [bs] output, rows
    with a unit column stride, and (BLOCK_K, num_warps) for K candidates (ValueError past MAX_K)."""
    num_rows, num_cols = values.shape
    if not 1 <= num_cols <= MAX_K:
        raise ValueError(f"{name} supports 1 <= K <= {MAX_K}, got K={num_cols}")
    out = torch.empty(num_rows, dtype=torch.int64, device=values.device)
    if values.stride(1) != 1:
        values = values.contiguous()
    if token_ids.stride(1) != 1:
        token_ids = token_ids.contiguous()
    if hashes is not None and hashes.stride(0) != 1:
        hashes = hashes.contiguous()
    return (out, values, token_ids, hashes, *choose_block(num_cols))


def gumbel_pick_triton(values: torch.Tensor, token_ids: torch.Tensor, keys: torch.Tensor,
                       hashes: Optional[torch.Tensor] = None) -> torch.Tensor:
    """int64 [bs]: the token of each row's Gumbel-max pick (see the module docstring), one launch."""
    check_args(values, token_ids, keys, hashes)
    out, values, token_ids, hashes, block_k, num_warps = pick_operands("gumbel_pick_triton", values, token_ids, hashes)
    num_rows, num_cols = values.shape
    if out.numel() == 0:
        return out
    _gumbel_pick_kernel[(num_rows,)](
        values, token_ids, keys, token_ids if hashes is None else hashes, out,
        num_cols, values.stride(0), token_ids.stride(0), keys.stride(0),
        HAS_HASHES=hashes is not None, BLOCK_K=block_k, num_warps=num_warps,
        enable_fp_fusion=False,  # nothing here to contract; pinned so the numerics never depend on it
    )
    return out
