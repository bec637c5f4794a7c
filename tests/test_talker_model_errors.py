"""Bad checkpoints and configs fail with a CheckpointError that names the problem."""
from __future__ import annotations

import copy
import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from checkpoint.configs import model_config
from checkpoint.errors import CheckpointError
from talker_service.model import ModelSpecialIds, TalkerConfig, TalkerModel
from test_talker_model_support import official_model, save_official


@pytest.fixture(scope="module")
def checkpoint_dir(tmp_path_factory):
    config = model_config("voice_design", "tiny")
    return save_official(official_model(config, seed=7), config, tmp_path_factory.mktemp("talker_err"))


def rewrite(src, dst, edit_tensors=None, edit_config=None):
    dst.mkdir(parents=True, exist_ok=True)
    tensors = load_file(str(src / "model.safetensors"))
    config = json.loads((src / "config.json").read_text())
    if edit_tensors:
        edit_tensors(tensors)
    if edit_config:
        edit_config(config)
    save_file(tensors, str(dst / "model.safetensors"))
    (dst / "config.json").write_text(json.dumps(config))
    return dst


def load(directory):
    return TalkerModel.from_checkpoint(directory, device="cpu", dtype=torch.float32, max_slots=1, max_seq_len=16)


def test_loads_clean(checkpoint_dir):
    model = load(checkpoint_dir)
    assert model.cache.k.shape == (2, 1, 2, 16, 16)


def test_missing_tensor_is_named(checkpoint_dir, tmp_path):
    name = "talker.model.layers.1.self_attn.k_norm.weight"
    bad = rewrite(checkpoint_dir, tmp_path, edit_tensors=lambda t: t.pop(name))
    with pytest.raises(CheckpointError, match=f"missing tensor '{name}'"):
        load(bad)


def test_wrong_shape_is_named(checkpoint_dir, tmp_path):
    name = "talker.code_predictor.lm_head.3.weight"
    bad = rewrite(checkpoint_dir, tmp_path, edit_tensors=lambda t: t.__setitem__(name, torch.zeros(2048, 7)))
    with pytest.raises(CheckpointError, match=rf"wrong shape for '{name}'.*expected \(2048, 32\), got \(2048, 7\)"):
        load(bad)


def test_unexpected_tensor_is_named(checkpoint_dir, tmp_path):
    name = "talker.model.layers.0.self_attn.q_proj.bias"
    bad = rewrite(checkpoint_dir, tmp_path, edit_tensors=lambda t: t.__setitem__(name, torch.zeros(64)))
    with pytest.raises(CheckpointError, match=f"unexpected tensor '{name}'"):
        load(bad)


def test_config_mismatch_surfaces_as_shape_error(checkpoint_dir, tmp_path):
    bad = rewrite(checkpoint_dir, tmp_path, edit_config=lambda c: c["talker_config"].__setitem__("intermediate_size", 64))
    with pytest.raises(CheckpointError, match="talker.model.layers.0.mlp.gate_proj.weight"):
        load(bad)


def test_missing_files_are_named(tmp_path):
    with pytest.raises(CheckpointError, match="config.json"):
        load(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps(model_config("base", "tiny")))
    with pytest.raises(CheckpointError, match="model.safetensors"):
        load(tmp_path)


@pytest.mark.parametrize("edit, message", [
    (lambda t: t.pop("num_hidden_layers"), "missing key talker_config.num_hidden_layers"),
    (lambda t: t.__setitem__("use_sliding_window", True), "use_sliding_window"),
    (lambda t: t.__setitem__("rope_scaling", {"rope_type": "yarn", "factor": 4.0}), "rope_type='yarn'"),
    (lambda t: t.__setitem__("hidden_act", "gelu"), "hidden_act='gelu'"),
    (lambda t: t.__setitem__("num_key_value_heads", 3), "not a multiple of num_key_value_heads=3"),
    (lambda t: t["code_predictor_config"].__setitem__("layer_types", ["sliding_attention"] * 2), "layer_types"),
    (lambda t: t.pop("code_predictor_config"), "code_predictor_config"),
])
def test_unsupported_config_is_refused(edit, message):
    talker = copy.deepcopy(model_config("base", "tiny")["talker_config"])
    edit(talker)
    with pytest.raises(CheckpointError, match=message):
        TalkerConfig.from_dict(talker)


def test_special_ids_from_official_config():
    ids = ModelSpecialIds.from_config(model_config("custom_voice", "tiny"))
    assert (ids.tts_pad, ids.tts_bos, ids.tts_eos) == (151671, 151672, 151673)
    assert (ids.codec_pad, ids.codec_bos, ids.codec_eos) == (2148, 2149, 2150)
    assert (ids.codec_think, ids.codec_nothink, ids.codec_think_bos, ids.codec_think_eos) == (2154, 2155, 2156, 2157)
    assert ids.suppressed_range == (2048, 3072)
    assert ids.speaker_ids["eric"] == 2875 and ids.speaker_dialects["eric"] == "sichuan_dialect"
    assert ids.language_ids["beijing_dialect"] == 2074
    config = model_config("custom_voice", "tiny")
    del config["talker_config"]["codec_eos_token_id"]
    with pytest.raises(CheckpointError, match="talker_config.codec_eos_token_id"):
        ModelSpecialIds.from_config(config)
