"""Inputs shared by the fused QK-norm + RoPE tests (tests/test_qk_norm_rope.py, the plain op;
tests/test_qk_norm_rope_write_kv.py, the cache-writing op's kernel and the model's stores on it;
tests/test_qk_norm_rope_write_kv_routing.py, that op and its dispatcher in process): q/k/v as the
model's fused projection makes them; for the cache-writing op, the write cases (caches of SENTINEL,
one target layer), the call on fresh cache copies, the expected writes and the bit-for-bit check."""
from __future__ import annotations

import torch

from kernels.qk_norm_rope_reference import qk_norm_rope_reference, qk_norm_rope_write_kv_reference
from talker_service.model.layers import rope_tables  # (tests/triton_support.py, imported first, puts the repo root on sys.path)

EPS = 1e-6
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def _make_case(shape, dtype, seed, *, exact_var=False, decode_positions=True, batch_step=1, d_contiguous=True,
               with_v=False, zero_pairs=False):
    """q/k as the model makes them: views into one fused projection [B, L, (H + 2 KV) D]; cos/sin as
    the talker gathers them (per-row positions) or as a prefill expands them (batch stride 0).
    with_v: (q, k, v, ...) with v [B, L, KV, D] the projection's third view.

    exact_var: q/k are multiples of 1/16 in [-4, 4], so every partial sum of squares is exact in fp32
    and the variance does not depend on the summation order; the kernel must then match bit for bit
    in every dtype. Otherwise q/k are Gaussian and the order may move the variance by an fp32 ulp.

    zero_pairs: elements j and j + D/2 of every head are +0.0 for a few j, so a rotated element is
    0 * cos - 0 * sin, whose sign eager sets by IEEE rules (-0.0 where cos < 0 < sin): the sign of
    the negation must be exact, not 0 - x (Triton 3.6 lowers float -x to that, giving +0.0)."""
    batch, seq_len, num_heads, num_kv, head_dim = shape
    gen = torch.Generator().manual_seed(seed)
    width = (num_heads + 2 * num_kv) * head_dim
    size = (batch * batch_step, seq_len, width)
    if exact_var:
        fused = torch.randint(-64, 65, size, generator=gen) / 16.0
    else:
        fused = torch.randn(size, generator=gen) * 2.0
    if zero_pairs:
        heads = fused.view(*size[:2], num_heads + 2 * num_kv, head_dim)
        for j in (0, 1, head_dim // 4):
            heads[..., j] = 0.0
            heads[..., j + head_dim // 2] = 0.0
    fused = fused.to(dtype)[::batch_step]
    if not d_contiguous:  # head_dim stride 2: the launcher must copy, not misread
        fused = torch.stack((fused, torch.zeros_like(fused)), dim=-1)[..., 0]
    q, k, v = fused.split((num_heads * head_dim, num_kv * head_dim, num_kv * head_dim), dim=-1)
    q = q.view(batch, seq_len, num_heads, head_dim) if d_contiguous else q.unflatten(-1, (num_heads, head_dim))
    k = k.view(batch, seq_len, num_kv, head_dim) if d_contiguous else k.unflatten(-1, (num_kv, head_dim))
    v = v.view(batch, seq_len, num_kv, head_dim) if d_contiguous else v.unflatten(-1, (num_kv, head_dim))
    q_weight = (torch.rand(head_dim, generator=gen) + 0.5).to(dtype)
    k_weight = (torch.rand(head_dim, generator=gen) * 2 + 0.25).to(dtype)
    cos_table, sin_table = rope_tables(head_dim, 1_000_000.0, 4096, dtype, "cpu")
    if decode_positions:
        positions = torch.randint(0, 4096, (batch, seq_len), generator=gen)
        cos, sin = cos_table[positions], sin_table[positions]
    else:
        start = int(torch.randint(0, 4096 - seq_len, (1,), generator=gen))
        cos = cos_table[start:start + seq_len].expand(batch, seq_len, -1)
        sin = sin_table[start:start + seq_len].expand(batch, seq_len, -1)
    if with_v:
        return q, k, v, q_weight, k_weight, cos, sin
    return q, k, q_weight, k_weight, cos, sin


def ulp_distance(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Number of representable values between a and b (same dtype), elementwise."""
    int_dtype = {2: torch.int16, 4: torch.int32}[a.element_size()]
    sign_mask = (1 << (8 * a.element_size() - 1)) - 1

    def ordered(t):
        bits = t.contiguous().view(int_dtype).to(torch.int64)
        return torch.where(bits < 0, -(bits & sign_mask), bits)

    return (ordered(a) - ordered(b)).abs()


# ---------------------------------------------------------------------------------------------
# The cache-writing op (qk_norm_rope_write_kv): its cases and checks

# name -> ((B, L, H, KV, D), (S, P) of the cache, destination rows, start positions). Talker decode:
# rows out of order, one at the cache's last position; code predictor: batch row b is cache row b and
# every row starts at the frame's offset, an expanded scalar (stride 0) as FrameKVCache passes it.
WRITE_SHAPES = {
    "talker": ((3, 1, 16, 8, 128), (5, 7), [4, 0, 2], [6, 0, 3]),
    "predictor_l2": ((2, 2, 16, 8, 128), (2, 16), [0, 1], 0),   # the frame's first step: positions 0, 1
    "predictor_l1": ((2, 1, 16, 8, 128), (2, 16), [0, 1], 9),
}
# More for the deferred-norm cases (norm_source): a small GQA config, one token and two per row.
NORM_SHAPES = {
    "small_l1": ((2, 1, 4, 2, 32), (3, 5), [2, 0], [4, 1]),
    "small_l2": ((2, 2, 4, 2, 32), (3, 5), [1, 0], [0, 3]),
}
SENTINEL = -1000.0   # what the caches hold before the write (exact in every dtype)
CACHE_LAYERS, TARGET_LAYER = 3, 1   # the target is a middle layer: a stray write would hit a neighbour


def _write_case(shape_name, dtype, seed, exact_var, rows=None, positions=None):
    """(args, k_stack, v_stack, dest_rows, dest_positions): args = (q, k, v, weights, cos, sin) as
    the model makes them; the stacks [CACHE_LAYERS, S, KV, P, D] hold SENTINEL, the op writes layer
    TARGET_LAYER. shape_name: a WRITE_SHAPES or NORM_SHAPES entry."""
    shape, (num_slots, num_positions), case_rows, case_positions = {**WRITE_SHAPES, **NORM_SHAPES}[shape_name]
    rows = case_rows if rows is None else rows
    positions = case_positions if positions is None else positions
    batch, _, _, num_kv, head_dim = shape
    args = _make_case(shape, dtype, seed, exact_var=exact_var, with_v=True)
    stack = torch.full((CACHE_LAYERS, num_slots, num_kv, num_positions, head_dim), SENTINEL, dtype=dtype)
    if isinstance(positions, int):
        dest_positions = torch.tensor(positions).expand(batch)
    else:
        dest_positions = torch.tensor(positions)
    return args, stack, stack.clone(), torch.tensor(rows), dest_positions


def _run_write(fn, case, norm=(), **kwargs):
    """fn (kernel or dispatcher) on fresh copies of the case's stacks -> (q_out, k_stack, v_stack).
    norm: (norm_source, norm_eps) passed after dest_positions, or () for neither."""
    args, k_stack, v_stack, rows, positions = case
    k_stack, v_stack = _copy_strided(k_stack), _copy_strided(v_stack)
    q, k, v, qw, kw, cos, sin = args
    q_out = fn(q, k, v, qw, kw, cos, sin, EPS, k_stack[TARGET_LAYER], v_stack[TARGET_LAYER], rows, positions, *norm,
               **kwargs)
    return q_out, k_stack, v_stack


def _copy_strided(t):
    """A copy with t's strides (clone() makes non-dense tensors, e.g. a head_dim-strided cache, contiguous)."""
    storage_size = 1 + sum((size - 1) * stride for size, stride in zip(t.shape, t.stride()))
    return torch.empty(storage_size, dtype=t.dtype, device=t.device).as_strided(t.shape, t.stride()).copy_(t)


def _expected_write(case):
    """Written out token by token, apart from the reference's index writes: q_out of the plain
    reference, and stacks that hold SENTINEL everywhere except K/V of token (b, l) at
    [TARGET_LAYER, rows[b], :, positions[b] + l] (rows or positions outside the cache: not written)."""
    args, k_stack, v_stack, rows, positions = case
    q, k, v, qw, kw, cos, sin = args
    q_out, k_out = qk_norm_rope_reference(q, k, qw, kw, cos, sin, EPS)
    k_stack, v_stack = k_stack.clone(), v_stack.clone()
    num_slots, num_positions = k_stack.shape[1], k_stack.shape[3]
    for b in range(q.shape[0]):
        for pos in range(q.shape[1]):
            slot, dest = int(rows[b]), int(positions[b]) + pos
            if 0 <= slot < num_slots and 0 <= dest < num_positions:
                k_stack[TARGET_LAYER, slot, :, dest] = k_out[b, :, pos]
                v_stack[TARGET_LAYER, slot, :, dest] = v[b, pos]
    return q_out, k_stack, v_stack


def _assert_write_equal(got, want, name):
    for what, g, w in zip(("q_out", "k cache", "v cache"), got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, f"{name}: {what} {g.shape} {g.dtype} vs {w.shape} {w.dtype}"
        assert torch.equal(g, w), f"{name}: {what}: {int((g != w).sum())} of {g.numel()} elements differ"


def _norm_reference(case, norm_source):
    """The reference with the deferred input norm: q, k, v scaled by norm_source's factor first."""
    return _run_write(qk_norm_rope_write_kv_reference, case, norm=(norm_source, EPS))
