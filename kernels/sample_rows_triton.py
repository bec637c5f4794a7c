"""Whole-row sampling in one Triton launch: greedy argmax, temperature, top-k and top-p masks and
the seeded Gumbel-max pick over every token of the row, with no sort.

It replaces, in talker_service.model.sampling.choose_tokens_keyed, the float copy, the argmax, the
sort (or topk) of the row and warp_pick: four launches per sampling, 16 samplings per frame. A sort
is only needed for two thresholds, and both are found by bisection over order-preserving integer
keys of the logits, which needs nothing but counts and sums over the row held in registers:

    key(x)   = the fp32 bits of x mapped so that integer order is float order (u32 lanes), shifted
               right past the bits a widened bf16 (16) or fp16 (13) value never sets
    greedy   = first index of the maximum (a NaN counts as the maximum, as in torch.argmax)
    t        = do_sample ? temperature : 1;   v = x / t (IEEE div_rn, what eager torch does)
    top-k    = k-th largest key: the largest key c with #(key >= c) >= k (one halving per key bit);
               everything below the k-th value is dropped, ties with it kept (HF)
    top-p    = HF's "mass summed from the tail <= 1 - top_p is dropped" on the descending order
               (value, then index): F(c) = mass of keys <= c; the largest c with F(c) <= 1 - top_p
               (one halving per key bit) drops every key <= c; of the tokens tied at the next key, the later
               ones (higher index) go while F(c) + (their count from the end) * p <= 1 - top_p;
               never the best token
    pick     = first maximum of v + gumbel(hash(key, token)) over the survivors (a NaN wins)

The definition it matches is kernels/sample_rows_reference.py (a stable descending sort of the row,
then warp_pick's rules). It agrees with it token for token except where the top-p tail masses,
summed here in another order, sit within a few ulps of 1 - top_p (as warp_pick's cumsum already can),
and on exact ties of the Gumbel score (the lower token id here, the earlier sorted candidate there).
Against choose_tokens_keyed's unstable torch.sort, rows with EQUAL logits at the top-p boundary may
also drop a different one of them (they share one probability): equally valid samples.

One program per row, the whole row in one block (V <= MAX_VOCAB). The two bisections run only in
rows that need them (top_k < V; top_p < 1), as scalar branches: no host sync, capturable.
On the GPU exp is libdevice's __nv_expf and the divisions are div_rn, as in kernels/warp_pick_triton.py.
The module reads TRITON_INTERPRET when imported (triton.jit picks the interpreter at decoration).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.gumbel_pick_triton import _first_argmax, _gumbel_from_bits, _mix32, _softmax, _token_part
from kernels.pdl import pdl_launch, wait_for_prior_grid

MAX_VOCAB = 8192
# fp32 bits a widened value of the dtype never uses: its mantissa is 7 (bf16) or 10 (fp16) bits of 23
KEY_SHIFT_BY_DTYPE = {torch.float32: 0, torch.bfloat16: 16, torch.float16: 13}


@triton.jit
def _ordered_keys(x):
    """uint32: the fp32 bit pattern of x, mapped so that unsigned key order is float order."""
    bits = x.to(tl.int32, bitcast=True)
    flipped = tl.where(bits < 0, bits ^ 0x7FFFFFFF, bits)   # negatives: larger magnitude, smaller key
    return (flipped ^ (-2147483648)).to(tl.uint32, bitcast=True)   # flip the sign bit: signed -> unsigned order


@triton.jit
def _kth_largest_key(keys, ok, k, KEY_BITS: tl.constexpr):
    """The k-th largest of keys[ok]: the largest c with #(keys >= c) >= k, built bit by bit.
    32-bit lanes throughout (an int64 version, or one counting three candidates per round in packed
    int64 fields, ran slower on the H200: the per-lane work, not the reductions, sets the pace)."""
    one = tl.full([], 1, tl.uint32)
    c = tl.zeros([], tl.uint32)
    for bit in tl.static_range(KEY_BITS - 1, -1, -1):
        cand = c | (one << bit)
        count = tl.sum((ok & (keys >= cand)).to(tl.int32), axis=0)
        c = tl.where(count >= k, cand, c)
    return c


@triton.jit
def _tail_cut_key(keys, kept, probs, limit, KEY_BITS: tl.constexpr):
    """The largest c with sum(probs[kept & (keys <= c)]) <= limit, built bit by bit (0 when none)."""
    one = tl.full([], 1, tl.uint32)
    c = tl.zeros([], tl.uint32)
    for bit in tl.static_range(KEY_BITS - 1, -1, -1):
        cand = c | (one << bit)
        mass = tl.sum(tl.where(kept & (keys <= cand), probs, 0.0), axis=0)
        c = tl.where(mass <= limit, cand, c)
    return c


@triton.jit
def _sample_rows_kernel(
    logits_ptr, temperature_ptr, top_k_ptr, top_p_ptr, do_sample_ptr, keys_ptr, out_ptr,
    vocab_size, logits_row_stride, temperature_stride, top_k_stride, top_p_stride, do_sample_stride, keys_stride,
    ta_ptr, tb_ptr, oa_ptr, ob_ptr, width_a, width_b, ta_stride, tb_stride,
    LIBDEVICE_EXP: tl.constexpr, BLOCK_V: tl.constexpr, KEY_SHIFT: tl.constexpr,
    PDL: tl.constexpr, GATHER: tl.constexpr = False, BLOCK_W: tl.constexpr = 1024,
):
    if PDL:   # first: nothing is read or written before the kernel ahead is done (kernels/pdl.py)
        wait_for_prior_grid()
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_V)
    ok = cols < vocab_size
    x = tl.load(logits_ptr + row * logits_row_stride + cols, mask=ok, other=float("-inf")).to(tl.float32)

    greedy = _first_argmax(x, cols, ok, BLOCK_V)   # torch.argmax: first maximum, a NaN is the maximum

    do_sample = tl.load(do_sample_ptr + row * do_sample_stride) != 0
    temperature = tl.where(do_sample, tl.load(temperature_ptr + row * temperature_stride), 1.0)
    value = tl.where(ok, tl.div_rn(x, temperature), float("-inf"))
    # the low KEY_SHIFT bits of a widened bf16/fp16 value's key are all 0 (x >= 0) or all 1 (x < 0):
    # dropped, the key keeps its order and the bisections need 16 (bf16) or 19 (fp16) rounds, not 32
    keys = _ordered_keys(x) >> KEY_SHIFT

    # top-k on the raw order (= the scaled order), the k-th value compared after scaling, as warp_pick
    top_k = tl.load(top_k_ptr + row * top_k_stride)
    k = tl.where(top_k > 0, top_k, vocab_size)
    k = tl.minimum(tl.maximum(k, 1), vocab_size)
    if k < vocab_size:
        kth_key = _kth_largest_key(keys, ok, k, 32 - KEY_SHIFT)
        kth_x = tl.max(tl.where(ok & (keys == kth_key), x, float("-inf")), axis=0)
        value = tl.where(value < tl.div_rn(kth_x, temperature), float("-inf"), value)
    kept = value > float("-inf")

    # top-p: softmax of the survivors, drop the tail whose mass from the end is <= 1 - top_p
    top_p = tl.load(top_p_ptr + row * top_p_stride)
    if top_p < 1.0:
        limit = 1.0 - top_p
        probs = _softmax(value, kept, LIBDEVICE_EXP)
        cut = _tail_cut_key(keys, kept, probs, limit, 32 - KEY_SHIFT)
        below = kept & (keys <= cut)   # cut 0 ("nothing fits") drops nothing: key 0 is a NaN, never kept
        mass_below = tl.sum(tl.where(below, probs, 0.0), axis=0)
        # the next kept key above the cut: its tied tokens go from the last index backwards
        above = kept & (~below)
        next_key = tl.min(tl.where(above, keys, tl.full([BLOCK_V], 4294967295, tl.uint32)), axis=0)
        tied = above & (keys == next_key)
        tie_count = tl.sum(tied.to(tl.int32), axis=0)
        from_end = tie_count - tl.cumsum(tied.to(tl.int32), axis=0) + 1   # 1 for the last tied index
        tie_drop = tied & (mass_below + from_end.to(tl.float32) * probs <= limit)
        # never the best token: the first index of the largest kept key
        best_key = tl.max(tl.where(kept, keys, 0), axis=0)
        first = tl.min(tl.where(kept & (keys == best_key), cols, BLOCK_V), axis=0)
        drop = (below | tie_drop) & (cols != first)
        value = tl.where(drop, float("-inf"), value)

    # the Gumbel-max pick over the survivors (kernels/gumbel_pick_triton.py's noise, token = column)
    key = tl.load(keys_ptr + row * keys_stride).to(tl.uint32)
    score = value + _gumbel_from_bits(_mix32(key ^ _token_part(cols.to(tl.int64))))
    pick = _first_argmax(score, cols, ok, BLOCK_V)
    token = tl.where(do_sample, pick, greedy).to(tl.int64)
    tl.store(out_ptr + row, token)
    if GATHER:   # the token's rows of two tables (bit patterns: integer views), the next step's inputs
        _copy_row(ta_ptr + token * ta_stride, oa_ptr + row * width_a, width_a, BLOCK_W)
        _copy_row(tb_ptr + token * tb_stride, ob_ptr + row * width_b, width_b, BLOCK_W)


@triton.jit
def _copy_row(src, dst, width, BLOCK_W: tl.constexpr):
    for start in range(0, width, BLOCK_W):
        offs = start + tl.arange(0, BLOCK_W)
        ok = offs < width
        tl.store(dst + offs, tl.load(src + offs, mask=ok), mask=ok)


def is_interpreting() -> bool:
    """True when triton.jit built the interpreter (TRITON_INTERPRET=1 at import), not a GPU kernel."""
    return not isinstance(_sample_rows_kernel, triton.runtime.JITFunction)


def choose_block(vocab_size: int) -> tuple[int, int]:
    """(BLOCK_V, num_warps): the whole row in one block, 8 warps from 2048 tokens on. H200, one row
    of 2048 bf16 / of 3072 fp32 (bench_decode_kernels): 4 warps 9.1 / 22.2 us, 8 warps 7.6 / 14.9 us,
    16 warps 7.8 / 14.7 us; at 256 rows 8 warps is best for 2048 (9.0 us) and 4 for 3072 (24.0 against
    29.2 us, one call a frame against fifteen)."""
    block_v = max(128, triton.next_power_of_2(vocab_size))
    return block_v, min(8, max(1, block_v // 256))


def sample_rows_triton(logits: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor,
                       do_sample: torch.Tensor, keys: torch.Tensor, num_warps: int | None = None) -> torch.Tensor:
    """int64 [bs]: each row's token (module docstring), one launch. logits [bs, V] fp32/bf16/fp16.
    num_warps: None picks choose_block's (benchmarks sweep it)."""
    logits, out = _checked(logits)
    if out.numel():
        _launch(logits, temperature, top_k, top_p, do_sample, keys, out, num_warps)
    return out


