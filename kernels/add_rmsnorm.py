"""Residual add + RMSNorm dispatcher: one custom op, qwen3tts::add_rms_norm, backed by the fused
Triton kernel where it can run and by the eager reference elsewhere. Replaces the decoder layer's
`h = h + out; normed = norm(h)` (an add plus an RMSNorm launch) with ONE op returning
(normed, summed); torch.compile and dispatch-mode op counters see one op.

Routing, in order:
1. autograd needs gradients of a result -> eager reference, outside the op (the kernel has no backward);
inside the op:
2. CPU tensors -> eager reference, unless QWEN3_TTS_ADDNORM_CPU_TRITON=1 asks for the Triton path
   (tests set it with TRITON_INTERPRET=1 before triton is imported, so the kernel runs in the
   interpreter; without TRITON_INTERPRET the launch fails and that failure is recorded);
3. a dtype other than fp32/bf16/fp16, rows longer than 8192 or nothing to compute -> eager reference;
4. a Triton failure was recorded earlier -> eager reference;
5. otherwise the Triton launcher. If importing triton, compiling or launching raises, the failure is
   logged once with its traceback, remembered for the life of the process, and this call and every
   later one use the eager reference.
The failure memory repeats kernels/rmsnorm.py's (sharing it would mean editing that module).
"""
from __future__ import annotations

import logging
import os
import threading
from typing import Callable, Optional

import torch

from kernels.add_rmsnorm_reference import add_rms_norm_reference

logger = logging.getLogger(__name__)

CPU_TRITON_ENV = "QWEN3_TTS_ADDNORM_CPU_TRITON"
MAX_COLS = 8192  # kernels.rmsnorm_triton.MAX_COLS, repeated so routing never imports triton
_TRITON_DTYPES = (torch.float32, torch.bfloat16, torch.float16)

_lock = threading.Lock()
_failure: Optional[str] = None  # "ExcType: message" of the first Triton failure, sticky
_launcher: Optional[Callable[..., tuple[torch.Tensor, torch.Tensor]]] = None


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
    logger.warning("Triton add+RMSNorm failed (%s); using the eager reference for the rest of this process",
                   _failure, exc_info=exc)


def _get_launcher() -> Optional[Callable[..., tuple[torch.Tensor, torch.Tensor]]]:
    global _launcher
    if _launcher is None:
        try:
            from kernels.add_rmsnorm_triton import add_rms_norm_triton
        except Exception as exc:  # no triton wheel, or a broken install: same fallback as a compile error
            _record_failure(exc)
            return None
        _launcher = add_rms_norm_triton
    return _launcher


def _check_args(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor) -> None:
    if x.dim() == 0 or residual.shape != x.shape or weight.shape != (x.shape[-1],):
        raise ValueError(f"add_rms_norm expects x and residual [..., N] of one shape and weight [N], got "
                         f"{tuple(x.shape)}, {tuple(residual.shape)} and {tuple(weight.shape)}")
    for name, t in (("residual", residual), ("weight", weight)):
        if t.device != x.device:
            raise ValueError(f"add_rms_norm: {name} is on {t.device} but x is on {x.device}")


def _wants_triton(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor) -> bool:
    if _failure is not None or any(t.dtype not in _TRITON_DTYPES for t in (x, residual, weight)):
        return False
    if x.numel() == 0 or x.shape[-1] > MAX_COLS:
        return False
    return x.is_cuda or os.environ.get(CPU_TRITON_ENV) == "1"


@torch.library.custom_op("qwen3tts::add_rms_norm", mutates_args=())
def add_rms_norm_op(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                    eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The op body: Triton or reference, always two fresh contiguous tensors (what the fake promises)."""
    if _wants_triton(x, residual, weight):
        launcher = _get_launcher()
        if launcher is not None:
            try:
                return launcher(x, residual, weight, eps)
            except Exception as exc:  # compile/launch errors come in many types; inputs were checked
                _record_failure(exc)
    normed, summed = add_rms_norm_reference(x, residual, weight, eps)
    return normed.contiguous(), summed.contiguous()


@add_rms_norm_op.register_fake
def _add_rms_norm_fake(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                       eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    sum_dtype = torch.result_type(x, residual)
    normed = x.new_empty(x.shape, dtype=torch.promote_types(weight.dtype, sum_dtype))
    return normed, x.new_empty(x.shape, dtype=sum_dtype)


def add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                 eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """x, residual: [..., N] of one shape; weight: [N] -> (normed, summed), both [..., N]:
    summed = x + residual (in torch.result_type(x, residual): x's dtype when they match),
    normed = rms_norm_reference(summed, weight, eps) (in torch.result_type(weight, summed))."""
    _check_args(x, residual, weight)
    if torch.is_grad_enabled() and (x.requires_grad or residual.requires_grad or weight.requires_grad):
        return add_rms_norm_reference(x, residual, weight, eps)
    return add_rms_norm_op(x, residual, weight, float(eps))
