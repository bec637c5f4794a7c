"""Triton slot decode attention: one new query per row reads K/V straight out of one layer of the
static slot KV cache (k/v [S, KV, P, D]) by slot, only up to the row's own length.

Grid (B, KV, NUM_SPLITS). A program owns one row, one kv head and one split of that row's keys,
and computes all GROUP = H // KV query heads of that kv head at once (GQA: query head h reads kv
head h // GROUP), so each K/V tile is loaded once for the whole group. The GROUP query rows are
padded to BLOCK_H >= 16 rows so both products are tensor-core dots
([BLOCK_H, D] x [D, BLOCK_N] and [BLOCK_H, BLOCK_N] x [BLOCK_N, D]); padded rows are never stored.
The key loop runs over BLOCK_N-position tiles with a runtime bound read from lengths[row] (no
recompilation per length; positions past the length are never read), with an fp32 online softmax
(exp2, scale * log2(e) folded into the scores).

Flash-decoding split (NUM_SPLITS > 1): when B * KV programs cannot fill the GPU (small batches),
each row's key range is cut into NUM_SPLITS chunks -- chunk = ceil(ceil(length / NUM_SPLITS) /
BLOCK_N) * BLOCK_N, computed in the kernel from the row's length, so the work is balanced for any
length without a host sync. Each split writes its unnormalized fp32 partial (acc, running max,
running sum) to a workspace and a second small kernel (grid B * H) merges the splits. A split with
no keys (short rows) writes max = -inf, sum = 0 and drops out of the merge. NUM_SPLITS is chosen on
the host from static sizes only (B, KV, P, SM count; `choose_num_splits`), so a captured CUDA
graph stays valid for every length. NUM_SPLITS == 1 is the one-kernel path (normalizes in place).

Dot precision: fp32 inputs use input_precision="ieee" (not tf32). bf16/fp16 use native dots on the
GPU, with the probabilities rounded to the V dtype for P.V, as flash attention does. The Triton
interpreter mis-evaluates bf16 dots (it multiplies the raw uint16 bit patterns) and mangles bf16
subnormals in casts, so under the interpreter bf16 tiles are widened to fp32 by bit shifts and
multiplied in fp32 (DOT_FP32); only the operand dtype of the two dots differs from the GPU path.
bf16 outputs are rounded to nearest even by bits on both paths (the interpreter's cast truncates).

Capturable in a CUDA graph: no host syncs; allocations are the output (torch.empty) and, when
split, the fp32 workspace. Lengths are clamped to [0, P] in the kernel (never reads past the slot);
a row of length 0 gives zeros. Slots are not range-checked (that would need a sync).
The module reads TRITON_INTERPRET when imported (triton.jit picks the interpreter at decoration).
"""
from __future__ import annotations

from typing import Optional

import torch
import triton
import triton.language as tl

from kernels.bf16_bits import from_f32 as _from_f32, to_f32 as _to_f32
from kernels.pdl import pdl_launch, wait_for_prior_grid

SUPPORTED_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
SUPPORTED_HEAD_DIMS = (16, 32, 64, 128, 256)
MAX_SPLITS = 16
MIN_SPLIT_POSITIONS = 256  # a split covers at least this many positions of a full-length row
SHORT_CACHE_POSITIONS = 16  # caches this short (the code predictor's frame) run one tile on 1-2 warps
SHORT_CACHE_STAGES = 2      # ... with a 2-deep K/V pipeline
SHORT_CACHE_ONE_WARP_PROGRAMS = 512  # ... on 1 warp from this many (row, kv head) programs
_LOG2E = 1.4426950408889634
_DEFAULT_NUM_SMS = 132  # H100 SXM; used only when no CUDA device is at hand


