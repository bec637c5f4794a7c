"""SnakeBeta dispatcher: the fused Triton kernel where it can run, the eager reference elsewhere.

Routing, in order:
1. autograd needs gradients of the result -> eager reference (the kernel has no backward);
2. CPU tensors -> eager reference, unless QWEN3_TTS_SNAKE_CPU_TRITON=1 asks for the Triton path
   (tests set it together with TRITON_INTERPRET=1 before triton is imported, so the kernel runs in
   the Triton interpreter; without TRITON_INTERPRET the launch fails and that failure is recorded);
3. dtype other than fp32/bf16/fp16 -> eager reference;
4. a Triton failure was recorded earlier -> eager reference;
5. otherwise the Triton launcher. If importing triton, compiling or launching raises, the failure is
   logged once with its traceback, remembered for the life of the process, and this call and every
   later one use the eager reference (compiling again per call would cost seconds each time).
"""
from __future__ import annotations

import logging
import os
import threading
from typing import Callable, Optional

import torch

from kernels.snakebeta_reference import snake_beta_reference, snake_params_from_log  # noqa: F401

logger = logging.getLogger(__name__)

CPU_TRITON_ENV = "QWEN3_TTS_SNAKE_CPU_TRITON"
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
    logger.warning(
        "Triton SnakeBeta failed (%s); using the eager reference for the rest of this process",
        _failure, exc_info=exc,
    )


def _get_launcher() -> Optional[Callable[..., torch.Tensor]]:
    global _launcher
    if _launcher is None:
        try:
            from kernels.snakebeta_triton import snake_beta_triton
        except Exception as exc:  # no triton wheel, or a broken install: same fallback as a compile error
            _record_failure(exc)
            return None
        _launcher = snake_beta_triton
    return _launcher


def _check_args(x: torch.Tensor, alpha_exp: torch.Tensor, inv_beta: torch.Tensor) -> None:
    if x.dim() != 3:
        raise ValueError(f"snake_beta expects x of shape [B, C, T], got {tuple(x.shape)}")
    num_channels = x.shape[1]
    for name, vec in (("alpha_exp", alpha_exp), ("inv_beta", inv_beta)):
        if tuple(vec.shape) != (num_channels,):
            raise ValueError(
                f"snake_beta: {name} must have shape [{num_channels}] (x has {num_channels} channels), "
                f"got {tuple(vec.shape)}"
            )
        if vec.device != x.device:
            raise ValueError(f"snake_beta: {name} is on {vec.device} but x is on {x.device}")


def _needs_grad(x: torch.Tensor, alpha_exp: torch.Tensor, inv_beta: torch.Tensor) -> bool:
    return torch.is_grad_enabled() and (
        x.requires_grad or alpha_exp.requires_grad or inv_beta.requires_grad
    )


def _wants_triton(x: torch.Tensor, alpha_exp: torch.Tensor, inv_beta: torch.Tensor) -> bool:
    if _needs_grad(x, alpha_exp, inv_beta) or _failure is not None:
        return False
    if x.dtype not in _TRITON_DTYPES:
        return False
    return x.is_cuda or os.environ.get(CPU_TRITON_ENV) == "1"


def snake_beta(x: torch.Tensor, alpha_exp: torch.Tensor, inv_beta: torch.Tensor) -> torch.Tensor:
    """x: [B, C, T]; alpha_exp, inv_beta: [C] fp32 (from snake_params_from_log) -> [B, C, T] in x's dtype."""
    if torch.compiler.is_compiling():
        # Under torch.compile the eager formula is traced instead of the Triton launch: Inductor
        # then fuses it with the neighbouring conv bias add and residual add into one generated
        # kernel (one pass over the activation instead of three), and no graph break splits the
        # step. Measured on the H200 with the full decoder: see benchmarks/results/*decoder*.
        return snake_beta_reference(x, alpha_exp, inv_beta)
    _check_args(x, alpha_exp, inv_beta)
    if _wants_triton(x, alpha_exp, inv_beta):
        launcher = _get_launcher()
        if launcher is not None:
            try:
                return launcher(x, alpha_exp, inv_beta)
            except Exception as exc:  # compile/launch errors come in many types; inputs were checked above
                _record_failure(exc)
    return snake_beta_reference(x, alpha_exp, inv_beta)
