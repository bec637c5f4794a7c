"""Deferred norms (talker_service/model/layers.py): each layer's norm weights folded into the fused
q/k/v and gate/up weights, the residual adds done by the o_proj/down_proj GEMMs, and 1/rms applied
by the q/k-norm and SwiGLU launches. The folded stack must compute the function of the unfolded one
on every path: the decode steps over a cache store (the new route) and the prefill path (norm
launches with unit weights). fp32 on the CPU, so the two orders agree to fp32 rounding."""
from __future__ import annotations

import copy

import pytest
import torch

from talker_service.model.config import DecoderStackConfig
from talker_service.model.kv_cache import FrameKVCache
from talker_service.model.layers import DEFERRED_NORM_ENV, DecoderStack, rope_tables
from test_talker_model_support import randomize_

HIDDEN, HEADS, KV_HEADS, HEAD_DIM, LAYERS, POSITIONS = 64, 4, 2, 16, 3, 16   # a small stack


class ThisCallStore:
    """A KVStore over this call's keys/values only (a fresh prompt's prefill)."""

    def update(self, layer_idx: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return k, v


def stack_config(bias: bool = False) -> DecoderStackConfig:
    return DecoderStackConfig(hidden_size=HIDDEN, intermediate_size=96, num_hidden_layers=LAYERS,
                              num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, head_dim=HEAD_DIM,
                              vocab_size=32, num_code_groups=POSITIONS, rms_norm_eps=1e-6, rope_theta=10000.0,
                              attention_bias=bias)


def make_stacks(bias: bool = False, seed: int = 0) -> tuple[DecoderStack, DecoderStack]:
    """(fused, unfolded; fused and folded) copies of one random stack (norm weights 1 + 0.1 noise)."""
    plain = DecoderStack(stack_config(bias)).eval()
    randomize_(plain, seed)
    folded = copy.deepcopy(plain)
    plain.fuse_projections(fold_norms=False)
    folded.fuse_projections(fold_norms=True)
    return plain, folded


def run_frame(stack: DecoderStack, inputs: torch.Tensor, consume_input: bool = False):
    """The code predictor's step pattern over a FrameKVCache: positions 0-1 at once, then one at a
    time -> (post-norm hidden of every step [bs, 6, H], the cache)."""
    bs = inputs.shape[0]
    attn = stack.layers[0].self_attn
    cache = FrameKVCache(len(stack.layers), bs, attn.num_kv_heads, POSITIONS, attn.head_dim, inputs.dtype,
                         inputs.device)
    cos_table, sin_table = rope_tables(attn.head_dim, 10000.0, POSITIONS, inputs.dtype, inputs.device)
    outs = []
    for start, length in [(0, 2)] + [(p, 1) for p in range(2, 6)]:
        cache.offset = start
        x = inputs[:, start:start + length].clone() if consume_input else inputs[:, start:start + length]
        cos = cos_table[start:start + length].expand(bs, length, -1)
        sin = sin_table[start:start + length].expand(bs, length, -1)
        outs.append(stack.run(x, cos, sin, cache, None, consume_input=consume_input))
    return torch.cat(outs, dim=1), cache


@torch.no_grad()
@pytest.mark.parametrize("consume_input", [False, True])
def test_folded_decode_route_computes_the_unfolded_function(consume_input):
    plain, folded = make_stacks()
    assert folded.deferred_norm and not plain.deferred_norm
    inputs = torch.randn(3, 6, HIDDEN) * 4.0    # a residual stream far from unit rms
    before = inputs.clone()
    want, want_cache = run_frame(plain, inputs)
    got, got_cache = run_frame(folded, inputs, consume_input)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    # the cache holds the same K (normalised, rotated) and V: V is scaled by 1/rms now
    torch.testing.assert_close(got_cache.k[:, :, :, :6], want_cache.k[:, :, :, :6], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got_cache.v[:, :, :, :6], want_cache.v[:, :, :, :6], rtol=1e-5, atol=1e-5)
    assert torch.equal(inputs, before)          # the caller's tensor is never the residual stream


@torch.no_grad()
def test_the_decode_route_has_no_norm_launch_but_the_final_one(monkeypatch):
    import talker_service.model.layers as layers

    _, folded = make_stacks()
    calls = {"add_rms_norm": 0, "rms_norm": 0}

    def counting(name, fn):
        def wrapper(*args, **kwargs):
            calls[name] += 1
            return fn(*args, **kwargs)
        return wrapper

    monkeypatch.setattr(layers, "add_rms_norm", counting("add_rms_norm", layers.add_rms_norm))
    monkeypatch.setattr(layers, "rms_norm", counting("rms_norm", layers.rms_norm))
    run_frame(folded, torch.randn(2, 6, HIDDEN))
    assert calls == {"add_rms_norm": 0, "rms_norm": 5}   # the final norm of each of the 5 steps


@torch.no_grad()
def test_prefill_route_after_folding_computes_the_same_function():
    plain, folded = make_stacks(seed=3)
    x = torch.randn(2, 7, HIDDEN) * 3.0
    cos_table, sin_table = rope_tables(HEAD_DIM, 10000.0, 7, x.dtype, x.device)
    cos, sin = cos_table[None].expand(2, 7, -1), sin_table[None].expand(2, 7, -1)
    mask = torch.ones(7, 7, dtype=torch.bool).tril()[None, None]
    want = plain.run(x, cos, sin, ThisCallStore(), mask)
    got = folded.run(x, cos, sin, ThisCallStore(), mask)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    # the norm modules keep unit weights, so the layer-by-layer forward agrees too
    layer_plain, layer_folded = plain.layers[0], folded.layers[0]
    assert torch.equal(layer_folded.input_layernorm.weight, torch.ones(HIDDEN))
    torch.testing.assert_close(layer_folded(x, cos, sin, ThisCallStore(), mask),
                               layer_plain(x, cos, sin, ThisCallStore(), mask), rtol=1e-5, atol=1e-5)


@torch.no_grad()
def test_fold_is_idempotent_and_refused_with_biases():
    _, folded = make_stacks()
    weights = [t.clone() for t in folded.state_dict().values()]
    assert folded.fold_norms()
    assert all(torch.equal(a, b) for a, b in zip(weights, folded.state_dict().values()))

    plain, with_bias = make_stacks(bias=True)
    assert not with_bias.deferred_norm and not with_bias.fold_norms()
    # nothing was changed: the biased stack still has its norm weights and takes the norm route
    assert not torch.equal(with_bias.layers[0].input_layernorm.weight, torch.ones(HIDDEN))
    inputs = torch.randn(2, 6, HIDDEN)
    torch.testing.assert_close(run_frame(with_bias, inputs)[0], run_frame(plain, inputs)[0], rtol=0, atol=0)


def test_environment_switch_keeps_the_norms(monkeypatch):
    monkeypatch.setenv(DEFERRED_NORM_ENV, "0")
    stack = DecoderStack(stack_config())
    stack.fuse_projections()
    assert not stack.deferred_norm
    monkeypatch.delenv(DEFERRED_NORM_ENV)
    stack = DecoderStack(stack_config())
    stack.fuse_projections()
    assert stack.deferred_norm


def test_a_deferred_norm_needs_a_cache_store():
    _, folded = make_stacks()
    x = torch.randn(1, 2, HIDDEN)
    cos_table, sin_table = rope_tables(HEAD_DIM, 10000.0, 2, x.dtype, x.device)
    with pytest.raises(ValueError, match="cache store"):
        folded.layers[0].self_attn.attend(x, cos_table[None], sin_table[None], ThisCallStore(), None,
                                          norm_eps=1e-6)


@torch.no_grad()
def test_a_known_first_layer_projection_replaces_the_gemm(monkeypatch):
    """run(first_qkv=...) (the code predictor's table rows): layer 0 takes the given q/k/v of x, the
    folded weight's product, instead of its GEMM; the same function, and no GEMM for layer 0."""
    plain, folded = make_stacks()
    assert plain.qkv_weight(0) is None                     # not folded: no such product
    weight = folded.qkv_weight(0)
    assert weight is folded.layers[0].self_attn._qkv[0]
    inputs = torch.randn(3, 6, HIDDEN) * 4.0
    want, want_cache = run_frame(folded, inputs)
    # the same steps, layer 0's projection of each one-token step given (wrong values would show)
    bs, attn = inputs.shape[0], folded.layers[0].self_attn
    cache = FrameKVCache(LAYERS, bs, attn.num_kv_heads, POSITIONS, attn.head_dim, inputs.dtype, inputs.device)
    cos_table, sin_table = rope_tables(attn.head_dim, 10000.0, POSITIONS, inputs.dtype, inputs.device)
    projections = []
    real_project = type(attn)._project
    monkeypatch.setattr(type(attn), "_project", lambda self, x: projections.append(self.layer_idx) or real_project(self, x))
    outs = []
    for start, length in [(0, 2)] + [(p, 1) for p in range(2, 6)]:
        cache.offset = start
        x = inputs[:, start:start + length]
        qkv = None if length == 2 else torch.nn.functional.linear(x, weight)
        outs.append(folded.run(x, cos_table[start:start + length].expand(bs, length, -1),
                               sin_table[start:start + length].expand(bs, length, -1), cache, None, first_qkv=qkv))
    torch.testing.assert_close(torch.cat(outs, dim=1), want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(cache.v[:, :, :, :6], want_cache.v[:, :, :, :6], rtol=1e-5, atol=1e-5)
    # layer 0 projected only in the two-token step; every other layer in every step
    assert projections.count(0) == 1 and len(projections) == 5 * LAYERS - 4
    # a wrong projection changes the result: the given one is really used
    outs_bad = folded.run(inputs[:, 2:3], cos_table[2:3].expand(bs, 1, -1), sin_table[2:3].expand(bs, 1, -1),
                          FrameKVCache(LAYERS, bs, attn.num_kv_heads, POSITIONS, attn.head_dim, inputs.dtype,
                                       inputs.device), None, first_qkv=torch.zeros(bs, 1, weight.shape[0]))
    assert not torch.allclose(outs_bad, want[:, 2:3], atol=1e-3)


def test_a_known_first_layer_projection_needs_the_deferred_route():
    plain, _ = make_stacks()
    x = torch.randn(1, 2, HIDDEN)
    cos_table, sin_table = rope_tables(HEAD_DIM, 10000.0, 2, x.dtype, x.device)
    with pytest.raises(ValueError, match="first_qkv"):
        plain.run(x, cos_table[None].expand(1, 2, -1), sin_table[None].expand(1, 2, -1), ThisCallStore(), None,
                  first_qkv=torch.zeros(1, 2, (HEADS + 2 * KV_HEADS) * HEAD_DIM))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@torch.no_grad()
@pytest.mark.parametrize("batch", [1, 2, 3, 256])   # the few-row kernels (1-2 rows) and cuBLAS
def test_folded_decode_route_on_the_gpu_at_predictor_shapes(batch):
    """bf16, the 1.7B code predictor's shapes: the routes round differently (1/rms on the GEMM's
    output instead of its input, one rounding of the residual add instead of two), so the outputs
    agree to a few bf16 roundings, not bit for bit."""
    config = DecoderStackConfig(hidden_size=1024, intermediate_size=3072, num_hidden_layers=5, num_attention_heads=16,
                                num_key_value_heads=8, head_dim=128, vocab_size=2048, num_code_groups=16,
                                rms_norm_eps=1e-6, rope_theta=1000000.0, attention_bias=False)
    plain = DecoderStack(config).eval()
    randomize_(plain, 7)
    plain = plain.to("cuda", torch.bfloat16)
    folded = copy.deepcopy(plain)
    plain.fuse_projections(fold_norms=False)
    folded.fuse_projections(fold_norms=True)
    inputs = torch.randn(batch, 6, 1024, device="cuda", dtype=torch.bfloat16) * 4.0
    want, _ = run_frame(plain, inputs)
    got, _ = run_frame(folded, inputs, consume_input=True)
    scale = want.float().abs().max().item()
    assert (got.float() - want.float()).abs().max().item() <= 0.05 * scale
    assert (got.float() - want.float()).abs().mean().item() <= 0.01 * want.float().abs().mean().item()
