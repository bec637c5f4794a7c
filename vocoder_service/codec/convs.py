"""Causal convolutions that run either on a whole sequence or as one streaming step.

Parameter names match the official checkpoint (`<name>.conv.weight`, `<name>.conv.bias`).
Whole sequence (`state=None`): left zero padding, exactly the reference's padding. Streaming:
the zeros are replaced by the slot's stored input tail (zeros again for a fresh slot), so a
sequence split into chunks produces the same samples as the whole sequence.

Each conv follows its input's layout (codec/layout.py): a time-major input runs as conv2d on the
channels-last view with a cached channels-last filter and gives a time-major output; a channel-major
input takes F.conv1d as before.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from vocoder_service.codec.derived_weights import ChannelsLastWeight
from vocoder_service.codec.layout import cat_time, conv1d_time_major, conv_transpose1d_time_major, is_time_major
from vocoder_service.codec.stream_state import StepState


class CausalConv1d(nn.Module):
    """Stride-1 Conv1d padded (k-1)*dilation on the left only: output t sees inputs <= t."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int,
        dilation: int = 1,
        groups: int = 1,
        samples_per_frame: int = 1,
    ) -> None:
        super().__init__()
        self.conv = nn.Conv1d(in_channels, out_channels, kernel_size, dilation=dilation, groups=groups)
        self.context_len = (kernel_size - 1) * dilation  # input samples kept per slot
        self.samples_per_frame = samples_per_frame  # input samples per code frame at this op
        self.state_key = ""  # set by Code2Wav to the module's qualified name
        self._weight_4d = ChannelsLastWeight()  # the filter for time-major inputs

    def state_specs(self) -> dict[str, tuple[int, ...]]:
        if self.context_len == 0:
            return {}
        return {self.state_key: (self.conv.in_channels, self.context_len)}

    def forward(self, x: torch.Tensor, state: StepState | None = None, add_bias: bool = True) -> torch.Tensor:
        # x: [B, C_in, T] -> [B, C_out, T]. add_bias=False leaves the bias to the consumer (the
        # decoder's SnakeBeta adds it in its own pass: a separate broadcast add costs a full pass).
        bias = self.conv.bias if add_bias else None
        if self.context_len == 0:
            return self._conv(x, bias)
        num_samples = x.shape[-1]  # static per captured (bs, t) shape, so these branches are too
        if state is None:
            if is_time_major(x):  # F.pad would give a channel-major copy; the conv's own zeros do not
                return self._conv(x, bias, padding=self.context_len)[..., :num_samples]
            full = F.pad(x, (self.context_len, 0))
            return self._conv(full, bias)
        tail = state.context(self.state_key)  # [B, C_in, context_len]
        if num_samples < self.context_len:
            full = cat_time([tail, x])
            state.advance(self.state_key, full, self.samples_per_frame)
            return self._conv(full, bias)
        # Long inputs (the 400 Hz .. 24 kHz stages): never materialise [tail ++ x], a full copy of
        # the activation per conv (7.5% of an eager batch-64 step on the H200). Convolve x with zero left context, then recompute only the
        # first context_len outputs from the tail.
        state.advance_split(self.state_key, tail, x, self.samples_per_frame)
        out = self._conv(x, bias, padding=self.context_len)
        out = out[..., :num_samples]  # outputs of positions 0..T-1 (the right padding is dropped)
        edge = torch.cat([tail, x[..., : self.context_len]], dim=-1)  # [B, C_in, 2 * context_len], small
        out[..., : self.context_len] = self._edge_conv(edge, bias)
        return out

    def _edge_conv(self, edge: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        """The first context_len outputs from edge = [tail ++ x[:context_len]] as one GEMM over the
        unfolded taps ([B * ctx, C_in * K] x [C_in * K, C_out]). cuDNN's pick for this short input was
        a generic implicit GEMM: 1.17 ms per batch-64 x 25-frame step for the 768-channel d9 unit's 54
        outputs (H100 graph profile). With the GEMM that kernel is gone, and the service decoded 4% more
        audio at 64 streams on the same machine. Grouped convs keep cuDNN."""
        conv = self.conv
        if conv.groups != 1:
            return self._conv(edge, bias)
        batch, channels, _ = edge.shape
        ctx, taps = self.context_len, conv.kernel_size[0]
        # window j spans edge[j .. j + ctx]; its taps are every dilation-th sample: [B, C_in, ctx, K]
        cols = edge.unfold(-1, ctx + 1, 1)[..., :: conv.dilation[0]]
        cols = cols.permute(0, 2, 1, 3).reshape(batch * ctx, channels * taps)
        out = F.linear(cols, conv.weight.reshape(conv.out_channels, channels * taps), bias)  # [B * ctx, C_out]
        return out.view(batch, ctx, conv.out_channels).transpose(1, 2)

    def _conv(self, x: torch.Tensor, bias: torch.Tensor | None, padding: int = 0) -> torch.Tensor:
        conv = self.conv
        if is_time_major(x):
            return conv1d_time_major(x, self._weight_4d.get(conv.weight), bias, padding, conv.dilation[0], conv.groups)
        return F.conv1d(x, conv.weight, bias, padding=padding, dilation=conv.dilation, groups=conv.groups)


class CausalConvTranspose1d(nn.Module):
    """ConvTranspose1d (kernel k, stride s) with k-s samples trimmed on the right only.

    Output block n (s samples) depends on input frames n-ceil(k/s)+1 .. n, so the op is causal
    and a step needs the previous ceil(k/s)-1 input frames (1 for the decoder's k=2s, 0 for k=s).
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int, samples_per_frame: int = 1) -> None:
        super().__init__()
        self.conv = nn.ConvTranspose1d(in_channels, out_channels, kernel_size, stride=stride)
        self.stride = stride
        self.context_len = math.ceil(kernel_size / stride) - 1
        self.samples_per_frame = samples_per_frame
        self.state_key = ""
        self._weight_4d = ChannelsLastWeight()  # the filter for time-major inputs

    def state_specs(self) -> dict[str, tuple[int, ...]]:
        if self.context_len == 0:
            return {}
        return {self.state_key: (self.conv.in_channels, self.context_len)}

    def forward(self, x: torch.Tensor, state: StepState | None = None, add_bias: bool = True) -> torch.Tensor:
        # x: [B, C_in, T] -> [B, C_out, T * stride]; add_bias=False as for CausalConv1d.
        num_out = x.shape[-1] * self.stride
        if self.context_len == 0:
            return self._conv(x, add_bias)[..., :num_out]
        if state is None:  # zeros for context, stored in x's layout (F.pad's copy is channel-major)
            full = cat_time([x.new_zeros((x.shape[0], x.shape[1], self.context_len)), x])
        else:
            full = cat_time([state.context(self.state_key), x])
            state.advance(self.state_key, full, self.samples_per_frame)
        # The first context_len*stride outputs belong to frames already emitted (or to the zero
        # padding); everything after num_out is the right trim.
        skip = self.context_len * self.stride
        return self._conv(full, add_bias)[..., skip : skip + num_out]

    def _conv(self, x: torch.Tensor, add_bias: bool) -> torch.Tensor:
        conv = self.conv
        bias = conv.bias if add_bias else None
        if is_time_major(x):
            return conv_transpose1d_time_major(x, self._weight_4d.get(conv.weight), bias, self.stride)
        return F.conv_transpose1d(x, conv.weight, bias, stride=conv.stride)
