"""Eager reference for the streaming causal conv: y = conv1d([tail ++ x], W, dilation) (no padding).

`tail` holds the input samples just before x (a streaming slot's stored context, (K-1)*dilation of
them); None means zeros, i.e. the start of a sequence (left zero padding). The weight comes in the
kernel's layout [K, C_out, C_in] (tap-major, so a tap's [C_out, C_in] matrix is contiguous).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


def weight_tap_major(weight: torch.Tensor) -> torch.Tensor:
    """Conv1d weight [C_out, C_in, K] -> [K, C_out, C_in] contiguous (the kernel's layout)."""
    return weight.permute(2, 0, 1).contiguous()


def causal_conv1d_reference(
    x: torch.Tensor,
    weight_kco: torch.Tensor,
    dilation: int,
    tail: torch.Tensor | None,
    bias: torch.Tensor | None,
) -> torch.Tensor:
    """x [B, C_in, T], weight_kco [K, C_out, C_in], tail [B, C_in, (K-1)*dilation] or None, bias [C_out]
    or None -> [B, C_out, T] in x's dtype."""
    context_len = (weight_kco.shape[0] - 1) * dilation
    if tail is None:
        full = F.pad(x, (context_len, 0))
    else:
        full = torch.cat([tail, x], dim=-1)
    return F.conv1d(full, weight_kco.permute(1, 2, 0), bias, dilation=dilation)
