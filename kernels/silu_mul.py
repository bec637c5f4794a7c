"""SwiGLU activation dispatcher: one custom op, qwen3tts::silu_mul, backed by the fused Triton kernel
where it can run and by the eager reference elsewhere. Replaces `gate, up = gate_up.chunk(2, -1);
F.silu(gate) * up` (two launches and an [..., I] intermediate) with ONE op; torch.compile and
dispatch-mode op counters see one op.

Routing, in order:
1. autograd needs gradients of the result -> eager reference, outside the op (the kernel has no backward);
inside the op:
2. CPU tensors -> eager reference, unless QWEN3_TTS_SILUMUL_CPU_TRITON=1 asks for the Triton path
   (tests set it with TRITON_INTERPRET=1 before triton is imported, so the kernel runs in the
   interpreter; without TRITON_INTERPRET the launch fails and that failure is recorded);
3. a dtype other than fp32/bf16/fp16, or nothing to compute -> eager reference;
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

from kernels.silu_mul_reference import silu_mul_reference

logger = logging.getLogger(__name__)

CPU_TRITON_ENV = "QWEN3_TTS_SILUMUL_CPU_TRITON"
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
    logger.warning("Triton silu_mul failed (%s); using the eager reference for the rest of this process",
                   _failure, exc_info=exc)


def _get_launcher() -> Optional[Callable[..., torch.Tensor]]:
    global _launcher
    if _launcher is None:
        try:
            from kernels.silu_mul_triton import silu_mul_triton
        except Exception as exc:  # no triton wheel, or a broken install: same fallback as a compile error
            _record_failure(exc)
            return None
        _launcher = silu_mul_triton
    return _launcher


def _check_args(gate_up: torch.Tensor) -> None:
    if gate_up.dim() == 0 or gate_up.shape[-1] % 2:
        raise ValueError(f"silu_mul expects gate_up [..., 2*I] (gate, then up), got {tuple(gate_up.shape)}")


def _wants_triton(gate_up: torch.Tensor) -> bool:
    if _failure is not None or gate_up.dtype not in _TRITON_DTYPES or gate_up.numel() == 0:
        return False
    return gate_up.is_cuda or os.environ.get(CPU_TRITON_ENV) == "1"


@torch.library.custom_op("qwen3tts::silu_mul", mutates_args=())
def silu_mul_op(gate_up: torch.Tensor) -> torch.Tensor:
    """The op body: Triton or reference, always a fresh contiguous tensor (what the fake promises)."""
    if _wants_triton(gate_up):
        launcher = _get_launcher()
        if launcher is not None:
            try:
                return launcher(gate_up)
            except Exception as exc:  # compile/launch errors come in many types; inputs were checked
                _record_failure(exc)
    return silu_mul_reference(gate_up).contiguous()


@silu_mul_op.register_fake
def _silu_mul_fake(gate_up: torch.Tensor) -> torch.Tensor:
    return gate_up.new_empty(gate_up.shape[:-1] + (gate_up.shape[-1] // 2,))


def silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """gate_up: [..., 2*I], gate in the first half and up in the second (the fused gate/up GEMM
    output) -> [..., I] = F.silu(gate) * up in gate_up's dtype, rounded as eager PyTorch rounds."""
    _check_args(gate_up)
    if torch.is_grad_enabled() and gate_up.requires_grad:
        return silu_mul_reference(gate_up)
    return silu_mul_op(gate_up)
