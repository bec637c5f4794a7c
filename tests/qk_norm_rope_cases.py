"""Inputs shared by the fused QK-norm + RoPE tests (tests/test_qk_norm_rope.py, the plain op, and
tests/test_qk_norm_rope_write_kv.py, the cache-writing op): q/k/v as the model's fused projection
makes them."""
from __future__ import annotations

import torch

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
