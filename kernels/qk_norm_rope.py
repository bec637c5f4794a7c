"""QK-norm + RoPE dispatcher: two custom ops backed by the fused Triton kernels
(kernels/qk_norm_rope_triton.py) where they can run and by the eager reference elsewhere.
torch.compile and dispatch-mode op counters see ONE op per attention layer instead of ~24 (or ~26
with the cache writes).

- qwen3tts::qk_norm_rope (qk_norm_rope): q, k -> q_out, k_out; the prefill and chunk paths, whose
  KV stores write k_out and v themselves.
- qwen3tts::qk_norm_rope_write_kv (qk_norm_rope_write_kv): q, k, v -> q_out, with K (normalised and
  rotated) and V (unchanged) written into one layer's KV cache at per-row destinations in the same
  launch; the decode steps (talker slot cache, code predictor frame cache), where the two cache
  writes would otherwise be two more launches per layer. It mutates k_cache and v_cache.
  Optionally (norm_source, norm_eps) it also applies the decoder layer's deferred input RMSNorm:
  the layer folds that norm's weight into the fused q/k/v projection and feeds the GEMM the raw
  residual stream h, and this op scales q, k and v by each token's s = rsqrt(mean(h^2) + eps)
  before the rest, so the layer needs no RMSNorm launch in front of its attention.

Routing, the same for both, in order:
1. autograd needs gradients of a result -> eager reference, outside the op (the kernel has no backward);
inside the op:
2. CPU tensors -> eager reference, unless QWEN3_TTS_QKROPE_CPU_TRITON=1 asks for the Triton path
   (tests set it with TRITON_INTERPRET=1 before triton is imported, so the kernel runs in the
   interpreter; without TRITON_INTERPRET the launch fails and that failure is recorded);
3. dtype other than fp32/bf16/fp16, q/k/weights/cos/sin (and v and the caches) not all of one dtype,
   head_dim not a power of two in [16, 256], caches whose head_dim is not contiguous, a norm_source
   wider than 8192, or nothing to compute -> eager reference;
4. a Triton failure was recorded earlier -> eager reference;
5. otherwise the Triton launcher. If importing triton, compiling or launching raises, the failure is
   logged once with its traceback, remembered for the life of the process, and this call and every
   later one use the eager reference. Each op has its own memory (triton_failure,
   write_kv_triton_failure), so a failure of the cache-writing kernel leaves the plain one in use.
Argument checks (shapes, devices, index dtypes, norm_source's dtype; metadata only, no host sync)
raise ValueError before the op. Destination values are not checked (that would sync): rows must lie
in [0, S) and positions + L in [0, P]; the reference raises on others (or wraps a negative one), the
kernel skips them.
The failure memory, lazy launcher import and device check live in kernels/triton_route.py.
"""
from __future__ import annotations

from typing import Optional

import torch

from kernels.qk_norm_rope_reference import qk_norm_rope_reference, qk_norm_rope_write_kv_reference
from kernels.triton_route import TritonRoute

CPU_TRITON_ENV = "QWEN3_TTS_QKROPE_CPU_TRITON"
# kernels.qk_norm_rope_triton's limits, repeated so routing never imports triton
MIN_HEAD_DIM, MAX_HEAD_DIM = 16, 256
# widest deferred-norm row (norm_source's last dim) the write kernel takes; the kernel imports it
MAX_NORM_COLS = 8192
_TRITON_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
_INDEX_DTYPES = (torch.int64, torch.int32)

_route = TritonRoute("QK-norm+RoPE", "kernels.qk_norm_rope_triton", "qk_norm_rope_triton",
                     CPU_TRITON_ENV, __name__)
# Its own failure memory: a failure of the cache-writing kernel leaves the plain one in use.
_write_kv_route = TritonRoute("QK-norm+RoPE+KV write", "kernels.qk_norm_rope_triton", "qk_norm_rope_write_kv_triton",
                              CPU_TRITON_ENV, __name__)
