"""The talker frame step's kernel-launch budget (counted on the meta device, see
benchmarks/count_talker_launches.py) and the fusions that keep it there: fused q/k/v and gate/up
GEMMs give the same outputs as the separate projections and add no memory."""
from __future__ import annotations

import sys
from pathlib import Path

import torch

from talker_service.model.config import DecoderStackConfig
from talker_service.model.kv_cache import causal_mask
from talker_service.model.layers import DecoderLayer, DecoderStack, fold_gqa_mask, grouped_attention

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import count_talker_launches  # noqa: E402

# 1.7B depth at batch 1: 8134 launches before the fusions of 2026-11-22, 1467 after (see
# benchmarks/results/2026-11-22-talker-launches.md), 1199 on 2026-11-25: the q/k-norm + RoPE launch
# writes K/V into the caches (-150 copy_, -56 index_put_, +2 arange: the predictor's per-frame write
# indices) and the temperature and the greedy select moved into warp_pick (3 launches per sampling,
# -64). 1083 after the cuts of issue #11 item 3 (the same at batch 64): the attention lengths once
# per step (-27 add), the frame's noise keys in one qwen3tts.noise_keys launch (-66 net: 67
# bitwise/shift/mul/add/arange ops), the sampling table in three dtype tables (-9 index_select), and
# per-frame constants built once at init (-14: the predictor's first-step mask, folded for GQA, and
# position table, embed_frame's residual offsets, the EOS-blocked suppression mask).
# 1069 on 2026-11-26: the predictor's codec tables are projected at init, so small_to_mtp_projection
# of each later step's embedding is a table lookup (-14 addmm).
# 864 with deferred norms (talker_service/model/layers.py): the norm weights folded into the q/k/v
# and gate/up GEMMs, 1/rms applied by the q/k-norm and SwiGLU launches, the residual adds done by the
# o_proj/down_proj GEMMs in place (-206 add_rms_norm; +1 clone: the talker's input, which the step
# does not own, becomes the residual stream as a copy).
# 794 with the code predictor's one-query steps in one launch each (kernels/norm_rope_attend.py): their
# q/k-norm + RoPE + KV write and slot decode attention (-70; the two-query first step and the
# talker's layers, over the long slot cache, keep both).
# 794 still with layer 0's q/k/v of the predictor's steps 2..15 looked up in tables built at init
# (CodePredictor._qkv_tables): -14 mm, +14 index (a gather instead of a GEMM, same launch count).
# The bound leaves a little room, no more.
MAX_LAUNCHES_PER_FRAME = 800
NUM_SAMPLINGS = 16               # codebook 0 (talker) + codebooks 1..15 (code predictor)
NUM_LAYER_PASSES = 28 + 15 * 5   # talker layers + 15 code-predictor passes of 5 layers
NUM_FIRST_STEP_PASSES = 5        # the code predictor's first pass: two queries a row (positions 0 and 1)
NUM_TWO_LAUNCH_PASSES = 28 + NUM_FIRST_STEP_PASSES   # the talker's layers and that first pass


