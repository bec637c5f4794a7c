"""Projections that read the same input, run as one GEMM over their concatenated weights.

The decoder's pre-transformer keeps the checkpoint's separate q/k/v and gate/up modules (names and
parameters as in the official code); its forward multiplies by the concatenation instead, built on
first use and rebuilt only when a weight changes (a load or in-place edit bumps its version, .to()
gives a new tensor). At a batch-1, 1-frame step every launch counts: the first chunk's latency is
set by the number of kernels in its graph, not by their work.
"""
from __future__ import annotations

import torch
from torch import nn


class ConcatLinear:
    """F.linear over [W_1; W_2; ...] (and [b_1; b_2; ...]) of several nn.Linear of one input size."""

    def __init__(self) -> None:
        self._key: tuple | None = None
        self._weight: torch.Tensor | None = None
        self._bias: torch.Tensor | None = None

    def __call__(self, x: torch.Tensor, linears: list[nn.Linear]) -> torch.Tensor:
        key = tuple(_version_key(t) for lin in linears for t in (lin.weight, lin.bias))
        if key != self._key:
            with torch.no_grad():
                self._weight = torch.cat([lin.weight.detach() for lin in linears])
                biased = [lin.bias is not None for lin in linears]
                if any(biased) and not all(biased):
                    raise ValueError("ConcatLinear: either every projection has a bias or none has")
                self._bias = torch.cat([lin.bias.detach() for lin in linears]) if all(biased) else None
            self._key = key
        return torch.nn.functional.linear(x, self._weight, self._bias)


def _version_key(t: torch.Tensor | None) -> tuple:
    if t is None:
        return ()
    return (t.data_ptr(), t._version, t.dtype, t.device, tuple(t.shape))
