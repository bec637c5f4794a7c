"""Eager PyTorch reference for SnakeBeta: y = x + sin(x * a)^2 * b, per channel.

`a` is exp(alpha) and `b` is 1 / (exp(beta) + eps): both precomputed once after weight load
(the checkpoint stores alpha and beta in log space).
"""
from __future__ import annotations

import torch

SNAKE_EPS = 1e-9


def snake_params_from_log(alpha: torch.Tensor, beta: torch.Tensor, eps: float = SNAKE_EPS):
    """(exp(alpha), 1/(exp(beta)+eps)) in fp32, as the fused kernel consumes them."""
    alpha_exp = torch.exp(alpha.float())
    inv_beta = 1.0 / (torch.exp(beta.float()) + eps)
    return alpha_exp, inv_beta


def snake_beta_reference(x: torch.Tensor, alpha_exp: torch.Tensor, inv_beta: torch.Tensor) -> torch.Tensor:
    """x: [B, C, T]; alpha_exp, inv_beta: [C] -> [B, C, T] in x's dtype (math in fp32)."""
    xf = x.float()
    a = alpha_exp.float().view(1, -1, 1)
    b = inv_beta.float().view(1, -1, 1)
    return (xf + torch.sin(xf * a).pow(2) * b).to(x.dtype)


def snake_beta_fused_reference(
    x: torch.Tensor,
    alpha_exp: torch.Tensor,
    inv_beta: torch.Tensor,
    bias: torch.Tensor | None,
    residual: torch.Tensor | None,
    return_sum: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(snake(x + bias + residual), x + bias + residual or None), both in x's dtype.

    The sum is formed in fp32 in that order (x, then bias, then residual) and the snake reads the
    unrounded sum, as the fused kernel does; bias is [C], residual has x's shape.
    """
    total = x.float()
    if bias is not None:
        total = total + bias.float().view(1, -1, 1)
    if residual is not None:
        total = total + residual.float()
    a = alpha_exp.float().view(1, -1, 1)
    b = inv_beta.float().view(1, -1, 1)
    y = (total + torch.sin(total * a).pow(2) * b).to(x.dtype)
    return y, (total.to(x.dtype) if return_sum else None)


_MANTISSA_BITS = {torch.bfloat16: 7, torch.float16: 10, torch.float32: 23}


def storage_ulp(ref: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Spacing of `dtype` values at |ref| (ref in fp32): the unit for kernel-vs-reference tolerances."""
    _, exponent = torch.frexp(ref.abs().clamp_min(torch.finfo(dtype).tiny))
    return torch.ldexp(torch.ones_like(ref), exponent - 1 - _MANTISSA_BITS[dtype])
