"""Time-major activations: [B, C, T] tensors stored as [B, T, C] (channels adjacent in memory).

This is cuDNN's NHWC ("channels_last") for a conv1d seen as a conv2d on [B, C, 1, T]: its bf16
tensor-core kernels read and write it directly. A channel-major ([B, C, T] contiguous) input made
cuDNN wrap every convolution in nchwToNhwc / nhwcToNchw passes (16% of a batch-64 step on the
H200, benchmarks/results/2026-11-22-decoder-profile-bs64-h200.txt). The logical shape stays
[B, C, T] everywhere, so module code indexes time as the last dim whatever the storage; only the
strides say time-major, and elementwise ops and convolutions keep the layout of their inputs.
"""
from __future__ import annotations

import torch


def empty_time_major(batch: int, channels: int, num_samples: int, like: torch.Tensor) -> torch.Tensor:
    """Uninitialised [batch, channels, num_samples] with like's device/dtype, stored [B, T, C]."""
    return torch.empty((batch, num_samples, channels), device=like.device, dtype=like.dtype).transpose(1, 2)


def is_time_major(x: torch.Tensor) -> bool:
    """[B, C, T] whose channel stride is 1 (a single channel is both layouts)."""
    return x.dim() == 3 and (x.shape[1] == 1 or x.stride(1) == 1)


def as_time_major(x: torch.Tensor) -> torch.Tensor:
    """x itself when already time-major and dense per row, else a time-major copy."""
    if is_time_major(x) and x.transpose(1, 2).is_contiguous():
        return x
    return x.transpose(1, 2).contiguous().transpose(1, 2)


@torch.no_grad()
def make_weight_time_major_(weight: torch.Tensor) -> None:
    """Restride a conv weight [A, B, k] in place so dim 1 is innermost ([A, k, B] in memory).

    cuDNN's NHWC kernels want the filter in the same layout as the activation (dim 1 innermost for
    both conv weights [C_out, C_in, k] and transposed-conv weights [C_in, C_out, k]); a filter in
    the other layout is converted on every call. Values, shape and checkpoint names are unchanged,
    and `Module.to` keeps the strides (preserve_format).
    """
    if weight.dim() == 3 and weight.shape[1] > 1 and weight.stride(1) != 1:
        weight.data = weight.data.transpose(1, 2).contiguous().transpose(1, 2)
