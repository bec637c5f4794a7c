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
The failure memory repeats kernels/rmsnorm.py's pattern (sharing it would mean editing that module).
"""
from __future__ import annotations

import logging
import os
import threading
from typing import Callable, Optional

import torch

from kernels.slot_attention_reference import slot_decode_attention_reference

logger = logging.getLogger(__name__)

CPU_TRITON_ENV = "QWEN3_TTS_SLOTATTN_CPU_TRITON"
# kernels.slot_attention_triton's limits, repeated so routing never imports triton
_TRITON_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
_TRITON_HEAD_DIMS = (16, 32, 64, 128, 256)
_INDEX_DTYPES = (torch.int64, torch.int32)

_lock = threading.Lock()
_failure: Optional[str] = None  # "ExcType: message" of the first Triton failure, sticky
_launcher: Optional[Callable[..., torch.Tensor]] = None


def triton_failure() -> Optional[str]:
    """The recorded Triton failure ("ExcType: message"), or None while the kernel is in use."""
    return _failure


def reset_triton_failure() -> None:
    """Forget a recorded failure so the next call tries Triton again (tests, or after a fix)."""
    global _failure
    with _lock:
        _failure = None


def _record_failure(exc: BaseException) -> None:
    global _failure
    with _lock:
        if _failure is not None:
            return
        _failure = f"{type(exc).__name__}: {exc}"
    logger.warning("Triton slot decode attention failed (%s); using the eager reference for the rest of "
                   "this process", _failure, exc_info=exc)


def _get_launcher() -> Optional[Callable[..., torch.Tensor]]:
    global _launcher
    if _launcher is None:
        try:
            from kernels.slot_attention_triton import slot_decode_attention_triton
        except Exception as exc:  # no triton wheel, or a broken install: same fallback as a compile error
            _record_failure(exc)
            return None
        _launcher = slot_decode_attention_triton
    return _launcher


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
    if _failure is not None or q.dtype not in _TRITON_DTYPES or q.shape[2] not in _TRITON_HEAD_DIMS:
        return False
    if q.shape[0] == 0:
        return False
    return q.is_cuda or os.environ.get(CPU_TRITON_ENV) == "1"


@torch.library.custom_op("qwen3tts::slot_decode_attention", mutates_args=())
def slot_decode_attention_op(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, slots: torch.Tensor,
                             lengths: torch.Tensor, scale: float) -> torch.Tensor:
    """The op body: Triton or reference, always a fresh contiguous [B, H, D] (what the fake promises)."""
    if _wants_triton(q):
        launcher = _get_launcher()
        if launcher is not None:
            try:
                return launcher(q, k_cache, v_cache, slots, lengths, scale)
            except Exception as exc:  # compile/launch errors come in many types; inputs were checked
                _record_failure(exc)
    return slot_decode_attention_reference(q, k_cache, v_cache, slots, lengths, scale).contiguous()


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
