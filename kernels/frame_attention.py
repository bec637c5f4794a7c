"""Frame attention dispatcher: one custom op, qwen3tts::frame_attention, the code predictor's
one-query decode step (QK-norm + RoPE, the K/V write into the frame cache, attention over it) in one
launch of the Triton kernel (kernels/frame_attention_triton.py) where it can run, and the eager
reference (kernels/frame_attention_reference.py: qk_norm_rope_write_kv then slot_decode_attention)
elsewhere. It mutates k_cache and v_cache.

Routing, in order (the pattern of kernels/qk_norm_rope.py and kernels/slot_attention.py):
1. autograd needs gradients of the result -> eager reference, outside the op (the kernel has no backward);
inside the op:
2. CPU tensors -> eager reference, unless QWEN3_TTS_FRAMEATTN_CPU_TRITON=1 asks for the Triton path
   (tests set it with TRITON_INTERPRET=1 before triton is imported, so the kernel runs in the
   interpreter; without TRITON_INTERPRET the launch fails and that failure is recorded);
3. dtype other than fp32/bf16/fp16, head_dim not a power of two in [16, 256], a cache longer than
   the kernel's one tile (P > 32) or whose head_dim is not contiguous, or no rows -> eager reference;
4. a Triton failure was recorded earlier -> eager reference;
5. otherwise the Triton launcher. If importing triton, compiling or launching raises, the failure is
   logged once with its traceback, remembered for the life of the process, and this call and every
   later one use the eager reference.
Argument checks (shapes, dtypes, devices; metadata only, no host sync) raise ValueError before the
op: every tensor but position in q's dtype (the attention needs q and the caches in one dtype).
Position values are not checked (that would sync): they must lie in [0, P); the reference raises
on others (or wraps a negative one), the kernel writes nothing for them.
The failure memory, lazy launcher import and device check live in kernels/triton_route.py.
"""
from __future__ import annotations

import torch

from kernels.frame_attention_reference import frame_attention_reference
from kernels.triton_route import TritonRoute

CPU_TRITON_ENV = "QWEN3_TTS_FRAMEATTN_CPU_TRITON"
# kernels.frame_attention_triton's limits, repeated so routing never imports triton
MIN_HEAD_DIM, MAX_HEAD_DIM = 16, 256
MAX_POSITIONS = 32
_TRITON_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
_INDEX_DTYPES = (torch.int64, torch.int32)

_route = TritonRoute("frame attention", "kernels.frame_attention_triton", "frame_attention_triton",
                     CPU_TRITON_ENV, __name__)
triton_failure = _route.triton_failure
reset_triton_failure = _route.reset_failure


def check_args(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor,
                cos: torch.Tensor, sin: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                position: torch.Tensor) -> None:
    if q.dim() != 4 or k.dim() != 4 or q.shape[1] != 1:
        raise ValueError(f"frame_attention expects q [B, 1, H, D] and k [B, 1, KV, D] (one query per row), "
                         f"got {tuple(q.shape)} and {tuple(k.shape)}")
    batch, _, num_heads, head_dim = q.shape
    num_kv = k.shape[2]
    if (k.shape[0], k.shape[1], k.shape[3]) != (batch, 1, head_dim) or v.shape != k.shape:
        raise ValueError(f"frame_attention: k {tuple(k.shape)} and v {tuple(v.shape)} must be [{batch}, 1, KV, "
                         f"{head_dim}] like q {tuple(q.shape)}")
    if num_kv == 0 or num_heads % num_kv:
        raise ValueError(f"frame_attention: H={num_heads} must be a multiple of KV={num_kv}")
    for name, t, shape in (("q_weight", q_weight, (head_dim,)), ("k_weight", k_weight, (head_dim,)),
                           ("cos", cos, (batch, 1, head_dim)), ("sin", sin, (batch, 1, head_dim))):
        if tuple(t.shape) != shape:
            raise ValueError(f"frame_attention: {name} must have shape {list(shape)}, got {tuple(t.shape)}")
    if (k_cache.dim() != 4 or v_cache.shape != k_cache.shape or k_cache.shape[0] < batch
            or (k_cache.shape[1], k_cache.shape[3]) != (num_kv, head_dim)):
        raise ValueError(f"frame_attention expects k/v caches [S >= {batch}, {num_kv}, P, {head_dim}] of one "
                         f"shape, got {tuple(k_cache.shape)} and {tuple(v_cache.shape)}")
    if position.shape != (batch,) or position.dtype not in _INDEX_DTYPES:
        raise ValueError(f"frame_attention: position must be int64/int32 [{batch}], got {position.dtype} "
                         f"{tuple(position.shape)}")
    tensors = {"k": k, "v": v, "q_weight": q_weight, "k_weight": k_weight, "cos": cos, "sin": sin,
               "k_cache": k_cache, "v_cache": v_cache}
    for name, t in {**tensors, "position": position}.items():
        if t.device != q.device:
            raise ValueError(f"frame_attention: {name} is on {t.device} but q is on {q.device}")
    for name, t in tensors.items():
        if t.dtype != q.dtype:
            raise ValueError(f"frame_attention: every tensor but position must have q's dtype {q.dtype}, "
                             f"{name} is {t.dtype}")


