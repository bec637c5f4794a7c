"""SnakeBeta, the ConvNeXt upsampler block and the conv decoder blocks (official names).

In the conv decoder every conv's output goes to a SnakeBeta, either directly or after the residual
add. So a conv there returns its output without the bias as a `PendingSum` (raw output, bias,
residual to add), and the SnakeBeta that consumes it adds bias and residual in its own pass over
the activation; where the sum is needed again (the residual stream of the next unit) the same
pass stores it. Same math as conv + bias, then + residual, then SnakeBeta, in one pass instead of
three (the separate broadcast bias add and strided residual add were ~15% of a batch-64 step).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from kernels import snakebeta as snake_kernels
from kernels.snakebeta_reference import snake_params_from_log
from vocoder_service.codec.convs import CausalConv1d, CausalConvTranspose1d
from vocoder_service.codec.precision import apply_keeping_fp32
from vocoder_service.codec.stream_state import StepState

RESIDUAL_DILATIONS = (1, 3, 9)


@dataclass
class PendingSum:
    """raw + bias + residual, not yet materialised: the SnakeBeta that consumes it adds them."""

    raw: torch.Tensor  # [B, C, T], a conv output without its bias (may be a strided view)
    bias: torch.Tensor | None = None  # [C]
    residual: torch.Tensor | None = None  # [B, C, T], the residual stream this output adds to


class SnakeBeta(nn.Module):
    """y = x + sin(x * exp(alpha))^2 / (exp(beta) + 1e-9), per channel; alpha/beta are log-scale.

    exp(alpha) and 1/(exp(beta)+eps) are derived once by `prepare()` (fp32, kept fp32 on casts)
    and handed to the kernel dispatcher, which picks the fused Triton kernel where it can.
    """

    _DERIVED = ("alpha_exp", "inv_beta")

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.alpha = nn.Parameter(torch.zeros(channels))
        self.beta = nn.Parameter(torch.zeros(channels))
        self.register_buffer("alpha_exp", torch.ones(channels), persistent=False)
        self.register_buffer("inv_beta", torch.ones(channels), persistent=False)

    @torch.no_grad()
    def prepare(self) -> None:
        alpha_exp, inv_beta = snake_params_from_log(self.alpha, self.beta)
        self.alpha_exp = alpha_exp.to(self.alpha.device)
        self.inv_beta = inv_beta.to(self.alpha.device)

    def _apply(self, fn, recurse=True):
        return apply_keeping_fp32(self, super()._apply, fn, recurse, self._DERIVED)

    def forward(self, x: torch.Tensor | PendingSum) -> torch.Tensor:
        # x: [B, C, T]; looked up through the module so the dispatcher can be swapped at runtime.
        if isinstance(x, PendingSum):
            return self.with_sum(x, return_sum=False)[0]
        return snake_kernels.snake_beta(x, self.alpha_exp, self.inv_beta)

    def with_sum(self, x: torch.Tensor | PendingSum, return_sum: bool = True):
        """(SnakeBeta(x), x materialised) for a pending sum, in one pass; a plain x is its own sum."""
        if not isinstance(x, PendingSum):
            return self(x), x
        if x.bias is None and x.residual is None:
            return self(x.raw), x.raw
        return snake_kernels.snake_beta_fused(x.raw, self.alpha_exp, self.inv_beta,
                                              bias=x.bias, residual=x.residual, return_sum=return_sum)


class ConvNeXtBlock(nn.Module):
    """Causal depthwise conv k7 -> LayerNorm -> 4x MLP (exact GELU) -> gamma -> residual."""

    def __init__(self, dim: int, samples_per_frame: int) -> None:
        super().__init__()
        self.dwconv = CausalConv1d(dim, dim, 7, groups=dim, samples_per_frame=samples_per_frame)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pwconv1 = nn.Linear(dim, 4 * dim)
        self.pwconv2 = nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor, state: StepState | None = None) -> torch.Tensor:
        # x: [B, dim, T]; everything after the depthwise conv is per time step.
        h = self.dwconv(x, state).transpose(1, 2)  # [B, T, dim]
        h = self.pwconv2(F.gelu(self.pwconv1(self.norm(h))))
        return x + (self.gamma * h).transpose(1, 2)


class ResidualUnit(nn.Module):
    """x + conv1x1(Snake(conv7_dilated(Snake(x)))), returned as a PendingSum (see the module doc)."""

    def __init__(self, dim: int, dilation: int, samples_per_frame: int) -> None:
        super().__init__()
        self.act1 = SnakeBeta(dim)
        self.conv1 = CausalConv1d(dim, dim, 7, dilation=dilation, samples_per_frame=samples_per_frame)
        self.act2 = SnakeBeta(dim)
        self.conv2 = CausalConv1d(dim, dim, 1, samples_per_frame=samples_per_frame)

    def forward(self, x: torch.Tensor | PendingSum, state: StepState | None = None) -> PendingSum:
        act, stream = self.act1.with_sum(x)  # the unit's input is both Snake's input and the residual
        h = self.conv1(act, state, add_bias=False)
        out = self.conv2(self.act2(PendingSum(h, self.conv1.conv.bias)), state, add_bias=False)
        return PendingSum(out, self.conv2.conv.bias, residual=stream)


class DecoderBlock(nn.Module):
    """SnakeBeta -> causal ConvTranspose (k=2r, s=r) -> residual units with dilation 1, 3, 9.

    `block.{0..4}` indices match the checkpoint: 0 Snake, 1 upsampler, 2-4 residual units.
    """

    def __init__(self, in_dim: int, out_dim: int, rate: int, samples_per_frame: int) -> None:
        super().__init__()
        out_rate = samples_per_frame * rate
        self.block = nn.ModuleList(
            [SnakeBeta(in_dim), CausalConvTranspose1d(in_dim, out_dim, 2 * rate, rate, samples_per_frame)]
            + [ResidualUnit(out_dim, d, out_rate) for d in RESIDUAL_DILATIONS]
        )

    def forward(self, x: torch.Tensor | PendingSum, state: StepState | None = None) -> PendingSum:
        # x: [B, in_dim, T] -> [B, out_dim, T * rate], as a PendingSum for the next SnakeBeta.
        upsample = self.block[1]
        out = PendingSum(upsample(self.block[0](x), state, add_bias=False), upsample.conv.bias)
        for unit in self.block[2:]:
            out = unit(out, state)
        return out
