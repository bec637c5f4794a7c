"""Tensors derived from a module's parameters (another layout, a concatenation), built on first use
and rebuilt only when a source changes: a load or an in-place edit bumps its version, .to() gives a
new tensor. The checkpoint's parameters stay as they are (names, shapes, layout).

Used for the conv filters of the time-major path (channels-last) and the pre-transformer's
concatenated q/k/v and gate/up weights: at a batch-1, 1-frame step every launch counts (the first
chunk's latency is set by the number of kernels in its graph), so projections that read the same
input run as one GEMM.
"""
from __future__ import annotations

from typing import Callable

import torch
from torch import nn


class DerivedTensor:
    """derive(*sources) cached on the sources' identities and versions (a source may be None)."""

    def __init__(self, derive: Callable) -> None:
        self._derive = derive
        self._key: tuple | None = None
        self._value = None

    def get(self, *sources: torch.Tensor | None):
        key = tuple(_version_key(t) for t in sources)
        if key != self._key:
            with torch.no_grad():
                self._value = self._derive(*(t.detach() if t is not None else None for t in sources))
            self._key = key
        return self._value


def _channels_last_filter(weight: torch.Tensor) -> torch.Tensor:
    return weight.unsqueeze(2).contiguous(memory_format=torch.channels_last)


class ChannelsLastWeight(DerivedTensor):
    """A conv weight [A, B, k] as the [A, B, 1, k] channels-last filter cuDNN's NHWC kernels read
    (a filter in the other layout is converted on every call)."""

    def __init__(self) -> None:
        super().__init__(_channels_last_filter)


def _concat(*tensors: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    half = len(tensors) // 2
    weights, biases = tensors[:half], tensors[half:]
    if any(b is None for b in biases) and not all(b is None for b in biases):
        raise ValueError("ConcatLinear: either every projection has a bias or none has")
    return torch.cat(weights), (None if biases[0] is None else torch.cat(biases))


class ConcatLinear:
    """F.linear over [W_1; W_2; ...] (and [b_1; b_2; ...]) of several nn.Linear of one input size."""

    def __init__(self) -> None:
        self._cat = DerivedTensor(_concat)

    def __call__(self, x: torch.Tensor, linears: list[nn.Linear]) -> torch.Tensor:
        weight, bias = self._cat.get(*(lin.weight for lin in linears), *(lin.bias for lin in linears))
        return torch.nn.functional.linear(x, weight, bias)


def _version_key(t: torch.Tensor | None) -> tuple:
    if t is None:
        return ()
    return (t.data_ptr(), t._version, t.dtype, t.device, tuple(t.shape))
