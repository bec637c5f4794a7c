"""Time-major activations and buffered streaming convs (vocoder_service/codec/{layout,convs}.py).

The parity and streaming suites prove the decoder's numbers; these tests pin the data layout that
makes it cheap on the GPU: every conv reads a time-major ([B, T, C] in memory) input, the causal
convs convolve one [stored tail ++ input] buffer into a dense output, conv tails live time-major in
the pools, and a decode step issues no cat outside the pre-transformer (counted on the meta device
by benchmarks/count_decoder_ops.py, the tool the commit messages quote).
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from test_decoder_fixtures import random_codes, single_thread, tiny_code2wav  # noqa: F401 (single_thread: autouse fixture)
from vocoder_service.codec import StreamingDecoder
from vocoder_service.codec.convs import CausalConv1d, CausalConvTranspose1d
from vocoder_service.codec.layout import as_time_major, empty_time_major, is_time_major, make_weight_time_major_
from vocoder_service.codec.stream_state import StepState, new_pool

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.count_decoder_ops import build_meta_decoder, count_step  # noqa: E402

TOLERANCE = 1e-5  # one fp32 conv against another: only the summation order differs


def _reference_conv(conv: CausalConv1d, x: torch.Tensor) -> torch.Tensor:
    c = conv.conv
    return F.conv1d(F.pad(x.contiguous(), (conv.context_len, 0)), c.weight.contiguous(), c.bias,
                    dilation=c.dilation, groups=c.groups)


def _reference_conv_t(conv: CausalConvTranspose1d, x: torch.Tensor) -> torch.Tensor:
    c = conv.conv
    full = F.conv_transpose1d(x.contiguous(), c.weight.contiguous(), c.bias, stride=conv.stride)
    return full[..., : x.shape[-1] * conv.stride]  # the causal trim: k - s samples off the right


def _step_state(pools, batch, lengths):
    return StepState(pools, torch.arange(batch), torch.as_tensor(lengths), torch.zeros(batch, dtype=torch.int64))


@pytest.mark.parametrize("kernel_size, dilation, groups", [(7, 1, 1), (7, 9, 1), (3, 1, 1), (7, 1, 6), (1, 1, 1)])
@pytest.mark.parametrize("time_major_input", [False, True])
@torch.no_grad()
def test_causal_conv_whole_and_chunked_match_padded_reference(kernel_size, dilation, groups, time_major_input):
    torch.manual_seed(kernel_size * 10 + dilation)
    conv = CausalConv1d(6, 12, kernel_size, dilation=dilation, groups=groups, samples_per_frame=4)
    conv.state_key = "conv"
    conv.prepare()
    assert is_time_major(conv.conv.weight) or kernel_size == 1 or conv.conv.weight.shape[1] == 1
    x = torch.randn(2, 6, 40)
    x = as_time_major(x) if time_major_input else x
    reference = _reference_conv(conv, x)
    whole = conv(x)
    if groups == 1:  # CPU's grouped kernel answers channel-major whatever it reads; cuDNN does not
        assert is_time_major(whole) and whole.transpose(1, 2).is_contiguous(), whole.stride()
    assert (whole - reference).abs().max() <= TOLERANCE
    # Chunks of 1, 2 and 7 frames (4 samples each) through a slot pool equal the whole sequence.
    pools = {key: new_pool(2, shape, x.device, x.dtype) for key, shape in conv.state_specs().items()}
    pieces, start = [], 0
    for frames in (1, 2, 7):
        chunk = x[..., start : start + 4 * frames]
        pieces.append(conv(chunk, _step_state(pools, 2, [frames, frames])))
        start += 4 * frames
    assert (torch.cat(pieces, dim=-1) - reference).abs().max() <= TOLERANCE


@pytest.mark.parametrize("kernel_size, stride", [(16, 8), (6, 3), (2, 2)])
@torch.no_grad()
def test_causal_conv_transpose_whole_and_chunked_match_trimmed_reference(kernel_size, stride):
    torch.manual_seed(kernel_size)
    conv = CausalConvTranspose1d(5, 4, kernel_size, stride, samples_per_frame=1)
    conv.state_key = "up"
    conv.prepare()
    x = as_time_major(torch.randn(3, 5, 11))
    reference = _reference_conv_t(conv, x)
    whole = conv(x)
    assert whole.shape == reference.shape and whole.transpose(1, 2).is_contiguous(), whole.stride()
    assert (whole - reference).abs().max() <= TOLERANCE
    pools = {key: new_pool(3, shape, x.device, x.dtype) for key, shape in conv.state_specs().items()}
    pieces = [conv(x[..., a:b], _step_state(pools, 3, [b - a] * 3)) for a, b in ((0, 1), (1, 4), (4, 11))]
    assert (torch.cat(pieces, dim=-1) - reference).abs().max() <= TOLERANCE


def test_conv_transpose_rejects_kernel_not_a_multiple_of_stride():
    with pytest.raises(ValueError, match="multiple of stride"):
        CausalConvTranspose1d(2, 2, 5, 2)


@torch.no_grad()
def test_padded_rows_store_the_tail_that_ends_at_their_length():
    """Row b's stored tail is the context_len samples before lengths[b] * spf, padding never."""
    conv = CausalConv1d(3, 3, 4, samples_per_frame=2)  # context_len 3
    conv.state_key = "conv"
    pools = {"conv": new_pool(3, (3, 3), torch.device("cpu"), torch.float32)}
    x = torch.arange(2 * 3 * 10, dtype=torch.float32).view(2, 3, 10)
    conv(x, StepState(pools, torch.tensor([2, 0]), torch.tensor([5, 1]), torch.zeros(2, dtype=torch.int64)))
    # buffer = [3 zeros ++ x]; row 0 (slot 2) valid up to 10 samples -> tail x[..., 7:10];
    # row 1 (slot 0) valid up to 2 samples -> tail [0, x0, x1].
    assert torch.equal(pools["conv"][2], x[0, :, 7:10])
    assert torch.equal(pools["conv"][0], torch.cat([torch.zeros(3, 1), x[1, :, :2]], dim=1))
    assert torch.count_nonzero(pools["conv"][1]) == 0


