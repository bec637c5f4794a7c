"""Slot decode attention dispatcher: one custom op, qwen3tts::slot_decode_attention, backed by the
Triton kernel (kernels/slot_attention_triton.py: K/V read straight from the slot cache, only up to
each row's length) where it can run and by the eager reference elsewhere. torch.compile and
dispatch-mode op counters see ONE op.

Routing, in order:
1. autograd needs gradients of the result -> eager reference, outside the op (the kernel has no backward);
inside the op:
2. CPU tensors -> eager reference, unless QWEN3_TTS_SLOTATTN_CPU_TRITON=1 asks for the Triton path
   (tests set it with TRITON_INTERPRET=1 before triton is imported, so the kernel runs in the
   interpreter; without TRITON_INTERPRET the launch fails and that failure is recorded);
3. dtype other than fp32/bf16/fp16, head_dim not in {16, 32, 64, 128, 256}, or no rows -> eager reference;
4. a Triton failure was recorded earlier -> eager reference;
5. otherwise the Triton launcher. If importing triton, compiling or launching raises, the failure is
   logged once with its traceback, remembered for the life of the process, and this call and every
   later one use the eager reference.
Argument checks (shapes, dtypes, devices; metadata only, no host sync) raise ValueError before the op.
Values are not checked (that would sync): lengths must lie in [1, P] and slots in [0, S).
The reference, when it runs on a GPU, gathers all P positions (no host sync, CUDA-graph safe).
The failure memory, lazy launcher import and device check live in kernels/triton_route.py.
"""
from __future__ import annotations

import torch

from kernels.slot_attention_reference import slot_decode_attention_reference
from kernels.triton_route import TritonRoute

CPU_TRITON_ENV = "QWEN3_TTS_SLOTATTN_CPU_TRITON"
# kernels.slot_attention_triton's limits, repeated so routing never imports triton
_TRITON_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
_TRITON_HEAD_DIMS = (16, 32, 64, 128, 256)
_INDEX_DTYPES = (torch.int64, torch.int32)

_route = TritonRoute("slot decode attention", "kernels.slot_attention_triton",
                     "slot_decode_attention_triton", CPU_TRITON_ENV, __name__)
triton_failure = _route.triton_failure
reset_triton_failure = _route.reset_failure


def _check_args(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, slots: torch.Tensor,
                lengths: torch.Tensor) -> None:
    if q.dim() != 3 or k_cache.dim() != 4 or v_cache.shape != k_cache.shape:
        raise ValueError(f"slot_decode_attention expects q [B, H, D] and k/v caches [S, KV, P, D] of one shape, "
                         f"got {tuple(q.shape)}, {tuple(k_cache.shape)}, {tuple(v_cache.shape)}")
    batch, num_heads, head_dim = q.shape
    num_kv = k_cache.shape[1]
    if k_cache.shape[3] != head_dim or num_kv == 0 or num_heads % num_kv:
        raise ValueError(f"slot_decode_attention: cache head_dim/kv heads {tuple(k_cache.shape)} do not fit "
                         f"q {tuple(q.shape)} (H must be a multiple of KV)")
    if slots.shape != (batch,) or lengths.shape != (batch,):
        raise ValueError(f"slot_decode_attention expects slots and lengths [{batch}], got "
                         f"{tuple(slots.shape)} and {tuple(lengths.shape)}")
    if k_cache.dtype != q.dtype or v_cache.dtype != q.dtype:
        raise ValueError(f"slot_decode_attention: q, k_cache, v_cache must share a dtype, got "
                         f"{q.dtype}, {k_cache.dtype}, {v_cache.dtype}")
    if slots.dtype not in _INDEX_DTYPES or lengths.dtype not in _INDEX_DTYPES:
        raise ValueError(f"slot_decode_attention expects int64/int32 slots and lengths, got "
                         f"{slots.dtype}, {lengths.dtype}")
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache), ("slots", slots), ("lengths", lengths)):
        if t.device != q.device:
            raise ValueError(f"slot_decode_attention: {name} is on {t.device} but q is on {q.device}")


def _wants_triton(q: torch.Tensor) -> bool:
    if q.dtype not in _TRITON_DTYPES or q.shape[2] not in _TRITON_HEAD_DIMS or q.shape[0] == 0:
        return False
    return _route.allows(q)


def _reference_op(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, slots: torch.Tensor,
                  lengths: torch.Tensor, scale: float) -> torch.Tensor:
    return slot_decode_attention_reference(q, k_cache, v_cache, slots, lengths, scale).contiguous()


@torch.library.custom_op("qwen3tts::slot_decode_attention", mutates_args=())
def slot_decode_attention_op(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, slots: torch.Tensor,
                             lengths: torch.Tensor, scale: float) -> torch.Tensor:
    """The op body: Triton or reference, always a fresh contiguous [B, H, D] (what the fake promises)."""
    return _route.run((q, k_cache, v_cache, slots, lengths, scale), _reference_op, wanted=_wants_triton(q))


@slot_decode_attention_op.register_fake
def _slot_decode_attention_fake(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, slots: torch.Tensor,
                                lengths: torch.Tensor, scale: float) -> torch.Tensor:
    return torch.empty(q.shape, dtype=q.dtype, device=q.device)


def slot_decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, slots: torch.Tensor,
                          lengths: torch.Tensor, scale: float) -> torch.Tensor:
    """q [B, H, D] (last dim contiguous for the kernel; other strides free), k_cache/v_cache [S, KV, P, D]
    (one layer of the slot cache), slots/lengths [B] int64 -> contiguous [B, H, D] in q's dtype.

    Row i: softmax(q[i] . K^T * scale) V over keys 0..lengths[i]-1 of slot slots[i] (lengths in
    [1, P]); query head h reads kv head h // (H // KV). Computed in fp32. No host syncs.
    """
    _check_args(q, k_cache, v_cache, slots, lengths)
    if torch.is_grad_enabled() and (q.requires_grad or k_cache.requires_grad or v_cache.requires_grad):
        return slot_decode_attention_reference(q, k_cache, v_cache, slots, lengths, scale)
    return slot_decode_attention_op(q, k_cache, v_cache, slots, lengths, float(scale))
