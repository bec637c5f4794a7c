"""Causal convolutions that run either on a whole sequence or as one streaming step.

Parameter names match the official checkpoint (`<name>.conv.weight`, `<name>.conv.bias`).
A stateful conv convolves one time-major buffer [B, C_in, context_len + T]: its first
context_len samples hold the slot's stored input tail (zeros for a fresh slot, and for a whole
sequence, which is exactly the reference's left padding), the rest this step's input. So a
sequence split into chunks produces the same samples as the whole sequence, and the conv is a
plain "valid" convolution whose output is exactly T dense samples: no cat of tail and input, no
output slice for the next op to copy. The producer of the input writes it straight into the
buffer where it can (`open_input`, then e.g. SnakeBeta's `out=new_input(buffer)`, then
`conv(buffer, state, buffered=True)`); `conv(x, state)` copies x in. Both go through the module
call, so forward hooks see every conv.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from vocoder_service.codec.layout import as_time_major, empty_time_major, make_weight_time_major_
from vocoder_service.codec.stream_state import StepState


class _BufferedConv(nn.Module):
    """The [stored tail ++ new input] buffer protocol shared by both causal convs."""

    conv: nn.Conv1d | nn.ConvTranspose1d
    context_len: int  # input samples kept per slot
    samples_per_frame: int  # input samples per code frame at this op
    state_key: str  # set by Code2Wav to the module's qualified name

    def state_specs(self) -> dict[str, tuple[int, ...]]:
        if self.context_len == 0:
            return {}
        return {self.state_key: (self.conv.in_channels, self.context_len)}

    @torch.no_grad()
    def prepare(self) -> None:
        make_weight_time_major_(self.conv.weight)

    def open_input(self, like: torch.Tensor, num_samples: int, state: StepState | None) -> torch.Tensor:
        """Time-major [B, C_in, context_len + num_samples] (B, dtype, device of `like`), the context filled.

        The caller fills `new_input(buffer)` with this step's input, then calls
        `self(buffer, state, buffered=True)`.
        """
        buffer = empty_time_major(like.shape[0], self.conv.in_channels, self.context_len + num_samples, like)
        if self.context_len:
            context = buffer[..., : self.context_len]
            if state is None:
                context.zero_()
            else:
                state.load_conv_context(self.state_key, context)
        return buffer

    def new_input(self, buffer: torch.Tensor) -> torch.Tensor:
        """The part of `buffer` that holds this step's input: [B, C_in, T] (a view)."""
        return buffer[..., self.context_len :]

    def forward(self, x: torch.Tensor, state: StepState | None = None, add_bias: bool = True,
                buffered: bool = False) -> torch.Tensor:
        """x: [B, C_in, T] -> [B, C_out, T * upsampling]; with `buffered`, x is a filled `open_input` buffer.

        `add_bias=False` leaves the bias to the caller (fused into the next op).
        """
        bias = self.conv.bias if add_bias else None
        if self.context_len == 0:
            return self._convolve(x, bias)
        if not buffered:
            buffer = self.open_input(x, x.shape[-1], state)
            self.new_input(buffer).copy_(x)
            x = buffer
        if state is not None:
            state.save_conv_tail(self.state_key, x, self.samples_per_frame)
        return self._convolve(x, bias)

    def _convolve(self, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        raise NotImplementedError


class CausalConv1d(_BufferedConv):
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
        self.context_len = (kernel_size - 1) * dilation
        self.samples_per_frame = samples_per_frame
        self.state_key = ""
        # A 1x1 conv on time-major [B, T, C] rows is one GEMM over B*T rows (bias in its epilogue
        # where cuBLASLt takes it), not a cuDNN conv plus a separate broadcast bias pass.
        self.is_pointwise = kernel_size == 1 and groups == 1

    def _convolve(self, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        # x: [B, C_in, context_len + T] -> [B, C_out, T]
        conv = self.conv
        if self.is_pointwise:
            rows = as_time_major(x).transpose(1, 2)  # [B, T, C_in] contiguous
            return F.linear(rows, conv.weight[:, :, 0], bias).transpose(1, 2)
        return F.conv1d(x, conv.weight, bias, dilation=conv.dilation, groups=conv.groups)


class CausalConvTranspose1d(_BufferedConv):
    """ConvTranspose1d (kernel k, stride s) with k-s samples trimmed on the right only.

    Output block n (s samples) depends on input frames n-k/s+1 .. n, so the op is causal and a
    step needs the previous k/s-1 input frames (1 for the decoder's k=2s, 0 for k=s). With those
    frames in front of the input, padding = (k/s-1)*s drops exactly the outputs that belong to
    them on the left and the k-s trimmed ones on the right: the output is T*s dense samples.
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int, samples_per_frame: int = 1) -> None:
        super().__init__()
        if kernel_size % stride:
            raise ValueError(f"causal ConvTranspose1d needs kernel_size a multiple of stride, got {kernel_size}, {stride}")
        self.conv = nn.ConvTranspose1d(in_channels, out_channels, kernel_size, stride=stride)
        self.stride = stride
        self.context_len = kernel_size // stride - 1
        self.samples_per_frame = samples_per_frame
        self.state_key = ""

    def _convolve(self, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        # x: [B, C_in, context_len + T] -> [B, C_out, T * stride]
        padding = self.context_len * self.stride
        return F.conv_transpose1d(x, self.conv.weight, bias, stride=self.stride, padding=padding)
