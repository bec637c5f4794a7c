"""Launch economy of the decoder's pre-transformer at a 1-frame step (the first chunk's graph is
bound by its number of kernels): one GEMM for q/k/v and one for gate/up, the norm and the SwiGLU as
single ops, one K/V pool per layer; and the concatenated weights follow edits of the originals."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from test_decoder_fixtures import random_codes, single_thread, tiny_code2wav  # noqa: F401 (single_thread: autouse fixture)
from triton_support import OpCounter
from vocoder_service.codec import StreamingDecoder
from vocoder_service.codec.derived_weights import ConcatLinear


def test_pre_transformer_ops_per_one_frame_step():
    model = tiny_code2wav()
    layers = len(model.pre_transformer.layers)
    decoder = StreamingDecoder(model, max_slots=2)
    codes = random_codes(1, 3, seed=4)
    decoder.step(codes[:, :, :2], [0])
    hidden = torch.randn(1, 1, model.config.latent_dim)
    from vocoder_service.codec.stream_state import StepState

    state = StepState(decoder.pools, torch.tensor([0]), torch.tensor([1]), decoder.positions[:1].clone())
    with torch.no_grad(), OpCounter() as ops:
        model.pre_transformer(hidden, state)
    gemms = ops.counts["aten.mm"] + ops.counts["aten.addmm"]
    assert gemms == 4 * layers + 2, ops.counts            # qkv, o, gate_up, down per layer; in/out proj
    assert ops.counts["qwen3tts.rms_norm"] == 2 * layers + 1
    assert ops.counts["qwen3tts.silu_mul"] == layers
    assert ops.counts["aten.index_copy_"] == layers and ops.counts["aten.index_select"] == layers


def test_concat_linear_follows_weight_edits_and_matches_separate_projections():
    torch.manual_seed(0)
    a, b = nn.Linear(4, 3), nn.Linear(4, 5)
    fused = ConcatLinear()
    x = torch.randn(2, 4)
    with torch.no_grad():
        assert torch.allclose(fused(x, [a, b]), torch.cat([a(x), b(x)], dim=-1), atol=1e-6)
        b.weight.mul_(3)
        assert torch.allclose(fused(x, [a, b]), torch.cat([a(x), b(x)], dim=-1), atol=1e-6)
    with pytest.raises(ValueError, match="every projection has a bias or none"):
        ConcatLinear()(x, [a, nn.Linear(4, 2, bias=False)])
