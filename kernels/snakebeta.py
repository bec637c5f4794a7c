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

from kernels.snakebeta_reference import (snake_beta_fused_reference, snake_beta_reference,  # noqa: F401
                                         snake_params_from_log)
from kernels.triton_route import TritonRoute

CPU_TRITON_ENV = "QWEN3_TTS_SNAKE_CPU_TRITON"
_TRITON_DTYPES = (torch.float32, torch.bfloat16, torch.float16)

_route = TritonRoute("SnakeBeta", "kernels.snakebeta_triton", "snake_beta_triton", CPU_TRITON_ENV, __name__)
triton_failure = _route.triton_failure
reset_triton_failure = _route.reset_failure
# The fused form (bias and residual add in the same pass) is its own launcher entry with its own
# failure memory: the plain kernel is the same code, so in practice both fail or neither does.
_fused_route = TritonRoute("SnakeBeta (fused bias/residual)", "kernels.snakebeta_triton",
                           "snake_beta_fused_triton", CPU_TRITON_ENV, __name__)
fused_triton_failure = _fused_route.triton_failure
reset_fused_triton_failure = _fused_route.reset_failure


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


def _check_fused_args(x: torch.Tensor, bias: torch.Tensor | None, residual: torch.Tensor | None) -> None:
    if bias is not None:
        if tuple(bias.shape) != (x.shape[1],):
            raise ValueError(f"snake_beta_fused: bias must have shape [{x.shape[1]}], got {tuple(bias.shape)}")
        if bias.device != x.device:
            raise ValueError(f"snake_beta_fused: bias is on {bias.device} but x is on {x.device}")
    if residual is not None:
        if residual.shape != x.shape or residual.dtype != x.dtype or residual.device != x.device:
            raise ValueError(
                f"snake_beta_fused: residual must match x ({tuple(x.shape)}, {x.dtype}, {x.device}), "
                f"got {tuple(residual.shape)}, {residual.dtype}, {residual.device}"
            )


def _needs_grad(*tensors: torch.Tensor | None) -> bool:
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


def _wants_triton(route: TritonRoute, x: torch.Tensor, *params: torch.Tensor | None) -> bool:
    if _needs_grad(x, *params) or x.dtype not in _TRITON_DTYPES:
        return False
    return route.allows(x)


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
                      wanted=_wants_triton(_route, x, alpha_exp, inv_beta))


def snake_beta_fused(
    x: torch.Tensor,
    alpha_exp: torch.Tensor,
    inv_beta: torch.Tensor,
    bias: torch.Tensor | None = None,
    residual: torch.Tensor | None = None,
    return_sum: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(snake(x + bias + residual), the sum or None) in one pass over the activation.

    x: [B, C, T]; bias: [C] or None; residual: x's shape and dtype or None; return_sum: also give
    back x + bias + residual (a residual stream that later units add to). Routed like snake_beta.
    """
    if torch.compiler.is_compiling():
        return snake_beta_fused_reference(x, alpha_exp, inv_beta, bias, residual, return_sum)
    _check_args(x, alpha_exp, inv_beta)
    _check_fused_args(x, bias, residual)
    return _fused_route.run((x, alpha_exp, inv_beta, bias, residual, return_sum), snake_beta_fused_reference,
                            wanted=_wants_triton(_fused_route, x, alpha_exp, inv_beta, bias, residual))
