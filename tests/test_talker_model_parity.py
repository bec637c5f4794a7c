"""Parity of our talker + code predictor with the official Qwen3TTSForConditionalGeneration
(tiny config, same random weights saved in the official layout, fp32 CPU)."""
from __future__ import annotations

import pytest
import torch

from checkpoint.configs import model_config
from kernels.hash_noise import group_keys
from talker_service.model import RowSampling
from test_talker_model_support import max_diff, tiny_pair

pytestmark = pytest.mark.oracle
TOL = 1e-5


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    official, ours, _ = tiny_pair(tmp_path_factory.mktemp("talker_cv"), "custom_voice", seed=0)
    return official, ours


def greedy_rows(bs: int) -> RowSampling:
    return RowSampling(torch.ones(bs), torch.zeros(bs, dtype=torch.long), torch.ones(bs), torch.zeros(bs, dtype=torch.bool))


def zeros(bs: int) -> torch.Tensor:
    return torch.zeros(bs, dtype=torch.long)


@torch.no_grad()
def test_embeddings_match(pair):
    official, ours = pair
    talker = official.talker
    text_ids = torch.tensor([[151644, 77091, 198, 9707, 151671, 151672, 151673, 3]])
    assert max_diff(ours.embed_text(text_ids), talker.text_projection(talker.model.text_embedding(text_ids))) <= TOL
    codec_ids = torch.tensor([0, 2047, 2148, 2149, 2150, 2155, 3066])
    assert max_diff(ours.embed_codec(codec_ids), talker.model.codec_embedding(codec_ids)) == 0.0
    codes = torch.randint(0, 2048, (3, 5, 16))
    expected = talker.model.codec_embedding(codes[..., 0]) + sum(
        talker.code_predictor.model.codec_embedding[i - 1](codes[..., i]) for i in range(1, 16))
    assert ours.embed_frame(codes).shape == (3, 5, 48)
    assert max_diff(ours.embed_frame(codes), expected) <= TOL


@torch.no_grad()
def test_prefill_and_decode_steps_match_official_talker(pair):
    from transformers import DynamicCache

    official, ours = pair
    torch.manual_seed(10)
    prompt = torch.randn(11, 48)
    hidden, logits = ours.prefill(prompt, slot=3)
    cache = DynamicCache()
    out = official.talker.model(inputs_embeds=prompt[None], past_key_values=cache, use_cache=True)
    ref_hidden = out.last_hidden_state[0, -1]
    assert max_diff(hidden, ref_hidden) <= TOL
    assert max_diff(logits, official.talker.codec_head(ref_hidden)) <= TOL
    assert logits.abs().max() > 1.0  # weights scaled so the tolerance is meaningful
    for step in range(6):
        embeds = torch.randn(1, 48)
        hidden, logits = ours.decode_step(embeds, torch.tensor([3]), torch.tensor([11 + step]))
        out = official.talker.model(inputs_embeds=embeds[None], past_key_values=cache, use_cache=True)
        ref_hidden = out.last_hidden_state[0, -1]
        assert max_diff(hidden[0], ref_hidden) <= TOL, f"step {step}"
        assert max_diff(logits[0], official.talker.codec_head(ref_hidden)) <= TOL, f"step {step}"


@torch.no_grad()
def test_code_predictor_greedy_matches_official_generate(pair):
    official, ours = pair
    torch.manual_seed(11)
    past_hidden = torch.randn(4, 48)
    c0 = torch.tensor([0, 17, 1999, 2047])
    codes, logits = ours.predict_residuals(past_hidden, c0, greedy_rows(4), group_keys(zeros(4), zeros(4), 1, 15),
                                           return_logits=True)
    predictor = official.talker.code_predictor
    inputs = torch.stack((past_hidden, official.talker.model.codec_embedding(c0)), dim=1)
    ref = predictor.generate(inputs_embeds=inputs, max_new_tokens=15, do_sample=False,
                             output_logits=True, return_dict_in_generate=True)
    assert torch.equal(codes, ref.sequences)
    assert max_diff(logits, torch.stack(ref.logits, dim=1)) <= TOL
    assert codes.shape == (4, 15) and int(codes.max()) < 2048
    # steps 2..15 took layer 0's q/k/v from the tables (CodePredictor._qkv_tables), and the GEMM
    # route gives the same
    assert ours.code_predictor._qkv_tables is not None and len(ours.code_predictor._qkv_tables) == 14


@torch.no_grad()
def test_code_predictor_qkv_tables_match_the_gemm(pair, monkeypatch):
    _, ours = pair
    from talker_service.model.predictor import QKV_TABLES_ENV
    torch.manual_seed(12)
    past_hidden = torch.randn(3, 48)
    c0 = torch.tensor([5, 700, 2046])
    rows, keys = greedy_rows(3), group_keys(zeros(3), zeros(3), 1, 15)
    predictor = ours.code_predictor
    with_tables = ours.predict_residuals(past_hidden, c0, rows, keys, return_logits=True)
    monkeypatch.setenv(QKV_TABLES_ENV, "0")
    predictor.init_runtime()
    try:
        assert predictor._qkv_tables is None
        without = ours.predict_residuals(past_hidden, c0, rows, keys, return_logits=True)
    finally:
        monkeypatch.delenv(QKV_TABLES_ENV)
        predictor.init_runtime()
    assert predictor._qkv_tables is not None
    assert torch.equal(with_tables[0], without[0])
    assert max_diff(with_tables[1], without[1]) <= TOL


@torch.no_grad()
def test_identity_projection_when_widths_match(tmp_path):
    """0.6B layout: predictor width == talker width, small_to_mtp_projection has no tensors."""
    config = model_config("base", "tiny")
    config["talker_config"]["hidden_size"] = config["talker_config"]["code_predictor_config"]["hidden_size"]
    config["speaker_encoder_config"]["enc_dim"] = config["talker_config"]["hidden_size"]
    official, ours, directory = tiny_pair(tmp_path, config=config, seed=3)
    assert isinstance(ours.code_predictor.small_to_mtp_projection, torch.nn.Identity)
    past_hidden = torch.randn(2, 32)
    c0 = torch.tensor([3, 2000])
    codes = ours.predict_residuals(past_hidden, c0, greedy_rows(2), group_keys(zeros(2), zeros(2), 1, 15))
    inputs = torch.stack((past_hidden, official.talker.model.codec_embedding(c0)), dim=1)
    ref = official.talker.code_predictor.generate(inputs_embeds=inputs, max_new_tokens=15, do_sample=False)
    assert torch.equal(codes, ref)
    assert ours.code_predictor._qkv_tables is not None   # built from the unprojected tables
