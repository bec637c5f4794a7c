"""Which of the two layouts of a [B, C, T] activation a tensor uses, and fresh tensors in it (pure
torch: the vocoder's layout helpers and the SnakeBeta launcher share these, neither imports triton).

Channel-major is [B, C, T] contiguous (time stride 1); time-major stores [B, T, C] (channel stride
1), what cuDNN's NHWC kernels read (vocoder_service/codec/layout.py says why the decoder uses it).
"""
from __future__ import annotations

import torch


def is_time_major(x: torch.Tensor) -> bool:
    """[B, C, T] with unit channel stride and more than one channel and sample (with one of either,
    both layouts are the same memory and the tensor counts as channel-major)."""
    return x.dim() == 3 and x.shape[1] > 1 and x.shape[2] > 1 and x.stride(1) == 1


def empty_in_layout(x: torch.Tensor) -> torch.Tensor:
    """Uninitialised tensor of x's shape and dtype, dense in x's layout (time-major or contiguous)."""
    if is_time_major(x):
        batch, channels, samples = x.shape
        return torch.empty((batch, samples, channels), device=x.device, dtype=x.dtype).transpose(1, 2)
    return torch.empty(x.shape, device=x.device, dtype=x.dtype)
