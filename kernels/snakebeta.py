"""SnakeBeta dispatcher. Placeholder dispatch to the reference until the Triton kernel lands."""
from __future__ import annotations

import torch

from kernels.snakebeta_reference import snake_beta_reference, snake_params_from_log  # noqa: F401


def snake_beta(x: torch.Tensor, alpha_exp: torch.Tensor, inv_beta: torch.Tensor) -> torch.Tensor:
    """x: [B, C, T]; alpha_exp, inv_beta: [C] fp32 -> [B, C, T] in x's dtype."""
    return snake_beta_reference(x, alpha_exp, inv_beta)
