"""RMSNorm dispatcher: one custom op, qwen3tts::rms_norm, backed by the fused Triton kernel where it
can run and by the eager reference elsewhere. torch.compile and dispatch-mode op counters see ONE op.

Routing, in order:
1. autograd needs gradients of the result -> eager reference, outside the op (the kernel has no backward);
inside the op:
2. CPU tensors -> eager reference, unless QWEN3_TTS_RMSNORM_CPU_TRITON=1 asks for the Triton path
   (tests set it with TRITON_INTERPRET=1 before triton is imported, so the kernel runs in the
   interpreter; without TRITON_INTERPRET the launch fails and that failure is recorded);
3. dtype other than fp32/bf16/fp16, or rows longer than 8192 -> eager reference;
4. a Triton failure was recorded earlier -> eager reference;
5. otherwise the Triton launcher. If importing triton, compiling or launching raises, the failure is
   logged once with its traceback, remembered for the life of the process, and this call and every
   later one use the eager reference.
The failure memory duplicates kernels/snakebeta.py's (sharing it would mean editing that module).
"""
from __future__ import annotations

import logging
import os
import threading
from typing import Callable, Optional

import torch

from kernels.rmsnorm_reference import rms_norm_reference

logger = logging.getLogger(__name__)

CPU_TRITON_ENV = "QWEN3_TTS_RMSNORM_CPU_TRITON"
MAX_COLS = 8192  # kernels.rmsnorm_triton.MAX_COLS, repeated so routing never imports triton
_TRITON_DTYPES = (torch.float32, torch.bfloat16, torch.float16)

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
    logger.warning("Triton RMSNorm failed (%s); using the eager reference for the rest of this process",
                   _failure, exc_info=exc)


def _get_launcher() -> Optional[Callable[..., torch.Tensor]]:
    global _launcher
    if _launcher is None:
        try:
            from kernels.rmsnorm_triton import rms_norm_triton
        except Exception as exc:  # no triton wheel, or a broken install: same fallback as a compile error
            _record_failure(exc)
            return None
        _launcher = rms_norm_triton
    return _launcher


def _check_args(x: torch.Tensor, weight: torch.Tensor) -> None:
    if x.dim() == 0 or weight.shape != (x.shape[-1],):
        raise ValueError(f"rms_norm expects x [..., N] and weight [N], got {tuple(x.shape)} and {tuple(weight.shape)}")
    if weight.device != x.device:
        raise ValueError(f"rms_norm: weight is on {weight.device} but x is on {x.device}")


def _wants_triton(x: torch.Tensor, weight: torch.Tensor) -> bool:
    if _failure is not None or x.dtype not in _TRITON_DTYPES or weight.dtype not in _TRITON_DTYPES:
        return False
    if x.numel() == 0 or x.shape[-1] > MAX_COLS:
        return False
    return x.is_cuda or os.environ.get(CPU_TRITON_ENV) == "1"


@torch.library.custom_op("qwen3tts::rms_norm", mutates_args=())
def rms_norm_op(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """The op body: Triton or reference, always a fresh contiguous tensor (what the fake promises)."""
    if _wants_triton(x, weight):
        launcher = _get_launcher()
        if launcher is not None:
            try:
                return launcher(x, weight, eps)
            except Exception as exc:  # compile/launch errors come in many types; inputs were checked
                _record_failure(exc)
    return rms_norm_reference(x, weight, eps).contiguous()


@rms_norm_op.register_fake
def _rms_norm_fake(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return torch.empty_like(x, dtype=torch.result_type(weight, x), memory_format=torch.contiguous_format)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """x: [..., N]; weight: [N] -> [..., N] in torch.result_type(weight, x), normalized over the last dim."""
    _check_args(x, weight)
    if torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad):
        return rms_norm_reference(x, weight, eps)
    return rms_norm_op(x, weight, float(eps))
