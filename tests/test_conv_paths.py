"""CausalConv1d against F.conv1d, offline and streamed in chunks over the slot's stored tail, with
the edge recompute of a long streaming input as one GEMM over unfolded taps (the first context_len
outputs), for convs to several output channels and to one (the decoder's last)."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from vocoder_service.codec.convs import CausalConv1d
from vocoder_service.codec.stream_state import StepState


def _conv(in_channels, out_channels, dilation, seed=0):
    torch.manual_seed(seed)
    conv = CausalConv1d(in_channels, out_channels, 7, dilation=dilation, samples_per_frame=4)
    conv.state_key = "conv"
    return conv


def _offline(conv, x):
    d = conv.conv.dilation[0]
    return F.conv1d(F.pad(x, (conv.context_len, 0)), conv.conv.weight, conv.conv.bias, dilation=d)


@pytest.mark.parametrize("out_channels, dilation", [(1, 1), (1, 3), (5, 1), (5, 9)])
def test_offline_equals_conv1d(out_channels, dilation):
    conv = _conv(12, out_channels, dilation)
    x = torch.randn(3, 12, 90)
    with torch.no_grad():
        torch.testing.assert_close(conv(x), _offline(conv, x), atol=2e-6, rtol=1e-5)
        # the bias left to the consumer
        want = _offline(conv, x) - conv.conv.bias[None, :, None]
        torch.testing.assert_close(conv(x, add_bias=False), want, atol=2e-6, rtol=1e-5)


@pytest.mark.parametrize("dilation", [1, 3, 9])
def test_edge_conv_equals_conv1d_over_the_edge(dilation):
    conv = _conv(12, 5, dilation)
    edge = torch.randn(4, 12, 2 * conv.context_len)
    with torch.no_grad():
        got = conv._edge_conv(edge, conv.conv.bias)
        want = F.conv1d(edge, conv.conv.weight, conv.conv.bias, dilation=dilation)
    assert got.shape == want.shape == (4, 5, conv.context_len)
    torch.testing.assert_close(got, want, atol=2e-6, rtol=1e-5)


@pytest.mark.parametrize("out_channels, dilation", [(1, 1), (1, 9), (5, 3)])
def test_streamed_chunks_equal_offline(out_channels, dilation):
    """Chunks of 1..8 frames (4 samples each: shorter and longer than the context) through the slot
    state; rows of a batch at different valid lengths keep their own tails."""
    conv = _conv(6, out_channels, dilation)
    total = 30
    x = torch.randn(2, 6, total * 4)
    pools = {"conv": torch.zeros(3, 6, conv.context_len)}
    slots = torch.tensor([2, 0])
    pieces, pos = [], 0
    with torch.no_grad():
        for frames in (1, 2, 8, 3, 5, 1, 7, 3):
            state = StepState(pools, slots, torch.tensor([frames, frames]), torch.tensor([pos, pos]))
            pieces.append(conv(x[..., pos * 4:(pos + frames) * 4], state))
            pos += frames
        assert pos == total
        torch.testing.assert_close(torch.cat(pieces, dim=-1), _offline(conv, x), atol=5e-6, rtol=1e-5)


@pytest.mark.parametrize("out_channels", [1, 5])
def test_bf16_streamed_stays_within_bf16_rounding(out_channels):
    """bf16 through the slot state in chunks of 8 frames (32 samples: the edge GEMM path at d1),
    against the fp32 offline conv of the same bf16-representable inputs and weights: only the output
    rounding and the convs' fp32 sums differ; a wrong tap or a wrong tail is off by O(1)."""
    conv = _conv(96, out_channels, 1)
    with torch.no_grad():
        for param in conv.parameters():
            param.copy_(param.bfloat16().float())
        x = torch.randn(2, 96, 160).bfloat16().float()
        want = _offline(conv, x)
        conv = conv.to(torch.bfloat16)
        pools = {"conv": torch.zeros(2, 96, conv.context_len, dtype=torch.bfloat16)}
        pieces = []
        for pos in range(0, 40, 8):
            state = StepState(pools, torch.tensor([1, 0]), torch.tensor([8, 8]), torch.tensor([pos, pos]))
            pieces.append(conv(x[..., pos * 4:(pos + 8) * 4].bfloat16(), state).float())
    got = torch.cat(pieces, dim=-1)
    # one bf16 rounding of the output (half an ulp, 2^-8 relative) plus fp32 sums of 672 terms
    assert (got - want).abs().max().item() <= 2 ** -8 * want.abs().max().item() + 1e-3

