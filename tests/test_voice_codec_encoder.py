"""Codec encoder (reference audio -> codes [K, 16]): identical codes to the official tokenizer."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from oracle import import_oracle

from checkpoint.configs import speech_tokenizer_config
from checkpoint.errors import CheckpointError
from talker_service.voice.codec_encoder import CodecEncoder, load_codec_encoder
from talker_service.voice.reference_audio import resample_to_24k

pytestmark = pytest.mark.oracle

FEATURE_EXTRACTOR = {
    "feature_extractor_type": "EncodecFeatureExtractor", "feature_size": 1, "sampling_rate": 24000,
    "padding_side": "right", "padding_value": 0.0, "return_attention_mask": True,
}


def _official_tokenizer(size: str, seed: int = 0):
    """Official Qwen3TTSTokenizerV2Model with random weights and random (non-degenerate) codebooks.

    Mimi initialises embed_sum to zeros, which would make every code 0 and the parity vacuous.
    Full causal attention is restored as the official Transformers-5 loader does.
    """
    import_oracle()
    from qwen_tts._transformers_compat import restore_mimi_full_attention
    from qwen_tts.core.tokenizer_12hz.configuration_qwen3_tts_tokenizer_v2 import Qwen3TTSTokenizerV2Config
    from qwen_tts.core.tokenizer_12hz.modeling_qwen3_tts_tokenizer_v2 import Qwen3TTSTokenizerV2Model

    torch.manual_seed(seed)
    model = Qwen3TTSTokenizerV2Model(Qwen3TTSTokenizerV2Config(**speech_tokenizer_config(size))).eval()
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, buffer in model.encoder.named_buffers():
            if name.endswith("embed_sum"):
                buffer.copy_(torch.randn(buffer.shape, generator=gen))
            elif name.endswith("cluster_usage"):
                buffer.copy_(torch.rand(buffer.shape, generator=gen) + 0.5)
    restore_mimi_full_attention(model)
    return model


@pytest.fixture(scope="module")
def tiny_tokenizer(tmp_path_factory):
    directory = tmp_path_factory.mktemp("speech_tokenizer")
    model = _official_tokenizer("tiny")
    model.save_pretrained(directory)   # official layout: config.json + model.safetensors (encoder.* and decoder.*)
    (directory / "preprocessor_config.json").write_text(json.dumps(FEATURE_EXTRACTOR))
    return model, directory


def _audio(num_samples: int, seed: int) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(num_samples) * 0.1).astype(np.float32)


def _official_codes(model, audio: np.ndarray) -> torch.Tensor:
    with torch.inference_mode():
        out = model.encode(torch.from_numpy(audio)[None], padding_mask=torch.ones(1, audio.shape[0], dtype=torch.long))
    return out.audio_codes[0]


def test_codes_identical_to_official_fp32(tiny_tokenizer):
    official, directory = tiny_tokenizer
    ours = load_codec_encoder(directory)
    # 1 s, one sample past a frame boundary, an exact number of frames, 3 s, and 11 s: past Mimi's
    # 250-frame (10 s) window, where only full causal attention matches the reference
    for num_samples in (24000, 24001, 1920 * 7, 3 * 24000 + 777, 11 * 24000):
        audio = _audio(num_samples, seed=num_samples)
        expected = _official_codes(official, audio)
        got = ours.encode(audio)
        assert got.shape == (math.ceil(num_samples / 1920), 16) and got.dtype == torch.int64
        assert torch.equal(got, expected), f"codes differ for {num_samples} samples"
        assert len(torch.unique(got[:, 5])) > 3, "degenerate codes: the comparison would prove nothing"


def test_codes_identical_to_official_wrapper_bf16_with_resampling(tiny_tokenizer):
    """The reference runs the codec in the talker's dtype (bf16) behind its resampling wrapper."""
    import_oracle()
    from qwen_tts.inference.qwen3_tts_tokenizer import Qwen3TTSTokenizer

    _, directory = tiny_tokenizer
    wrapper = Qwen3TTSTokenizer.from_pretrained(str(directory), dtype=torch.bfloat16)
    ours = load_codec_encoder(directory, dtype=torch.bfloat16)
    for sample_rate_hz in (24000, 16000):
        audio = _audio(2 * sample_rate_hz, seed=sample_rate_hz)
        expected = wrapper.encode(audio, sr=sample_rate_hz).audio_codes[0].cpu()
        assert torch.equal(ours.encode(resample_to_24k(audio, sample_rate_hz)), expected)


def test_changed_weight_changes_codes(tiny_tokenizer, tmp_path):
    from safetensors.torch import load_file, save_file

    official, directory = tiny_tokenizer
    tensors = load_file(str(directory / "model.safetensors"))
    tensors["encoder.downsample.conv.weight"] = tensors["encoder.downsample.conv.weight"] * 1.5
    save_file(tensors, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text((directory / "config.json").read_text())
    audio = _audio(3 * 24000, seed=9)
    assert not torch.equal(load_codec_encoder(tmp_path).encode(audio), _official_codes(official, audio))


@pytest.mark.parametrize("window, sees_first_frame", [(None, True), (250, False)])
def test_encoder_attention_is_full_causal(window, sees_first_frame):
    """Frame 510 of the 25 Hz transformer must see frame 0; with Mimi's default window of 250 per
    layer, the tiny config's 2 layers reach back at most 500 frames."""
    encoder = CodecEncoder(speech_tokenizer_config("tiny")).eval()
    if window is not None:   # the Mimi default, to show this check can tell the two apart
        for module in encoder.modules():
            if hasattr(module, "sliding_window"):
                module.sliding_window = window
        encoder.mimi_config.sliding_window = window
    torch.manual_seed(0)
    hidden = torch.randn(1, 520, encoder.mimi_config.hidden_size)
    bumped = hidden.clone()
    bumped[:, 0] += torch.randn(hidden.shape[-1])   # not a constant shift: the pre-norm LayerNorm would erase it
    with torch.no_grad():
        a = encoder.encoder_transformer(hidden, use_cache=False).last_hidden_state
        b = encoder.encoder_transformer(bumped, use_cache=False).last_hidden_state
    assert ((a[0, 510] - b[0, 510]).abs().max().item() > 0) == sees_first_frame


def test_loader_errors(tiny_tokenizer, tmp_path):
    _, directory = tiny_tokenizer
    config = json.loads((directory / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps(dict(config, model_type="qwen3_tts_tokenizer_25hz")))
    with pytest.raises(CheckpointError, match="model_type .qwen3_tts_tokenizer_25hz. is unsupported; only the 12 Hz tokenizer"):
        load_codec_encoder(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="missing file"):
        load_codec_encoder(tmp_path)
    with pytest.raises(ValueError, match="mono"):
        load_codec_encoder(directory).encode(np.zeros((2, 24000), dtype=np.float32))


@pytest.mark.slow
def test_codes_identical_to_official_full_size(tmp_path):
    """Full-size codec encoder (56 M parameters) on 2 s of audio."""
    official = _official_tokenizer("full", seed=4)
    official.save_pretrained(tmp_path)
    audio = _audio(2 * 24000 + 5, seed=11)
    assert torch.equal(load_codec_encoder(tmp_path).encode(audio), _official_codes(official, audio))