@triton.jit
def attend_keys(q, k_base, v_base, stride_kp, stride_vp, start, end, qk_scale,
                BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr, DOT_FP32: tl.constexpr,
                SINGLE_TILE: tl.constexpr = False):
    """The key loop of one (row, kv head) program: q [BLOCK_H, HEAD_DIM] (fp32 when DOT_FP32) against
    keys [start, end) of one cache row (k_base/v_base point at position 0 of the row's kv head).
    Returns the unnormalized (acc [BLOCK_H, HEAD_DIM], running max m [BLOCK_H], running sum l
    [BLOCK_H]) of the fp32 online softmax; also the body of kernels/norm_rope_attend_triton.py.

    SINGLE_TILE (the caller guarantees end - start <= BLOCK_N: the code predictor's 16-position
    cache): one tile and no rescaling of a running sum, the same values (the loop's first pass
    multiplies its zero start by alpha = 0) without the [BLOCK_H, HEAD_DIM] multiply-adds."""
    if SINGLE_TILE:
        return _attend_one_tile(q, k_base, v_base, stride_kp, stride_vp, start, end, qk_scale,
                                BLOCK_N, HEAD_DIM, DOT_FP32)
    m_i = tl.full([BLOCK_H], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_H], tl.float32)
    acc = tl.zeros([BLOCK_H, HEAD_DIM], tl.float32)
    # A `for` with runtime bounds, not a `while`: only `for` loops get pipelined K/V loads on the GPU.
    # (Triton < 3.7's interpreter cannot take tensor bounds under numpy >= 2.4; the tests backport
    # triton 3.7's fix, see tests/triton_support.py.)
    for start_n in range(start, end, BLOCK_N):
        s, v = _tile_scores(q, k_base, v_base, stride_kp, stride_vp, start_n, end, qk_scale, BLOCK_N, HEAD_DIM,
                            DOT_FP32)
        m_new = tl.maximum(m_i, tl.max(s, 1))  # finite: every tile holds >= 1 key
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + _tile_pv(p, v, DOT_FP32)
        m_i = m_new
    return acc, m_i, l_i


@triton.jit
def _attend_one_tile(q, k_base, v_base, stride_kp, stride_vp, start, end, qk_scale,
                     BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr, DOT_FP32: tl.constexpr):
    """attend_keys for at most BLOCK_N keys: (acc, m, l) as its loop would return them (no keys:
    acc 0, m -inf, l 0)."""
    s, v = _tile_scores(q, k_base, v_base, stride_kp, stride_vp, start, end, qk_scale, BLOCK_N, HEAD_DIM, DOT_FP32)
    m = tl.max(s, 1)
    p = tl.exp2(s - tl.where(m == float("-inf"), 0.0, m)[:, None])   # no keys: every p is 0
    return _tile_pv(p, v, DOT_FP32), m, tl.sum(p, 1)


@triton.jit
def _tile_scores(q, k_base, v_base, stride_kp, stride_vp, start_n, end, qk_scale,
                 BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr, DOT_FP32: tl.constexpr):
    """One tile of keys [start_n, start_n + BLOCK_N) below end: the scaled scores (log2 domain, -inf
    past end) [BLOCK_H, BLOCK_N] and the tile's values [BLOCK_N, HEAD_DIM]."""
    offs_d = tl.arange(0, HEAD_DIM)
    offs_n = start_n + tl.arange(0, BLOCK_N)
    key_ok = offs_n < end
    k = tl.load(k_base + offs_n[:, None] * stride_kp + offs_d[None, :], mask=key_ok[:, None], other=0.0)
    v = tl.load(v_base + offs_n[:, None] * stride_vp + offs_d[None, :], mask=key_ok[:, None], other=0.0)
    if DOT_FP32:
        s = tl.dot(q, tl.trans(_to_f32(k)), input_precision="ieee")
    else:
        s = tl.dot(q, tl.trans(k))
    return tl.where(key_ok[None, :], s * qk_scale, float("-inf")), v


@triton.jit
def _tile_pv(p, v, DOT_FP32: tl.constexpr):
    """P . V of one tile (bf16/fp16: the probabilities rounded to the value dtype, as flash attention)."""
    if DOT_FP32:
        return tl.dot(p, _to_f32(v), input_precision="ieee")
    else:
        return tl.dot(p.to(v.dtype), v)


@triton.jit
def normalize_rows(acc, l_i):
    """acc [BLOCK_H, HEAD_DIM] / l_i [BLOCK_H] as acc * (1 / l): BLOCK_H reciprocals instead of a
    correctly rounded division per element (div.rn.f32 is a ~10-instruction sequence, and the padded
    tile has BLOCK_H x HEAD_DIM elements of which GROUP rows are real: it was the largest part of the
    predictor's one-launch attention); within an fp32 ulp of the quotient. l = 0 (length 0) gives 0."""
    inv_l = 1.0 / tl.where(l_i == 0.0, 1.0, l_i)
    return acc * inv_l[:, None]


