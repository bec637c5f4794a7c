"""Fused temperature + top-k/top-p mask + seeded Gumbel-max pick + greedy select: one Triton launch
replaces, in talker_service.model.sampling.choose_tokens_keyed, everything between the topk/sort of
the raw logits (and the greedy argmax) and the chosen tokens: the temperature (ones_like, where and a
[bs, V] division before the sort), the ~15 launches of _candidates' masking (k clamp, k-th gather,
mask, softmax, flip/cumsum/flip, compare, fill), the gumbel_pick launch and the final
where(do_sample, sampled, greedy) -- the decode step is launch-bound.

One program per row, the row's K sorted raw candidates (K <= 4096) in one block:
    t      = do_sample ? temperature : 1                           (greedy rows: no division by 0)
    v      = values / t,  kth = values[k - 1] / t                  (IEEE fp32 division, div_rn)
    k      = top_k > 0 ? top_k : vocab_size, clamped to [1, K]
    v      = v < kth ? -inf : v                                    (ties with the k-th kept)
    p      = exp(v - max v) / sum                                  (softmax)
    mass   = reverse cumulative sum of p                           (tl.cumsum(reverse=True))
    v      = -inf where mass <= 1 - top_p, top_p < 1 and not the first candidate
then the Gumbel-max pick of kernels/gumbel_pick_triton.py on v, with its jit helpers (_mix32,
_token_part, _gumbel_from_bits, imported, bit for bit the same noise), first maximum, NaN first;
out = do_sample ? the pick : greedy[row].

The scaled values are bit for bit the eager `logits / temperature[:, None]` (one correctly rounded
division per element, the same operands), only computed on the K candidates after the sort instead
of on all V logits before it; why the sort of the raw logits gives the same candidates is written
at sampling.choose_tokens_keyed.

Numerics vs the eager reference (kernels/warp_pick_reference.py): the temperature division, the
mask thresholds, the k-th compare, 1 - top_p, the pick and the greedy select are exact; the softmax
and the cumulative sum are not bit-identical to torch's (reduction/scan order; torch's CPU cumsum
even accumulates in double), so a probability may differ in the last ulps and a pick can differ only
where a tail mass sits within a few ulps of 1 - top_p, or where the Gumbel argmax is a near-tie. On
the GPU the exp is libdevice's __nv_expf (what CUDA's expf, and so torch's softmax, uses; tl.exp
would be ex2.approx of x * log2(e)) and both divisions are IEEE (div.rn; Triton's `/` would be the
approximate div.full); the interpreter cannot call libdevice (extern calls raise there) and uses
tl.exp (numpy's exp). Triton links libdevice's flush-to-zero variant: exp(v - max) below 2**-126
becomes 0 instead of a subnormal, which changes no decision (such a mass is <= 1 - top_p either way,
as 1 - top_p >= 2**-24 whenever top_p < 1) and no pick (the pick reads v, not the probabilities).

Capturable in a CUDA graph: no host syncs; the only allocation is the output (torch.empty).
The module reads TRITON_INTERPRET when imported (triton.jit picks the interpreter at decoration).
"""
from __future__ import annotations

from typing import Optional

import torch
import triton
import triton.language as tl

from kernels import gumbel_pick_triton
from kernels.gumbel_pick_triton import _gumbel_max_token, _softmax, pick_operands
from kernels.warp_pick_reference import check_args

MAX_K = gumbel_pick_triton.MAX_K  # one limit for both pick kernels (pick_operands checks it)


