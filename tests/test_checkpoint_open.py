"""open_checkpoint: validation up front with errors that name the problem; lazy, prefixed tensor reads."""
from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from checkpoint.configs import generation_config
from checkpoint.errors import CheckpointError
from checkpoint.files import resolve_model_dir
from checkpoint.model_files import open_checkpoint
from checkpoint.safetensors_io import read_header


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    return resolve_model_dir("tiny-base", cache_dir=tmp_path_factory.mktemp("cache"))


@pytest.fixture
def ckpt_dir(pristine, tmp_path):
    """A private copy to break."""
    return shutil.copytree(pristine, tmp_path / "ckpt")


def _edit_json(path, **changes):
    value = json.loads(path.read_text())
    value.update(changes)
    path.write_text(json.dumps(value))


def test_opens_the_tiny_checkpoint(pristine):
    ckpt = open_checkpoint(pristine)
    assert (ckpt.tts_model_type, ckpt.tts_model_size) == ("base", "1b7")
    assert ckpt.config["talker_config"]["hidden_size"] == 48
    assert ckpt.generation_config == generation_config()
    assert ckpt.speech_tokenizer_config()["model_type"] == "qwen3_tts_tokenizer_12hz"
    talker = ckpt.tensors("talker.")
    assert talker and all(k.startswith("talker.") for k in talker)
    assert talker["talker.codec_head.weight"].dtype == torch.bfloat16
    assert set(ckpt.tensors()) == set(talker) | set(ckpt.tensors("speaker_encoder."))
    decoder = ckpt.speech_tokenizer_tensors("decoder.")
    assert decoder["decoder.decoder.6.conv.weight"].shape == (1, 3, 7)
    assert not any(k.startswith("encoder.") for k in decoder)
    assert ckpt.text_tokenizer()("<|im_start|>")["input_ids"] == [151644]


def test_opens_by_tiny_name(tmp_path):
    assert open_checkpoint("tiny-voice-design", cache_dir=tmp_path).tts_model_type == "voice_design"


@pytest.mark.parametrize(
    "relative", ["config.json", "vocab.json", "generation_config.json", "speech_tokenizer/preprocessor_config.json",
                 "speech_tokenizer/config.json"],
)
def test_missing_file_names_the_path(ckpt_dir, relative):
    (ckpt_dir / relative).unlink()
    with pytest.raises(CheckpointError, match=f"missing file: .*{relative}"):
        open_checkpoint(ckpt_dir)


def test_missing_weights_name_the_file(ckpt_dir):
    (ckpt_dir / "speech_tokenizer/model.safetensors").unlink()
    with pytest.raises(CheckpointError, match=r"missing file: .*speech_tokenizer/model\.safetensors"):
        open_checkpoint(ckpt_dir)


def test_unknown_tts_model_type_lists_valid_ones(ckpt_dir):
    _edit_json(ckpt_dir / "config.json", tts_model_type="singing")
    with pytest.raises(CheckpointError, match=r"unknown tts_model_type 'singing'.*'base', 'custom_voice', 'voice_design'"):
        open_checkpoint(ckpt_dir)


def test_25hz_tokenizer_is_refused(ckpt_dir):
    _edit_json(ckpt_dir / "config.json", tokenizer_type="qwen3_tts_tokenizer_25hz")
    with pytest.raises(CheckpointError, match="tokenizer_type 'qwen3_tts_tokenizer_25hz' is not supported"):
        open_checkpoint(ckpt_dir)
    _edit_json(ckpt_dir / "config.json", tokenizer_type="qwen3_tts_tokenizer_12hz")
    _edit_json(ckpt_dir / "speech_tokenizer/config.json", model_type="qwen3_tts_tokenizer_25hz")
    with pytest.raises(CheckpointError, match="not the 12 Hz speech tokenizer"):
        open_checkpoint(ckpt_dir)


def test_wrong_shape_names_tensor_expected_and_got(ckpt_dir):
    path = ckpt_dir / "model.safetensors"
    tensors = load_file(str(path))
    tensors["talker.codec_head.weight"] = torch.zeros(3071, 48, dtype=torch.bfloat16)
    save_file(tensors, str(path))
    with pytest.raises(CheckpointError, match=r"wrong shape for tensor 'talker.codec_head.weight': expected \(3072, 48\), got \(3071, 48\)"):
        open_checkpoint(ckpt_dir)


def test_missing_tensor_is_named(ckpt_dir):
    path = ckpt_dir / "speech_tokenizer/model.safetensors"
    tensors = load_file(str(path))
    del tensors["decoder.pre_conv.conv.bias"]
    save_file(tensors, str(path))
    with pytest.raises(CheckpointError, match=r"missing tensor 'decoder.pre_conv.conv.bias' \(expected shape \(32,\)\)"):
        open_checkpoint(ckpt_dir)


def test_config_that_disagrees_with_weights_is_caught(ckpt_dir):
    config = json.loads((ckpt_dir / "config.json").read_text())
    config["talker_config"]["num_hidden_layers"] = 5  # 3 layers x 11 tensors too many
    (ckpt_dir / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError) as info:
        open_checkpoint(ckpt_dir)
    message = str(info.value)
    assert "missing tensor 'talker.model.layers.2.self_attn.q_proj.weight' (expected shape (64, 48))" in message
    assert message.count("missing tensor") == 20 and message.endswith("(+13 more)")


def test_extra_tensors_are_tolerated(ckpt_dir, caplog):
    path = ckpt_dir / "model.safetensors"
    tensors = load_file(str(path))
    tensors["talker.future_head.weight"] = torch.zeros(2, 2, dtype=torch.bfloat16)
    save_file(tensors, str(path))
    open_checkpoint(ckpt_dir)
    assert "talker.future_head.weight" in caplog.text


def test_sharded_weights_load_and_a_missing_shard_is_named(ckpt_dir):
    path = ckpt_dir / "model.safetensors"
    tensors = load_file(str(path))
    path.unlink()
    names = sorted(tensors)
    shards = {"model-00001-of-00002.safetensors": names[::2], "model-00002-of-00002.safetensors": names[1::2]}
    for shard, shard_names in shards.items():
        save_file({n: tensors[n] for n in shard_names}, str(ckpt_dir / shard))
    weight_map = {n: shard for shard, shard_names in shards.items() for n in shard_names}
    (ckpt_dir / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    loaded = open_checkpoint(ckpt_dir).tensors()
    assert set(loaded) == set(tensors)
    assert all(torch.equal(loaded[n], tensors[n]) for n in names)
    (ckpt_dir / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(CheckpointError, match=r"missing file: shard .*model-00002-of-00002\.safetensors"):
        open_checkpoint(ckpt_dir)


def test_generation_config_defaults_fill_missing_keys(ckpt_dir):
    (ckpt_dir / "generation_config.json").write_text(json.dumps({"temperature": 0.7}))
    gen = open_checkpoint(ckpt_dir).generation_config
    assert gen == {**generation_config(), "temperature": 0.7}


def test_invalid_json_and_corrupt_header_are_named(ckpt_dir):
    (ckpt_dir / "config.json").write_text("{not json")
    with pytest.raises(CheckpointError, match=r"config\.json is not valid JSON"):
        open_checkpoint(ckpt_dir)
    (ckpt_dir / "bad.safetensors").write_bytes(b"\xff" * 16)
    with pytest.raises(CheckpointError, match="corrupt safetensors file"):
        read_header(ckpt_dir / "bad.safetensors")
