"""Time-major activations for the decoder's conv stack: [B, C, T] tensors stored as [B, T, C].

Why: cuDNN runs bf16 convolutions in NHWC. Fed [B, C, T] (channel-major) tensors, it wraps each conv
in NCHW -> NHWC -> NCHW transposes, ~10 ms of a ~46 ms batch-64 x 25-frame step (H100 profile,
benchmarks/results/2026-11-25-talker-frame-attention-h100.md). Seen as conv2d on [B, C, 1, T]
channels-last views of [B, T, C] memory, the same convs need no transposes and cuDNN's heuristic
picks are faster too: 0.26 vs 0.37 ms up to 1.56 vs 2.67 ms per decoder conv at batch 64 on the
H200 (benchmarks/results/2026-11-26-conv-layouts-h200.json, "nhwc_1t").

The logical shape stays [B, C, T], so module code indexes time as the last dim whatever the storage:
each op here follows its input's layout, and a channel-major input still takes the plain F.conv1d
path. Which layout the decoder stack runs in is chosen once, by Code2Wav (`time_major`), from
QWEN3_TTS_VOCODER_LAYOUT ("time-major", the default, or "channel-major", the official code's).
Measured on one H200 (2026-11-26, suite piece vocoder-layouts): an eager batch-64 x 25-frame step
42.7 -> 33.9 ms of GPU time, the service path at 64 streams 2504 -> 3078 audio-s/s, graph capture
28 -> 12 s (benchmarks/results/2026-11-26-vocoder-time-major-h200.md).
"""
from __future__ import annotations

import os

import torch
import torch.nn.functional as F

LAYOUT_ENV = "QWEN3_TTS_VOCODER_LAYOUT"
LAYOUTS = ("time-major", "channel-major")
DEFAULT_LAYOUT = "time-major"


def default_time_major() -> bool:
    """The decoder layout QWEN3_TTS_VOCODER_LAYOUT asks for (DEFAULT_LAYOUT when unset)."""
    value = os.environ.get(LAYOUT_ENV, "").strip() or DEFAULT_LAYOUT
    if value not in LAYOUTS:
        raise ValueError(f"{LAYOUT_ENV} must be one of {', '.join(LAYOUTS)}, got {value!r}")
    return value == "time-major"


def is_time_major(x: torch.Tensor) -> bool:
    """[B, C, T] with unit channel stride and more than one channel and sample (else both layouts
    are the same memory and the plain path serves)."""
    return x.dim() == 3 and x.shape[1] > 1 and x.shape[2] > 1 and x.stride(1) == 1


def to_time_major(x: torch.Tensor) -> torch.Tensor:
    """x itself when time-major already, else a time-major copy; same logical shape."""
    return x if is_time_major(x) else x.transpose(1, 2).contiguous().transpose(1, 2)


def empty_like_layout(x: torch.Tensor) -> torch.Tensor:
    """Uninitialised tensor of x's shape and dtype, dense in x's layout (time-major or contiguous)."""
    if is_time_major(x):
        batch, channels, samples = x.shape
        return torch.empty((batch, samples, channels), device=x.device, dtype=x.dtype).transpose(1, 2)
    return torch.empty(x.shape, device=x.device, dtype=x.dtype)


def cat_time(parts: list[torch.Tensor]) -> torch.Tensor:
    """torch.cat(parts, dim=-1) stored in the layout of the last part (the new input): a plain cat of
    3-D tensors is always channel-major, which would switch the rest of the stack back to it."""
    if is_time_major(parts[-1]):
        return torch.cat([p.transpose(1, 2) for p in parts], dim=1).transpose(1, 2)
    return torch.cat(parts, dim=-1)


class ChannelsLastWeight:
    """A conv weight [A, B, k] as the [A, B, 1, k] channels-last filter cuDNN's NHWC kernels read
    (a filter in the other layout is converted on every call). Re-derived only when the weight
    changes: a load or in-place edit bumps its version, .to() gives a new tensor."""

    def __init__(self) -> None:
        self._key: tuple | None = None
        self._value: torch.Tensor | None = None

    def get(self, weight: torch.Tensor) -> torch.Tensor:
        key = (weight.data_ptr(), weight._version, weight.dtype, weight.device, tuple(weight.shape))
        if self._key != key:
            with torch.no_grad():
                self._value = weight.detach().unsqueeze(2).contiguous(memory_format=torch.channels_last)
            self._key = key
        return self._value


def conv1d_time_major(x: torch.Tensor, weight_4d: torch.Tensor, bias: torch.Tensor | None, padding: int,
                      dilation: int, groups: int) -> torch.Tensor:
    """F.conv1d for a time-major x [B, C_in, T] as conv2d on its [B, C_in, 1, T] channels-last view;
    the result [B, C_out, T_out] is time-major (dense)."""
    x4 = x.unsqueeze(2)
    if not x4.is_contiguous(memory_format=torch.channels_last):
        x4 = x4.contiguous(memory_format=torch.channels_last)  # a strided view: one same-layout copy
    out = F.conv2d(x4, weight_4d, bias, padding=(0, padding), dilation=(1, dilation), groups=groups)
    return out.squeeze(2)


def conv_transpose1d_time_major(x: torch.Tensor, weight_4d: torch.Tensor, bias: torch.Tensor | None,
                                stride: int) -> torch.Tensor:
    """F.conv_transpose1d for a time-major x, as conv_transpose2d on the channels-last view."""
    x4 = x.unsqueeze(2)
    if not x4.is_contiguous(memory_format=torch.channels_last):
        x4 = x4.contiguous(memory_format=torch.channels_last)
    return F.conv_transpose2d(x4, weight_4d, bias, stride=(1, stride)).squeeze(2)