@triton.jit
def _warp_pick_kernel(
    values_ptr, tokens_ptr, temperature_ptr, top_k_ptr, top_p_ptr, do_sample_ptr, greedy_ptr, keys_ptr, hashes_ptr,
    out_ptr, num_cols, vocab_size, values_row_stride, tokens_row_stride, temperature_stride, top_k_stride,
    top_p_stride, do_sample_stride, greedy_stride, keys_stride,
    HAS_HASHES: tl.constexpr, LIBDEVICE_EXP: tl.constexpr, BLOCK_K: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_K)
    ok = cols < num_cols
    values_row = values_ptr + row * values_row_stride
    value = tl.load(values_row + cols, mask=ok, other=float("-inf"))

    # temperature: greedy rows divide by 1 (they may send 0; their pick is replaced below). div_rn:
    # Triton's `/` on fp32 is the approximate div.full, eager torch divides exactly
    do_sample = tl.load(do_sample_ptr + row * do_sample_stride) != 0
    temperature = tl.where(do_sample, tl.load(temperature_ptr + row * temperature_stride), 1.0)
    value = tl.div_rn(value, temperature)

    # top-k: keep everything >= the k-th value (0 = off = vocab_size), scaled as `value` was
    top_k = tl.load(top_k_ptr + row * top_k_stride)
    k = tl.where(top_k > 0, top_k, vocab_size)
    k = tl.minimum(tl.maximum(k, 1), num_cols)
    kth = tl.div_rn(tl.load(values_row + (k - 1)), temperature)
    value = tl.where(value < kth, float("-inf"), value)

    # top-p, HF form: softmax, mass from the tail, drop where <= 1 - top_p, never the best
    probs = _softmax(value, ok, LIBDEVICE_EXP)
    mass_from_tail = tl.cumsum(probs, axis=0, reverse=True)
    top_p = tl.load(top_p_ptr + row * top_p_stride)
    # rows with top_p >= 1 drop nothing: their limit -1 is below any mass (>= 0, or NaN: no drop)
    limit = tl.where(top_p < 1.0, 1.0 - top_p, -1.0)
    drop = (mass_from_tail <= limit) & (cols > 0)
    value = tl.where(drop, float("-inf"), value)

    # Gumbel-max over the survivors, as kernels/gumbel_pick_triton.py; greedy rows take their argmax
    token = _gumbel_max_token(value, cols, ok, row, tokens_ptr, tokens_row_stride, keys_ptr, keys_stride, hashes_ptr,
                              HAS_HASHES, BLOCK_K)
    greedy = tl.load(greedy_ptr + row * greedy_stride)
    tl.store(out_ptr + row, tl.where(do_sample, token, greedy))


def is_interpreting() -> bool:
    """True when triton.jit built the interpreter (TRITON_INTERPRET=1 at import), not a GPU kernel."""
    return not isinstance(_warp_pick_kernel, triton.runtime.JITFunction)


def warp_pick_triton(values: torch.Tensor, token_ids: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor,
                     top_p: torch.Tensor, do_sample: torch.Tensor, greedy: torch.Tensor, vocab_size: int,
                     keys: torch.Tensor, hashes: Optional[torch.Tensor] = None) -> torch.Tensor:
    """int64 [bs]: each row's chosen token (see the module docstring), one launch."""
    check_args(values, token_ids, temperature, top_k, top_p, do_sample, greedy, vocab_size, keys, hashes)
    out, values, token_ids, hashes, block_k, num_warps = pick_operands("warp_pick_triton", values, token_ids, hashes)
    num_rows, num_cols = values.shape
    if out.numel() == 0:
        return out
    do_sample = do_sample.view(torch.uint8)  # the same bytes (0/1) as a plain integer pointer for the kernel
    _warp_pick_kernel[(num_rows,)](
        values, token_ids, temperature, top_k, top_p, do_sample, greedy, keys,
        token_ids if hashes is None else hashes, out,
        num_cols, vocab_size, values.stride(0), token_ids.stride(0), temperature.stride(0), top_k.stride(0),
        top_p.stride(0), do_sample.stride(0), greedy.stride(0), keys.stride(0),
        HAS_HASHES=hashes is not None, LIBDEVICE_EXP=not is_interpreting(), BLOCK_K=block_k, num_warps=num_warps,
        enable_fp_fusion=False,  # pinned: the softmax must not contract into FMAs that torch does not use
    )
    return out
