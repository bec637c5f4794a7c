"""Loading the official speech-tokenizer layout: locations, names, shapes and errors."""
from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from checkpoint.configs import speech_tokenizer_config
from checkpoint.errors import CheckpointError
from test_decoder_fixtures import single_thread, tiny_decoder_dir  # noqa: F401 (single_thread: autouse fixture)
from vocoder_service.codec import Code2Wav, DecoderConfig

pytestmark = pytest.mark.oracle


@pytest.fixture()
def tiny_copy(tmp_path):
    """A writable copy of the tiny speech tokenizer saved by the official classes."""
    target = tmp_path / "st"
    shutil.copytree(tiny_decoder_dir(), target)
    return target


def _edit_tensors(directory, edit):
    path = directory / "model.safetensors"
    tensors = load_file(str(path))
    edit(tensors)
    save_file(tensors, str(path))


def test_loads_from_a_full_model_dir_and_from_the_subdir(tmp_path, tiny_copy):
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    (model_dir / "config.json").write_text(json.dumps({"model_type": "qwen3_tts"}))
    shutil.copytree(tiny_copy, model_dir / "speech_tokenizer")
    codes = torch.randint(0, 2048, (1, 16, 3))
    a = Code2Wav.from_pretrained(model_dir).decode(codes)
    b = Code2Wav.from_pretrained(tiny_copy).decode(codes)
    assert torch.equal(a, b)


def test_main_model_dir_without_speech_tokenizer_is_named(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen3_tts"}))
    with pytest.raises(CheckpointError, match="needs a speech_tokenizer/ subfolder"):
        Code2Wav.from_pretrained(tmp_path)


def test_missing_files_are_named(tiny_copy):
    (tiny_copy / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match=r"missing file: .*model\.safetensors"):
        Code2Wav.from_pretrained(tiny_copy)
    (tiny_copy / "config.json").unlink()
    with pytest.raises(CheckpointError, match=r"missing file: .*config\.json"):
        Code2Wav.from_pretrained(tiny_copy)


def test_missing_tensor_is_named(tiny_copy):
    _edit_tensors(tiny_copy, lambda t: t.pop("decoder.decoder.3.block.2.conv1.conv.bias"))
    with pytest.raises(CheckpointError, match=r"missing tensor 'decoder\.decoder\.3\.block\.2\.conv1\.conv\.bias'"):
        Code2Wav.from_pretrained(tiny_copy)


def test_wrong_shape_is_named(tiny_copy):
    def edit(tensors):
        tensors["decoder.pre_transformer.layers.1.self_attn.k_proj.weight"] = torch.zeros(3, 16)

    _edit_tensors(tiny_copy, edit)
    with pytest.raises(CheckpointError, match=r"wrong shape for 'decoder\.pre_transformer\.layers\.1\.self_attn\.k_proj\.weight'.*got \(3, 16\)"):
        Code2Wav.from_pretrained(tiny_copy)


def test_config_without_codebook_dim_is_named():
    raw = speech_tokenizer_config("tiny")["decoder_config"]
    raw.pop("codebook_dim")
    with pytest.raises(CheckpointError, match="missing required key 'codebook_dim'"):
        DecoderConfig.from_dict(raw)


def test_rope_theta_from_transformers5_rope_parameters():
    raw = speech_tokenizer_config("tiny")["decoder_config"]
    raw.pop("rope_theta")
    raw["rope_parameters"] = {"rope_type": "default", "rope_theta": 5000.0}
    assert DecoderConfig.from_dict(raw).rope_theta == 5000.0


def test_full_size_names_and_shapes_match_the_official_decoder():
    """Shape-only check at full size (meta tensors): the same tensor names and shapes."""
    from oracle import import_oracle

    import_oracle()
    from qwen_tts.core.tokenizer_12hz.configuration_qwen3_tts_tokenizer_v2 import Qwen3TTSTokenizerV2DecoderConfig
    from qwen_tts.core.tokenizer_12hz.modeling_qwen3_tts_tokenizer_v2 import Qwen3TTSTokenizerV2Decoder

    raw = speech_tokenizer_config("full")["decoder_config"]
    with torch.device("meta"):
        official = Qwen3TTSTokenizerV2Decoder(Qwen3TTSTokenizerV2DecoderConfig(**raw))
        ours = Code2Wav(DecoderConfig.from_dict(raw))
    expected = {k: tuple(v.shape) for k, v in official.state_dict().items()}
    got = {k: tuple(v.shape) for k, v in ours.state_dict().items()}
    assert got == expected
    assert ours.samples_per_frame == 1920
    assert abs(ours.num_parameters() / 1e6 - 114.32) < 0.01
    specs = ours.state_specs()
    assert specs["pre_transformer.layers.7.self_attn.kv"] == (32, 71, 64)
    assert specs["decoder.1.block.1"] == (1536, 1)  # the ConvT keeps one input frame
    assert specs["decoder.4.block.4.conv1"] == (96, 54)  # k7, dilation 9
