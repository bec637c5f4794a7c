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

from kernels.time_major import empty_in_layout, is_time_major  # noqa: F401 (the layout's API, re-exported)

LAYOUT_ENV = "QWEN3_TTS_VOCODER_LAYOUT"
LAYOUTS = ("time-major", "channel-major")
DEFAULT_LAYOUT = "time-major"


def default_time_major() -> bool:
    """The decoder layout QWEN3_TTS_VOCODER_LAYOUT asks for (DEFAULT_LAYOUT when unset)."""
    value = os.environ.get(LAYOUT_ENV, "").strip() or DEFAULT_LAYOUT
    if value not in LAYOUTS:
        raise ValueError(f"{LAYOUT_ENV} must be one of {', '.join(LAYOUTS)}, got {value!r}")
    return value == "time-major"


def to_time_major(x: torch.Tensor) -> torch.Tensor:
    """x itself when time-major already, else a time-major copy; same logical shape."""
    return x if is_time_major(x) else x.transpose(1, 2).contiguous().transpose(1, 2)


def cat_time(parts: list[torch.Tensor]) -> torch.Tensor:
    """torch.cat(parts, dim=-1) stored in the layout of the last part (the new input): a plain cat of
    3-D tensors is always channel-major, which would switch the rest of the stack back to it."""
    if is_time_major(parts[-1]):
        return torch.cat([p.transpose(1, 2) for p in parts], dim=1).transpose(1, 2)
    return torch.cat(parts, dim=-1)


def _channels_last_view(x: torch.Tensor) -> torch.Tensor:
    """x [B, C, T] time-major as the [B, C, 1, T] channels-last tensor conv2d reads (a strided view,
    e.g. a time slice, costs one same-layout copy)."""
    x4 = x.unsqueeze(2)
    return x4 if x4.is_contiguous(memory_format=torch.channels_last) else x4.contiguous(memory_format=torch.channels_last)


def conv1d_time_major(x: torch.Tensor, weight_4d: torch.Tensor, bias: torch.Tensor | None, padding: int,
                      dilation: int, groups: int) -> torch.Tensor:
    """F.conv1d for a time-major x [B, C_in, T] as conv2d on its [B, C_in, 1, T] channels-last view;
    the result [B, C_out, T_out] is time-major (dense)."""
    out = F.conv2d(_channels_last_view(x), weight_4d, bias, padding=(0, padding), dilation=(1, dilation), groups=groups)
    return out.squeeze(2)


def conv_transpose1d_time_major(x: torch.Tensor, weight_4d: torch.Tensor, bias: torch.Tensor | None,
                                stride: int) -> torch.Tensor:
    """F.conv_transpose1d for a time-major x, as conv_transpose2d on the channels-last view."""
    return F.conv_transpose2d(_channels_last_view(x), weight_4d, bias, stride=(1, stride)).squeeze(2)