triton_failure = _route.triton_failure
reset_triton_failure = _route.reset_failure
write_kv_triton_failure = _write_kv_route.triton_failure
reset_write_kv_triton_failure = _write_kv_route.reset_failure


def _check_args(q: torch.Tensor, k: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor,
                cos: torch.Tensor, sin: torch.Tensor) -> None:
    if q.dim() != 4 or k.dim() != 4:
        raise ValueError(f"qk_norm_rope expects q [B, L, H, D] and k [B, L, KV, D], got {tuple(q.shape)} and {tuple(k.shape)}")
    batch, seq_len, _, head_dim = q.shape
    if (k.shape[0], k.shape[1], k.shape[3]) != (batch, seq_len, head_dim):
        raise ValueError(f"qk_norm_rope: k {tuple(k.shape)} does not match q {tuple(q.shape)} in B, L or D")
    for name, t, shape in (("q_weight", q_weight, (head_dim,)), ("k_weight", k_weight, (head_dim,)),
                           ("cos", cos, (batch, seq_len, head_dim)), ("sin", sin, (batch, seq_len, head_dim))):
        if tuple(t.shape) != shape:
            raise ValueError(f"qk_norm_rope: {name} must have shape {list(shape)}, got {tuple(t.shape)}")
    for name, t in (("k", k), ("q_weight", q_weight), ("k_weight", k_weight), ("cos", cos), ("sin", sin)):
        if t.device != q.device:
            raise ValueError(f"qk_norm_rope: {name} is on {t.device} but q is on {q.device}")


def _supported_by_kernel(q: torch.Tensor, k: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor,
                         cos: torch.Tensor, sin: torch.Tensor) -> bool:
    """Dtypes, head_dim and sizes the kernels handle (both ops' rule 3 for q/k/weights/cos/sin)."""
    if q.dtype not in _TRITON_DTYPES or any(t.dtype != q.dtype for t in (k, q_weight, k_weight, cos, sin)):
        return False
    head_dim = q.shape[-1]
    if head_dim & (head_dim - 1) or not MIN_HEAD_DIM <= head_dim <= MAX_HEAD_DIM:
        return False
    return q.numel() > 0 and k.numel() > 0


def _wants_triton(q: torch.Tensor, k: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor,
                  cos: torch.Tensor, sin: torch.Tensor) -> bool:
    return _supported_by_kernel(q, k, q_weight, k_weight, cos, sin) and _route.allows(q)