@triton.jit
def _slot_decode_attn_kernel(
    q_ptr, k_ptr, v_ptr, slots_ptr, lengths_ptr, out_ptr, part_acc_ptr, part_m_ptr, part_l_ptr,
    qk_scale, num_positions,
    stride_qb, stride_qh, stride_ks, stride_kh, stride_kp, stride_vs, stride_vh, stride_vp, stride_slot, stride_len,
    GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr,
    NUM_SPLITS: tl.constexpr, DOT_FP32: tl.constexpr, PDL: tl.constexpr, SINGLE_TILE: tl.constexpr = False,
):
    if PDL:   # first: nothing is read or written before the kernel ahead is done (kernels/pdl.py)
        wait_for_prior_grid()
    row = tl.program_id(0)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    num_heads = tl.num_programs(1) * GROUP

    # index strides: 0 when every row shares one value (the code predictor's frame: one length per step)
    slot = tl.load(slots_ptr + row * stride_slot).to(tl.int64)
    length = tl.load(lengths_ptr + row * stride_len).to(tl.int32)
    length = tl.maximum(tl.minimum(length, num_positions), 0)
    # this split's keys [start, end); NUM_SPLITS == 1 gives [0, length)
    chunk = tl.cdiv(tl.cdiv(length, NUM_SPLITS), BLOCK_N) * BLOCK_N
    start = split * chunk
    end = tl.minimum(start + chunk, length)

    offs_h = tl.arange(0, BLOCK_H)
    offs_d = tl.arange(0, HEAD_DIM)
    head_ok = offs_h < GROUP
    heads = kv_head * GROUP + offs_h
    q = tl.load(q_ptr + row.to(tl.int64) * stride_qb + heads[:, None] * stride_qh + offs_d[None, :],
                mask=head_ok[:, None], other=0.0)
    if DOT_FP32:
        q = _to_f32(q)
    k_base = k_ptr + slot * stride_ks + kv_head * stride_kh
    v_base = v_ptr + slot * stride_vs + kv_head * stride_vh

    acc, m_i, l_i = attend_keys(q, k_base, v_base, stride_kp, stride_vp, start, end, qk_scale,
                                BLOCK_H, BLOCK_N, HEAD_DIM, DOT_FP32, SINGLE_TILE)

    if NUM_SPLITS == 1:
        out = normalize_rows(acc, l_i)  # length 0 -> zeros, not NaN
        out_offs = (row.to(tl.int64) * num_heads + heads)[:, None] * HEAD_DIM + offs_d[None, :]
        tl.store(out_ptr + out_offs, _from_f32(out, out_ptr.dtype.element_ty), mask=head_ok[:, None])
    else:
        part = (row.to(tl.int64) * num_heads + heads) * NUM_SPLITS + split  # [BLOCK_H]
        tl.store(part_acc_ptr + part[:, None] * HEAD_DIM + offs_d[None, :], acc, mask=head_ok[:, None])
        tl.store(part_m_ptr + part, m_i, mask=head_ok)
        tl.store(part_l_ptr + part, l_i, mask=head_ok)


@triton.jit
def _merge_splits_kernel(part_acc_ptr, part_m_ptr, part_l_ptr, out_ptr,
                         HEAD_DIM: tl.constexpr, NUM_SPLITS: tl.constexpr, SPLITS_PAD: tl.constexpr,
                         PDL: tl.constexpr):
    """One program per (row, head): out = sum_s w_s acc_s / sum_s w_s l_s, w_s = 2^(m_s - max m)."""
    if PDL:   # first: nothing is read or written before the kernel ahead is done (kernels/pdl.py)
        wait_for_prior_grid()
    pid = tl.program_id(0).to(tl.int64)  # row * H + head
    offs_s = tl.arange(0, SPLITS_PAD)
    offs_d = tl.arange(0, HEAD_DIM)
    split_ok = offs_s < NUM_SPLITS
    m = tl.load(part_m_ptr + pid * NUM_SPLITS + offs_s, mask=split_ok, other=float("-inf"))
    l_s = tl.load(part_l_ptr + pid * NUM_SPLITS + offs_s, mask=split_ok, other=0.0)
    acc = tl.load(part_acc_ptr + (pid * NUM_SPLITS + offs_s)[:, None] * HEAD_DIM + offs_d[None, :],
                  mask=split_ok[:, None], other=0.0)
    m_max = tl.max(m, 0)
    m_max = tl.where(m_max == float("-inf"), 0.0, m_max)  # length 0: every split empty
    w = tl.exp2(m - m_max)  # 0 for empty and padded splits
    num = tl.sum(acc * w[:, None], 0)
    den = tl.sum(l_s * w, 0)
    out = num / tl.where(den == 0.0, 1.0, den)
    tl.store(out_ptr + pid * HEAD_DIM + offs_d, _from_f32(out, out_ptr.dtype.element_ty))