def test_frame_step_stays_within_its_launch_budget():
    report = count_talker_launches.count("1b7", batch=1, context_len=256, candidate_k=64)
    assert report["launches_per_frame"] <= MAX_LAUNCHES_PER_FRAME, report["by_op"]
    # deferred norms: no norm launch inside a stack, each residual add is its GEMM's epilogue (o_proj
    # and down_proj: addmm_ on the residual stream in place), only each stack's final norm stands alone
    assert "qwen3tts.add_rms_norm" not in report["by_op"]
    assert report["by_op"]["aten.addmm_"] == 2 * NUM_LAYER_PASSES
    assert report["by_op"]["qwen3tts.rms_norm"] == 1 + 15
    assert report["by_op"]["qwen3tts.silu_mul"] == NUM_LAYER_PASSES
    # each sampling: argmax (greedy), topk of the raw logits, warp_pick (temperature, top-k/top-p masks,
    # Gumbel-max, greedy select); no ones_like/where/div for the temperature, no where for the select
    assert report["by_op"]["qwen3tts.warp_pick"] == NUM_SAMPLINGS
    assert report["by_op"]["aten.topk"] == NUM_SAMPLINGS
    assert report["by_op"]["aten.argmax"] == NUM_SAMPLINGS
    assert "aten.ones_like" not in report["by_op"]
    # only penalize_and_mask's: the repetition penalty (2) and the choice of the EOS-blocked mask (1)
    assert report["by_op"]["aten.where"] == 3
    assert report["by_op"]["aten.div"] == 1     # only penalize_and_mask's logits / penalty
    # q/k norm + RoPE, the K/V cache writes and the attention: one launch per one-query predictor pass;
    # the talker's layers and the predictor's two-query first pass write in one launch and attend in
    # another; no copy of its own
    assert report["by_op"]["qwen3tts.norm_rope_attend"] == NUM_LAYER_PASSES - NUM_TWO_LAUNCH_PASSES
    assert report["by_op"]["qwen3tts.qk_norm_rope_write_kv"] == NUM_TWO_LAUNCH_PASSES
    assert "qwen3tts.qk_norm_rope" not in report["by_op"]
    assert "aten.copy_" not in report["by_op"]                 # were 2 x 75: the predictor's frame cache
    assert report["by_op"]["aten.index_put_"] == 1   # the sampling history's; 2 x 28 more were the slot cache's
    # the talker in place over the slot cache (28), and every code-predictor pass over its frame cache
    # (15 x 5; the first step's query 0 is v0 itself): cuDNN's SDPA for <= 16 keys cost ~49 us a call
    # at batch 256 on an H100 (72 us with the first step's mask)
    assert report["by_op"]["qwen3tts.slot_decode_attention"] == NUM_TWO_LAUNCH_PASSES
    # the frame's 16 noise keys: one qwen3tts.noise_keys launch instead of ~65 integer ops of hash_noise
    assert report["by_op"]["qwen3tts.noise_keys"] == 1
    for op in ("aten.bitwise_xor", "aten.__rshift__", "aten.bitwise_and", "aten.bitwise_or"):
        assert op not in report["by_op"], op
    # the sampling rows: one gather per dtype table of SlotSamplingTable, not one per parameter (were 12)
    assert report["by_op"]["aten.index_select"] == 3
    # the talker's attention lengths (positions + 1) are one add per step, not one per layer (were 28);
    # the other two are embed_frame's (offset codes, c0 embedding + residual sum)
    assert report["by_op"]["aten.add"] == 3
    # constants are built at init, not per frame: only FrameKVCache's batch rows remain (arange(bs));
    # the predictor's first-step mask comes folded (were 5 clones of it, one per layer, and arange/le)
    assert report["by_op"]["aten.arange"] == 1
    assert "aten.le" not in report["by_op"] and "aten.eq" not in report["by_op"]
    # the first predictor step's attention output is stacked ([v0, query 1]) in o_proj's layout: a
    # stack instead of its clone (were 5), 2 more are the frame's codes and the predictor's input;
    # the one clone is the talker's input made the residual stream (the predictor's inputs are its own)
    assert report["by_op"]["aten.clone"] == 1 and report["by_op"]["aten.stack"] == 5 + 2
    assert "sdpa" not in report["by_op"]
    # qkv, gate_up + 16 heads, less layer 0's qkv of the predictor's 14 one-query steps (table rows)
    assert report["by_op"]["aten.mm"] == 2 * NUM_LAYER_PASSES + 16 - 14
    # small_to_mtp_projection runs once a frame (the first step's two inputs); the 14 later inputs
    # are rows of the projected tables
    assert report["by_op"]["aten.addmm"] == 1


class _KV:
    def update(self, layer_idx, k, v):
        return k, v


def small_config(num_layers: int = 1) -> DecoderStackConfig:
    return DecoderStackConfig(hidden_size=64, intermediate_size=96, num_hidden_layers=num_layers,
                              num_attention_heads=4, num_key_value_heads=2, head_dim=16, vocab_size=32,
                              num_code_groups=16, rms_norm_eps=1e-6, rope_theta=10000.0, attention_bias=False)


