"""checkpoint.layout shapes == the official classes' state_dict names and shapes, for every model."""
from __future__ import annotations

import math

import pytest
import torch

from checkpoint import layout
from checkpoint.configs import MODEL_TYPES, model_config, speech_tokenizer_config
from oracle import import_oracle


def _official_shapes(module: torch.nn.Module) -> dict[str, tuple[int, ...]]:
    # state_dict() already omits non-persistent buffers (RoPE inv_freq), which files never hold
    return {name: tuple(t.shape) for name, t in module.state_dict().items()}


@pytest.fixture(scope="module")
def official():
    import_oracle()
    from qwen_tts.core.models.configuration_qwen3_tts import Qwen3TTSConfig
    from qwen_tts.core.models.modeling_qwen3_tts import Qwen3TTSForConditionalGeneration
    from qwen_tts.core.tokenizer_12hz.configuration_qwen3_tts_tokenizer_v2 import Qwen3TTSTokenizerV2Config
    from qwen_tts.core.tokenizer_12hz.modeling_qwen3_tts_tokenizer_v2 import Qwen3TTSTokenizerV2Model

    def model(config: dict) -> torch.nn.Module:
        with torch.device("meta"):  # no memory, no init: 1.7B builds in milliseconds
            return Qwen3TTSForConditionalGeneration(Qwen3TTSConfig(**config))

    def codec(config: dict) -> torch.nn.Module:
        with torch.device("meta"):
            return Qwen3TTSTokenizerV2Model(Qwen3TTSTokenizerV2Config(**config))

    return model, codec


def _diff(expected: dict, actual: dict) -> str:
    missing = sorted(set(actual) - set(expected))[:5]
    extra = sorted(set(expected) - set(actual))[:5]
    wrong = [(k, expected[k], actual[k]) for k in sorted(expected) if k in actual and expected[k] != actual[k]][:5]
    return f"ours lacks {missing}; ours has extra {extra}; wrong shapes {wrong}"


@pytest.mark.oracle
@pytest.mark.parametrize("size", ["tiny", "1b7", "0b6"])
@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_model_shapes_match_official(official, model_type, size):
    config = model_config(model_type, size)
    expected = layout.expected_tensor_shapes(config)
    actual = _official_shapes(official[0](config))
    assert expected == actual, _diff(expected, actual)
    assert any(k.startswith("speaker_encoder.") for k in expected) == (model_type == "base")


@pytest.mark.oracle
@pytest.mark.parametrize("size", ["tiny", "full"])
def test_speech_tokenizer_shapes_match_official(official, size):
    config = speech_tokenizer_config(size)
    expected = layout.expected_speech_tokenizer_shapes(config)
    actual = _official_shapes(official[1](config))
    assert expected == actual, _diff(expected, actual)


def _num_params(shapes: dict) -> int:
    return sum(math.prod(shape) for shape in shapes.values())


@pytest.mark.parametrize(
    "model_type,size,expected_billions",
    [("base", "1b7", 1.929), ("custom_voice", "1b7", 1.917), ("voice_design", "1b7", 1.917),
     ("base", "0b6", 0.915), ("custom_voice", "0b6", 0.906)],
)
def test_full_size_parameter_counts_match_published(model_type, size, expected_billions):
    # totals from shared/QWEN3_TTS_FACTS.md §1.2, i.e. what the 4 GB / 2 GB files hold
    count = _num_params(layout.expected_tensor_shapes(model_config(model_type, size)))
    assert round(count / 1e9, 3) == expected_billions


def test_full_codec_parameter_count_and_key_shapes():
    shapes = layout.expected_speech_tokenizer_shapes(speech_tokenizer_config("full"))
    assert round(_num_params(shapes) / 1e6, 1) == 170.6
    assert shapes["decoder.quantizer.rvq_first.vq.layers.0._codebook.embedding_sum"] == (2048, 256)
    assert shapes["decoder.decoder.1.block.1.conv.weight"] == (1536, 768, 16)
    assert shapes["decoder.decoder.4.block.1.conv.weight"] == (192, 96, 6)
    assert shapes["decoder.decoder.6.conv.weight"] == (1, 96, 7)
    assert shapes["encoder.encoder.layers.12.conv.weight"] == (1024, 512, 16)
    assert shapes["encoder.downsample.conv.weight"] == (512, 512, 4)
    assert "encoder.downsample.conv.bias" not in shapes
    assert len([k for k in shapes if k.endswith("codebook.embed_sum")]) == 32


def test_required_files_are_the_official_names():
    assert layout.REQUIRED_FILES == (
        "config.json", "generation_config.json", "model.safetensors", "vocab.json", "merges.txt",
        "tokenizer_config.json", "preprocessor_config.json", "speech_tokenizer/config.json",
        "speech_tokenizer/model.safetensors", "speech_tokenizer/preprocessor_config.json",
    )


def test_missing_config_sections_are_named():
    with pytest.raises(ValueError, match="talker_config"):
        layout.expected_tensor_shapes({"tts_model_type": "base"})
    with pytest.raises(ValueError, match="decoder_config"):
        layout.expected_speech_tokenizer_shapes({"encoder_config": {}})