def is_interpreting() -> bool:
    """True when triton.jit built the interpreter (TRITON_INTERPRET=1 at import), not a GPU kernel."""
    return not isinstance(_slot_decode_attn_kernel, triton.runtime.JITFunction)


def choose_num_splits(batch: int, num_kv_heads: int, num_positions: int, num_sms: int) -> int:
    """Key-range splits per (row, kv head), from static sizes only (CUDA-graph safe).

    No split once B * KV programs give every SM two; below that, enough splits to get there, but
    at most MAX_SPLITS and at least MIN_SPLIT_POSITIONS positions per split of a full-length row.
    """
    programs = batch * num_kv_heads
    target = 2 * num_sms
    if programs >= target:
        return 1
    splits = min(triton.cdiv(target, programs), MAX_SPLITS, num_positions // MIN_SPLIT_POSITIONS)
    return max(1, splits)


def choose_block(head_dim: int, dtype: torch.dtype) -> tuple[int, int]:
    """(BLOCK_N, num_warps) for the main kernel."""
    if dtype == torch.float32 or head_dim > 128:
        return 32, 4
    return 64, 4


def choose_short_cache(batch: int, num_kv_heads: int) -> tuple[int, int]:
    """(num_warps, num_stages) for a cache of at most SHORT_CACHE_POSITIONS (one tile): 2 stages, and
    1 warp once the grid has SHORT_CACHE_ONE_WARP_PROGRAMS (row, kv head) programs, else 2."""
    warps = 1 if batch * num_kv_heads >= SHORT_CACHE_ONE_WARP_PROGRAMS else 2
    return warps, SHORT_CACHE_STAGES


def _num_sms(device: torch.device) -> int:
    if device.type != "cuda":
        return _DEFAULT_NUM_SMS
    return torch.cuda.get_device_properties(device).multi_processor_count


def default_config(batch: int, num_kv: int, num_positions: int, head_dim: int, dtype: torch.dtype,
                   device: torch.device) -> tuple[int, int, Optional[int], int]:
    """(BLOCK_N, num_warps, num_stages or None for Triton's default, NUM_SPLITS) of a launch, from
    static sizes only (CUDA-graph safe); a CPU (interpreter) launch does not split."""
    block_n, num_warps = choose_block(head_dim, dtype)
    # a short cache (the code predictor's 16 positions) gets one tile of its own size, not 64 masked
    # rows, and 2 warps: one tile has too little work for 4 (H200, batch 256: 8.8 vs 11.0 us a call,
    # batch 64: 3.6 vs 4.1, batch 1: 2.6 vs 2.5; benchmarks/bench_decode_kernels.py). A 2-deep
    # pipeline instead of Triton's default 3 holds less shared memory, so more programs share an SM,
    # and from 512 programs 1 warp each (H100, 16 positions: batch 256 8.7 -> 6.9 us a call, batch 64
    # 3.6 either way, batch 1 2.8 -> 2.6 us on 2 warps; 2026-11-26-slot-attention-stages-h100.json)
    num_stages = None
    if num_positions <= SHORT_CACHE_POSITIONS:
        num_warps, num_stages = choose_short_cache(batch, num_kv)
    block_n = min(block_n, max(16, triton.next_power_of_2(num_positions)))
    num_splits = 1 if device.type != "cuda" else choose_num_splits(batch, num_kv, num_positions, _num_sms(device))
    return block_n, num_warps, num_stages, num_splits


def slot_decode_attention_triton(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                                 slots: torch.Tensor, lengths: torch.Tensor, scale: float, *,
                                 block_n: Optional[int] = None, num_splits: Optional[int] = None,
                                 num_warps: Optional[int] = None, num_stages: Optional[int] = None) -> torch.Tensor:
    """q [B, H, D], k_cache/v_cache [S, KV, P, D] (same dtype), slots/lengths [B] int (any stride,
    0 included: an expanded scalar) -> contiguous [B, H, D] in q's dtype. `block_n` (power of two
    >= 16), `num_splits` (>= 1), `num_warps` and `num_stages` (the K/V load pipeline depth) override
    the heuristics (tests, tuning); by default a CPU (interpreter) launch does not split."""
    if q.dim() != 3 or k_cache.dim() != 4 or v_cache.shape != k_cache.shape:
        raise ValueError(f"slot_decode_attention_triton: need q [B, H, D] and k/v caches [S, KV, P, D], got "
                         f"{tuple(q.shape)}, {tuple(k_cache.shape)}, {tuple(v_cache.shape)}")
    batch, num_heads, head_dim = q.shape
    _, num_kv, num_positions, _ = k_cache.shape
    if q.dtype not in SUPPORTED_DTYPES or k_cache.dtype != q.dtype or v_cache.dtype != q.dtype:
        raise ValueError(f"slot_decode_attention_triton supports {SUPPORTED_DTYPES} (one dtype), got "
                         f"{q.dtype}, {k_cache.dtype}, {v_cache.dtype}")
    if head_dim not in SUPPORTED_HEAD_DIMS or k_cache.shape[3] != head_dim or num_heads % num_kv:
        raise ValueError(f"slot_decode_attention_triton: head_dim must be one of {SUPPORTED_HEAD_DIMS} and "
                         f"H a multiple of KV, got q {tuple(q.shape)}, cache {tuple(k_cache.shape)}")
    out = torch.empty((batch, num_heads, head_dim), dtype=q.dtype, device=q.device)
    if batch == 0:
        return out
    if q.stride(-1) != 1:
        q = q.contiguous()
    if k_cache.stride(-1) != 1:
        k_cache = k_cache.contiguous()  # a copy of the whole layer; the real cache is contiguous
    if v_cache.stride(-1) != 1:
        v_cache = v_cache.contiguous()
    default_block_n, default_warps, default_stages, default_splits = default_config(
        batch, num_kv, num_positions, head_dim, q.dtype, q.device)
    num_warps = default_warps if num_warps is None else num_warps
    num_stages = default_stages if num_stages is None else num_stages
    block_n = default_block_n if block_n is None else block_n
    if block_n < 16 or block_n & (block_n - 1):
        raise ValueError(f"block_n must be a power of two >= 16, got {block_n}")
    if num_splits is None:
        num_splits = default_splits
    if num_splits < 1:
        raise ValueError(f"num_splits must be >= 1, got {num_splits}")
    if num_stages is not None and num_stages < 1:
        raise ValueError(f"num_stages must be >= 1, got {num_stages}")
    stage_option = {} if num_stages is None else {"num_stages": num_stages}
    group = num_heads // num_kv
    dot_fp32 = q.dtype == torch.float32 or (q.dtype == torch.bfloat16 and is_interpreting())
    if num_splits > 1:
        part_acc = torch.empty((batch, num_heads, num_splits, head_dim), dtype=torch.float32, device=q.device)
        part_ml = torch.empty((2, batch, num_heads, num_splits), dtype=torch.float32, device=q.device)
        part_m, part_l = part_ml[0], part_ml[1]
    else:
        part_acc = part_m = part_l = out  # unused (constexpr branch)
    _slot_decode_attn_kernel[(batch, num_kv, num_splits)](
        q, k_cache, v_cache, slots, lengths, out, part_acc, part_m, part_l,
        float(scale) * _LOG2E, num_positions,
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2), slots.stride(0), lengths.stride(0),
        GROUP=group, HEAD_DIM=head_dim, BLOCK_H=max(16, triton.next_power_of_2(group)), BLOCK_N=block_n,
        NUM_SPLITS=num_splits, DOT_FP32=dot_fp32, SINGLE_TILE=num_splits == 1 and num_positions <= block_n,
        num_warps=num_warps, **stage_option, **pdl_launch(q.device),
    )
    if num_splits > 1:
        _merge_splits_kernel[(batch * num_heads,)](
            part_acc, part_m, part_l, out,
            HEAD_DIM=head_dim, NUM_SPLITS=num_splits, SPLITS_PAD=triton.next_power_of_2(num_splits),
            num_warps=1 if head_dim <= 64 else 2, **pdl_launch(q.device),
        )
    return out

