"""QK-norm + RoPE dispatcher: one custom op, qwen3tts::qk_norm_rope, backed by the fused Triton kernel
where it can run and by the eager reference elsewhere. torch.compile and dispatch-mode op counters
see ONE op per attention layer instead of ~24.

Routing, in order:
1. autograd needs gradients of a result -> eager reference, outside the op (the kernel has no backward);
inside the op:
2. CPU tensors -> eager reference, unless QWEN3_TTS_QKROPE_CPU_TRITON=1 asks for the Triton path
   (tests set it with TRITON_INTERPRET=1 before triton is imported, so the kernel runs in the
   interpreter; without TRITON_INTERPRET the launch fails and that failure is recorded);
3. dtype other than fp32/bf16/fp16, q/k/weights/cos/sin not all of one dtype, head_dim not a power
   of two in [16, 256], or nothing to compute -> eager reference;
4. a Triton failure was recorded earlier -> eager reference;
5. otherwise the Triton launcher. If importing triton, compiling or launching raises, the failure is
   logged once with its traceback, remembered for the life of the process, and this call and every
   later one use the eager reference.
The failure memory, lazy launcher import and device check live in kernels/triton_route.py.
"""
from __future__ import annotations

import torch

from kernels.qk_norm_rope_reference import qk_norm_rope_reference
from kernels.triton_route import TritonRoute

CPU_TRITON_ENV = "QWEN3_TTS_QKROPE_CPU_TRITON"
# kernels.qk_norm_rope_triton's limits, repeated so routing never imports triton
MIN_HEAD_DIM, MAX_HEAD_DIM = 16, 256
_TRITON_DTYPES = (torch.float32, torch.bfloat16, torch.float16)

_route = TritonRoute("QK-norm+RoPE", "kernels.qk_norm_rope_triton", "qk_norm_rope_triton",
                     CPU_TRITON_ENV, __name__)
triton_failure = _route.triton_failure
reset_triton_failure = _route.reset_failure


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


def _wants_triton(q: torch.Tensor, k: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor,
                  cos: torch.Tensor, sin: torch.Tensor) -> bool:
    if q.dtype not in _TRITON_DTYPES or any(t.dtype != q.dtype for t in (k, q_weight, k_weight, cos, sin)):
        return False
    head_dim = q.shape[-1]
    if head_dim & (head_dim - 1) or not MIN_HEAD_DIM <= head_dim <= MAX_HEAD_DIM:
        return False
    if q.numel() == 0 or k.numel() == 0:
        return False
    return _route.allows(q)


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