def test_fused_projections_match_separate_ones_and_share_their_storage():
    config = small_config()
    torch.manual_seed(0)
    layer = DecoderLayer(config, 0).eval()
    x = torch.randn(2, 3, 64)
    cos, sin = torch.ones(2, 3, 16), torch.zeros(2, 3, 16)
    with torch.no_grad():
        separate = layer(x, cos, sin, _KV(), None)
        layer.self_attn.fuse_projections()
        layer.mlp.fuse_projections()
        fused = layer(x, cos, sin, _KV(), None)
    torch.testing.assert_close(fused, separate, rtol=1e-5, atol=1e-6)
    qkv_weight, _ = layer.self_attn._qkv
    gate_up_weight, _ = layer.mlp._gate_up
    assert layer.self_attn.k_proj.weight.untyped_storage().data_ptr() == qkv_weight.untyped_storage().data_ptr()
    assert layer.mlp.up_proj.weight.untyped_storage().data_ptr() == gate_up_weight.untyped_storage().data_ptr()
    assert qkv_weight.shape == (4 * 16 + 2 * 2 * 16, 64) and gate_up_weight.shape == (2 * 96, 64)


def test_stack_with_residual_adds_fused_into_norms_equals_layer_by_layer():
    torch.manual_seed(1)
    stack = DecoderStack(small_config(num_layers=3)).eval()
    with torch.no_grad():
        for norm in [stack.norm] + [m for layer in stack.layers for m in (layer.input_layernorm,
                                                                            layer.post_attention_layernorm)]:
            norm.weight.uniform_(0.5, 1.5)   # not all ones: a norm applied to the wrong sum would show
        x = torch.randn(2, 3, 64)
        cos, sin = torch.randn(2, 3, 16), torch.randn(2, 3, 16)
        expected = x
        for layer in stack.layers:
            expected = layer(expected, cos, sin, _KV(), None)
        expected = stack.norm(expected)
        assert torch.equal(stack.run(x, cos, sin, _KV(), None), expected)
        stack.fuse_projections()
        torch.testing.assert_close(stack.run(x, cos, sin, _KV(), None), expected, rtol=1e-5, atol=1e-6)


def test_grouped_attention_takes_a_mask_folded_once():
    """The code predictor folds its first step's causal mask once (init_runtime) instead of in each of
    its 5 layers every frame: a pre-folded mask gives the same attention bit for bit, and a broadcast
    [.., 1, S] mask is still folded."""
    gen = torch.Generator().manual_seed(2)
    q, k, v = torch.randn(3, 8, 2, 16, generator=gen), torch.randn(3, 2, 2, 16, generator=gen), torch.randn(3, 2, 2, 16, generator=gen)
    mask = causal_mask(0, 2, "cpu")
    folded = fold_gqa_mask(mask, 4, 2)
    assert folded.shape == (1, 1, 8, 2) and torch.equal(folded[0, 0], mask[0, 0].repeat(4, 1))
    assert torch.equal(grouped_attention(q, k, v, folded), grouped_attention(q, k, v, mask))
    one_row = torch.tensor([[[[True, False]]]])
    assert torch.equal(grouped_attention(q, k, v, one_row), grouped_attention(q, k, v, one_row.expand(1, 1, 2, 2)))


def test_frame_constants_are_built_once_and_equal_the_per_frame_ones():
    """The predictor's first-step mask and position table and embed_frame's residual offsets are built
    at init_runtime; each equals what the frame step used to build every frame."""
    from checkpoint.configs import model_config
    from talker_service.model import TalkerConfig
    from talker_service.model.talker import build_empty

    config = TalkerConfig.from_dict(model_config("custom_voice", "1b7")["talker_config"])
    model = build_empty(config, torch.device("meta"), torch.bfloat16)
    model.init_runtime(max_slots=2, max_seq_len=8)
    predictor, cp = model.code_predictor, config.code_predictor
    for name, built, expected in (
        ("positions", predictor._positions, torch.arange(cp.num_code_groups)),
        ("lengths", predictor._lengths, torch.arange(1, cp.num_code_groups + 1)),
        ("residual offsets", model._residual_offsets, torch.arange(cp.num_code_groups - 1) * cp.vocab_size),
    ):
        assert built.device.type == "meta" and built.shape == expected.shape and built.dtype == expected.dtype, name
    cpu = build_empty(config, torch.device("cpu"), torch.bfloat16)
    cpu.code_predictor.init_runtime()
    assert torch.equal(cpu.code_predictor._lengths, torch.arange(1, cp.num_code_groups + 1))
    assert torch.equal(cpu.code_predictor._positions, torch.arange(cp.num_code_groups))