def test_layout_helpers():
    like = torch.zeros(1, dtype=torch.bfloat16)
    buf = empty_time_major(2, 5, 7, like)
    assert buf.shape == (2, 5, 7) and buf.stride() == (35, 1, 5) and buf.dtype == torch.bfloat16
    x = torch.randn(2, 5, 7)
    assert not is_time_major(x) and is_time_major(as_time_major(x)) and torch.equal(as_time_major(x), x)
    assert as_time_major(buf) is buf
    assert is_time_major(torch.randn(2, 1, 7))  # one channel: either layout
    w = torch.randn(4, 3, 5)
    before = w.clone()
    make_weight_time_major_(w)
    assert w.stride() == (15, 1, 3) and torch.equal(w, before)
    pool = new_pool(4, (6, 2), torch.device("cpu"), torch.float32)
    assert pool.shape == (4, 6, 2) and pool.transpose(1, 2).is_contiguous()
    assert new_pool(4, (2, 3, 5), torch.device("cpu"), torch.float32).is_contiguous()  # attention K/V


def test_decoder_activations_stay_time_major(monkeypatch):
    """Every conv of a streaming step reads a time-major input, and every block hands one on."""
    model = tiny_code2wav()
    seen = []
    hooks = [m.register_forward_hook(lambda m, i, o, name=name: seen.append((name, i[0], o)))
             for name, m in model.named_modules() if isinstance(m, (CausalConv1d, CausalConvTranspose1d))]
    try:
        decoder = StreamingDecoder(model, max_slots=2)
        decoder.step(random_codes(2, 3, seed=4), [0, 1])
    finally:
        for h in hooks:
            h.remove()
    assert len(seen) == sum(1 for m in model.modules() if isinstance(m, (CausalConv1d, CausalConvTranspose1d)))
    for name, inp, out in seen:
        assert is_time_major(inp), (name, inp.stride())
        if not name.endswith("dwconv"):  # CPU's depthwise kernel answers channel-major; cuDNN does not
            assert is_time_major(out) and out.transpose(1, 2).is_contiguous(), (name, out.stride())


@pytest.mark.parametrize("batch, frames", [(4, 3), (1, 2)])
def test_step_op_counts_on_meta(batch, frames):
    """No cat, no channel-major conv and few separate bias passes in the conv decoder."""
    counts = count_step(build_meta_decoder("tiny", batch), batch, frames)
    num_layers = 2  # tiny pre-transformer; each layer cats K, V and two RoPE halves per step
    assert counts["cats"] == 4 * num_layers + 1, counts  # + the RoPE angle table
    assert counts["convs_channel_major_in"] == 0, counts
    # Bias passes left: pre_conv, 2 upsample ConvTs, 2 ConvNeXt dwconvs, decoder.0, 4 block ConvTs,
    # the output conv. Residual-unit convs: conv1's bias rides in the Snake, conv2 is a GEMM.
    assert counts["conv_bias_adds"] == 11, counts
    assert counts["by_op"]["triton.snake_beta"] == 4 * 7 + 1
    assert "cat" not in {name for name in counts["generic_by_op"]}
    # One tail index per (rate, context) pair, shared by every attention layer's K and V.
    num_conv_states = sum(1 for key in build_meta_decoder("tiny", 1).pools if not key.endswith((".k", ".v")))
    assert counts["by_op"]["aten.arange"] <= num_conv_states + 3, counts["by_op"]


def test_step_traces_without_graph_breaks():
    """`DecoderRunner.compiled_step` compiles the step whole: the buffer writes must not break it
    (Dynamo refuses an out= into a strided view, so the compiled path copies instead)."""
    model = tiny_code2wav()
    decoder = StreamingDecoder(model, max_slots=2)
    codes, slots, lengths = random_codes(2, 3, seed=1), torch.tensor([0, 1]), torch.tensor([3, 2])
    try:
        explain = torch._dynamo.explain(decoder.step_unchecked)(codes, slots, lengths)
    finally:
        torch._dynamo.reset()  # no compiled code or caches left behind for other tests
    assert explain.graph_break_count == 0, [str(b.reason)[:200] for b in explain.break_reasons]