def _reference_op(q: torch.Tensor, k: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor,
                  cos: torch.Tensor, sin: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    q_out, k_out = qk_norm_rope_reference(q, k, q_weight, k_weight, cos, sin, eps)
    return q_out.contiguous(), k_out.contiguous()


def _result_dtype(q: torch.Tensor, weight: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.dtype:
    """The reference's type promotion: weight * x, then * cos, * sin."""
    return torch.promote_types(torch.promote_types(torch.promote_types(weight.dtype, q.dtype), cos.dtype), sin.dtype)


@torch.library.custom_op("qwen3tts::qk_norm_rope", mutates_args=())
def qk_norm_rope_op(q: torch.Tensor, k: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor,
                    cos: torch.Tensor, sin: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The op body: Triton or reference, always fresh contiguous tensors (what the fake promises)."""
    return _route.run((q, k, q_weight, k_weight, cos, sin, eps), _reference_op,
                      wanted=_wants_triton(q, k, q_weight, k_weight, cos, sin))


@qk_norm_rope_op.register_fake
def _qk_norm_rope_fake(q, k, q_weight, k_weight, cos, sin, eps):
    batch, seq_len, num_heads, head_dim = q.shape
    q_out = q.new_empty((batch, num_heads, seq_len, head_dim), dtype=_result_dtype(q, q_weight, cos, sin))
    k_out = k.new_empty((batch, k.shape[2], seq_len, head_dim), dtype=_result_dtype(k, k_weight, cos, sin))
    return q_out, k_out


def qk_norm_rope(q: torch.Tensor, k: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor,
                 cos: torch.Tensor, sin: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """q [B, L, H, D], k [B, L, KV, D] (any strides, e.g. views of one fused projection), weights [D],
    cos/sin [B, L, D] -> (q_out [B, H, L, D], k_out [B, KV, L, D]): per-head RMSNorm then NeoX RoPE,
    bit for bit what Attention.forward computes (see kernels/qk_norm_rope_reference.py)."""
    _check_args(q, k, q_weight, k_weight, cos, sin)
    if torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, q_weight, k_weight, cos, sin)):
        return qk_norm_rope_reference(q, k, q_weight, k_weight, cos, sin, eps)
    return qk_norm_rope_op(q, k, q_weight, k_weight, cos, sin, float(eps))


# ---------------------------------------------------------------------------------------------
# The cache-writing variant (decode steps)


def _check_write_kv_args(k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                         dest_rows: torch.Tensor, dest_positions: torch.Tensor) -> None:
    batch, _, num_kv_heads, head_dim = k.shape
    if v.shape != k.shape:
        raise ValueError(f"qk_norm_rope_write_kv: v {tuple(v.shape)} must have k's shape {tuple(k.shape)}")
    if k_cache.dim() != 4 or v_cache.shape != k_cache.shape or (k_cache.shape[1], k_cache.shape[3]) != (num_kv_heads, head_dim):
        raise ValueError(f"qk_norm_rope_write_kv expects k/v caches [S, {num_kv_heads}, P, {head_dim}] of one shape, "
                         f"got {tuple(k_cache.shape)} and {tuple(v_cache.shape)}")
    for name, t in (("dest_rows", dest_rows), ("dest_positions", dest_positions)):
        if t.shape != (batch,) or t.dtype not in _INDEX_DTYPES:
            raise ValueError(f"qk_norm_rope_write_kv: {name} must be int64/int32 [{batch}], got {t.dtype} {tuple(t.shape)}")
    for name, t in (("v", v), ("k_cache", k_cache), ("v_cache", v_cache), ("dest_rows", dest_rows),
                    ("dest_positions", dest_positions)):
        if t.device != k.device:
            raise ValueError(f"qk_norm_rope_write_kv: {name} is on {t.device} but k is on {k.device}")


def _check_norm_source(q: torch.Tensor, norm_source: Optional[torch.Tensor]) -> None:
    if norm_source is None:
        return
    batch, seq_len = q.shape[:2]
    if norm_source.dim() != 3 or norm_source.shape[:2] != (batch, seq_len) or norm_source.shape[2] == 0:
        raise ValueError(f"qk_norm_rope_write_kv: norm_source must be [{batch}, {seq_len}, H_model] (q's B and L, "
                         f"H_model >= 1), got {tuple(norm_source.shape)}")
    if norm_source.dtype != q.dtype:
        raise ValueError(f"qk_norm_rope_write_kv: norm_source's dtype must be q's ({q.dtype}), got {norm_source.dtype}")
    if norm_source.device != q.device:
        raise ValueError(f"qk_norm_rope_write_kv: norm_source is on {norm_source.device} but q is on {q.device}")


def _wants_triton_write_kv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_weight: torch.Tensor,
                           k_weight: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, k_cache: torch.Tensor,
                           v_cache: torch.Tensor, norm_source: Optional[torch.Tensor]) -> bool:
    if any(t.dtype != q.dtype for t in (v, k_cache, v_cache)):
        return False
    if norm_source is not None and norm_source.shape[-1] > MAX_NORM_COLS:
        return False
    if k_cache.stride(-1) != 1 or v_cache.stride(-1) != 1:  # written in place: the kernel cannot copy them
        return False
    return _supported_by_kernel(q, k, q_weight, k_weight, cos, sin) and _write_kv_route.allows(q)


def _write_kv_reference_op(q, k, v, q_weight, k_weight, cos, sin, eps, k_cache, v_cache, dest_rows,
                           dest_positions, norm_source=None, norm_eps=0.0) -> torch.Tensor:
    return qk_norm_rope_write_kv_reference(q, k, v, q_weight, k_weight, cos, sin, eps, k_cache, v_cache,
                                           dest_rows, dest_positions, norm_source, norm_eps).contiguous()


@torch.library.custom_op("qwen3tts::qk_norm_rope_write_kv", mutates_args=("k_cache", "v_cache"))
def qk_norm_rope_write_kv_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_weight: torch.Tensor,
                             k_weight: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, eps: float,
                             k_cache: torch.Tensor, v_cache: torch.Tensor, dest_rows: torch.Tensor,
                             dest_positions: torch.Tensor, norm_source: Optional[torch.Tensor] = None,
                             norm_eps: float = 0.0) -> torch.Tensor:
    """The op body: Triton or reference; q_out is a fresh contiguous tensor, K/V land in the caches.
    norm_source/norm_eps: the deferred input norm (qk_norm_rope_write_kv), None for none."""
    args = (q, k, v, q_weight, k_weight, cos, sin, eps, k_cache, v_cache, dest_rows, dest_positions,
            norm_source, norm_eps)
    return _write_kv_route.run(args, _write_kv_reference_op,
                               wanted=_wants_triton_write_kv(q, k, v, q_weight, k_weight, cos, sin, k_cache, v_cache,
                                                             norm_source))


@qk_norm_rope_write_kv_op.register_fake
def _qk_norm_rope_write_kv_fake(q, k, v, q_weight, k_weight, cos, sin, eps, k_cache, v_cache, dest_rows,
                                dest_positions, norm_source=None, norm_eps=0.0):
    batch, seq_len, num_heads, head_dim = q.shape
    return q.new_empty((batch, num_heads, seq_len, head_dim), dtype=_result_dtype(q, q_weight, cos, sin))


def qk_norm_rope_write_kv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_weight: torch.Tensor,
                          k_weight: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, eps: float,
                          k_cache: torch.Tensor, v_cache: torch.Tensor, dest_rows: torch.Tensor,
                          dest_positions: torch.Tensor, norm_source: Optional[torch.Tensor] = None,
                          norm_eps: float = 0.0) -> torch.Tensor:
    """qk_norm_rope for a decode step whose KV store is a cache: q [B, L, H, D], k and v [B, L, KV, D]
    (any strides, e.g. views of one fused projection), weights [D], cos/sin [B, L, D]; k_cache and
    v_cache [S, KV, P, D] (one layer of a cache; mutated), dest_rows and dest_positions [B] int64/int32
    on the device (any stride).

    Writes the normalised+rotated K and V unchanged at [dest_rows[b], :, dest_positions[b] + l] for
    every token (b, l) and returns q_out [B, H, L, D]: bit for bit qk_norm_rope's q_out, and the cache
    holds qk_norm_rope's k_out where the KV stores used to write it. No host syncs (capturable).

    norm_source [B, L, H_model] (q's dtype and device, any strides) is the deferred input RMSNorm:
    the residual stream h that a projection with the input norm's weight folded into its columns
    read instead of norm(h). q, k and v are then first multiplied by their token's
    s = rsqrt(mean(h^2) + norm_eps), in fp32 and rounded once to their dtype, and everything above
    happens to those values (V is written scaled). None (the default): no scaling, the op as before.
    The kernel's sum of squares runs in another order than eager's, so s can differ from the
    reference's by one fp32 ulp (rarely visible after rounding), as the per-head variances can."""
    _check_args(q, k, q_weight, k_weight, cos, sin)
    _check_write_kv_args(k, v, k_cache, v_cache, dest_rows, dest_positions)
    _check_norm_source(q, norm_source)
    tensors = (q, k, v, q_weight, k_weight, cos, sin) + (() if norm_source is None else (norm_source,))
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        return qk_norm_rope_write_kv_reference(q, k, v, q_weight, k_weight, cos, sin, eps, k_cache, v_cache,
                                               dest_rows, dest_positions, norm_source, norm_eps)
    return qk_norm_rope_write_kv_op(q, k, v, q_weight, k_weight, cos, sin, float(eps), k_cache, v_cache,
                                    dest_rows, dest_positions, norm_source, float(norm_eps))
