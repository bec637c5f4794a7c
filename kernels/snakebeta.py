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
The failure memory, lazy launcher import and device check live in kernels/triton_route.py.
"""
from __future__ import annotations

import torch

from kernels.snakebeta_reference import snake_beta_reference, snake_params_from_log  # noqa: F401
from kernels.triton_route import TritonRoute

CPU_TRITON_ENV = "QWEN3_TTS_SNAKE_CPU_TRITON"
_TRITON_DTYPES = (torch.float32, torch.bfloat16, torch.float16)

_route = TritonRoute("SnakeBeta", "kernels.snakebeta_triton", "snake_beta_triton", CPU_TRITON_ENV, __name__)
triton_failure = _route.triton_failure
reset_triton_failure = _route.reset_failure


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
    if _needs_grad(x, alpha_exp, inv_beta) or x.dtype not in _TRITON_DTYPES:
        return False
    return _route.allows(x)


def snake_beta(x: torch.Tensor, alpha_exp: torch.Tensor, inv_beta: torch.Tensor) -> torch.Tensor:
    """x: [B, C, T]; alpha_exp, inv_beta: [C] fp32 (from snake_params_from_log) -> [B, C, T] in x's dtype."""
    if torch.compiler.is_compiling():
        # Under torch.compile the eager formula is traced instead of the Triton launch: Inductor
        # then fuses it with the neighbouring conv bias add and residual add into one generated
        # kernel (one pass over the activation instead of three), and no graph break splits the
        # step. Measured on the H200 with the full decoder: see benchmarks/results/*decoder*.
        return snake_beta_reference(x, alpha_exp, inv_beta)
    _check_args(x, alpha_exp, inv_beta)
    return _route.run((x, alpha_exp, inv_beta), snake_beta_reference,
                      wanted=_wants_triton(x, alpha_exp, inv_beta))