def _wants_triton(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor) -> bool:
    head_dim, num_positions = q.shape[-1], k_cache.shape[2]
    if q.dtype not in _TRITON_DTYPES or head_dim & (head_dim - 1) or not MIN_HEAD_DIM <= head_dim <= MAX_HEAD_DIM:
        return False
    if not 1 <= num_positions <= MAX_POSITIONS or q.shape[0] == 0:
        return False
    if k_cache.stride(-1) != 1 or v_cache.stride(-1) != 1:  # written in place: the kernel cannot copy them
        return False
    return _route.allows(q)


def _reference_op(q, k, v, q_weight, k_weight, cos, sin, eps, k_cache, v_cache, position, scale) -> torch.Tensor:
    return frame_attention_reference(q, k, v, q_weight, k_weight, cos, sin, eps, k_cache, v_cache, position,
                                     scale).contiguous()


@torch.library.custom_op("qwen3tts::frame_attention", mutates_args=("k_cache", "v_cache"))
def frame_attention_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_weight: torch.Tensor,
                       k_weight: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, eps: float,
                       k_cache: torch.Tensor, v_cache: torch.Tensor, position: torch.Tensor,
                       scale: float) -> torch.Tensor:
    """The op body: Triton or reference; a fresh contiguous [B, H, D], K/V land in the caches."""
    args = (q, k, v, q_weight, k_weight, cos, sin, eps, k_cache, v_cache, position, scale)
    return _route.run(args, _reference_op, wanted=_wants_triton(q, k_cache, v_cache))


@frame_attention_op.register_fake
def _frame_attention_fake(q, k, v, q_weight, k_weight, cos, sin, eps, k_cache, v_cache, position, scale):
    batch, _, num_heads, head_dim = q.shape
    return q.new_empty((batch, num_heads, head_dim))


def frame_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_weight: torch.Tensor,
                    k_weight: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, eps: float,
                    k_cache: torch.Tensor, v_cache: torch.Tensor, position: torch.Tensor,
                    scale: float) -> torch.Tensor:
    """The code predictor's one-query step: q [B, 1, H, D], k and v [B, 1, KV, D] (any strides, e.g.
    views of one fused projection), weights [D], cos/sin [B, 1, D]; k_cache and v_cache
    [S >= B, KV, P, D] (one layer of the frame cache; mutated), position [B] int64/int32 on the
    device (any stride: FrameKVCache's is an expanded scalar), all but position in one dtype.

    Writes qk_norm_rope_write_kv's K and V at [b, :, position[b]] (batch row b is cache row b) and
    returns contiguous [B, H, D] in q's dtype: slot_decode_attention of the normalised+rotated q
    over positions 0..position[b] of row b (query head h reads kv head h // (H // KV)), ready for
    o_proj. No host syncs (capturable)."""
    check_args(q, k, v, q_weight, k_weight, cos, sin, k_cache, v_cache, position)
    if torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v, q_weight, k_weight, cos, sin)):
        return frame_attention_reference(q, k, v, q_weight, k_weight, cos, sin, eps, k_cache, v_cache, position,
                                         scale)
    return frame_attention_op(q, k, v, q_weight, k_weight, cos, sin, float(eps), k_cache, v_cache, position,
                              float(scale))