def _checked(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(logits with unit column stride, the fresh int64 [bs] token output); V in [1, MAX_VOCAB]."""
    num_rows, vocab_size = logits.shape
    if not 1 <= vocab_size <= MAX_VOCAB:
        raise ValueError(f"sample_rows_triton supports 1 <= V <= {MAX_VOCAB}, got V={vocab_size}")
    return (logits if logits.stride(1) == 1 else logits.contiguous(),
            torch.empty(num_rows, dtype=torch.int64, device=logits.device))


def _bits(t: torch.Tensor) -> torch.Tensor:
    """t viewed as same-width integers: the gather copies bit patterns (no float cast, which the
    interpreter would truncate or flush)."""
    return t.view({1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def _launch(logits, temperature, top_k, top_p, do_sample, keys, out, num_warps, tables=None, gathered=None):
    num_rows, vocab_size = logits.shape
    block_v, default_warps = choose_block(vocab_size)
    num_warps = num_warps or default_warps
    do_sample = do_sample.view(torch.uint8)  # the same bytes (0/1) as a plain integer pointer
    if tables is None:   # GATHER off: the table arguments are never read; out stands in
        ta = tb = oa = ob = out
        width_a = width_b = ta_stride = tb_stride = 0
    else:
        (ta, tb), (oa, ob) = (_bits(t) for t in tables), (_bits(t) for t in gathered)
        width_a, width_b, ta_stride, tb_stride = ta.shape[1], tb.shape[1], ta.stride(0), tb.stride(0)
    _sample_rows_kernel[(num_rows,)](
        logits, temperature, top_k, top_p, do_sample, keys, out,
        vocab_size, logits.stride(0), temperature.stride(0), top_k.stride(0), top_p.stride(0), do_sample.stride(0),
        keys.stride(0), ta, tb, oa, ob, width_a, width_b, ta_stride, tb_stride,
        LIBDEVICE_EXP=not is_interpreting(), BLOCK_V=block_v, KEY_SHIFT=KEY_SHIFT_BY_DTYPE[logits.dtype],
        GATHER=tables is not None, BLOCK_W=1024,
        num_warps=num_warps,
        enable_fp_fusion=False,  # pinned: the softmax must not contract into FMAs that torch does not use
        **pdl_launch(logits.device),
    )


def sample_rows_gather_triton(logits: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor,
                              top_p: torch.Tensor, do_sample: torch.Tensor, keys: torch.Tensor,
                              table_a: torch.Tensor, table_b: torch.Tensor,
                              num_warps: int | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """sample_rows_triton, and in the same launch each row's token's row of table_a [V, Wa] and
    table_b [V, Wb] (unit column stride) -> (tokens int64 [bs], table_a[tokens], table_b[tokens])."""
    logits, out = _checked(logits)
    gathered = tuple(torch.empty((out.shape[0], t.shape[1]), dtype=t.dtype, device=t.device)
                     for t in (table_a, table_b))
    if out.numel():
        tables = tuple(t if t.stride(1) == 1 else t.contiguous() for t in (table_a, table_b))
        _launch(logits, temperature, top_k, top_p, do_sample, keys, out, num_warps, tables, gathered)
    return (out, *gathered)
