"""Speaker encoder + mel front end: x-vector parity with the official implementation."""
from __future__ import annotations

import types

import numpy as np
import pytest
import torch
from oracle import import_oracle

from checkpoint.configs import model_config
from checkpoint.errors import CheckpointError
from talker_service.voice.mel import LogMelSpectrogram
from talker_service.voice.xvector import extract_x_vector, load_speaker_encoder, speaker_encoder_from_state

pytestmark = pytest.mark.oracle


def _official():
    import_oracle()
    from qwen_tts.core.models import modeling_qwen3_tts as official
    from qwen_tts.core.models.configuration_qwen3_tts import Qwen3TTSSpeakerEncoderConfig

    return official, Qwen3TTSSpeakerEncoderConfig


def _official_encoder(size: str, seed: int = 0):
    """Official speaker encoder with random weights, and its tensors under the checkpoint names.

    Only the speaker encoder is built (the 0.6B widths without a 0.9 B-parameter talker); the
    file path through open_checkpoint is covered by test_voice_builder's tiny Base checkpoint.
    """
    official, config_cls = _official()
    config = model_config("base", size)
    torch.manual_seed(seed)
    encoder = official.Qwen3TTSSpeakerEncoder(config_cls(**config["speaker_encoder_config"])).eval()
    tensors = {"speaker_encoder." + k: v.clone() for k, v in encoder.state_dict().items()}
    return encoder, config, tensors


def _ours(config: dict, tensors: dict, dtype=torch.float32):
    return speaker_encoder_from_state(config, tensors, source="test tensors", dtype=dtype)


def _official_x_vector(encoder, audio: np.ndarray, dtype=torch.float32) -> torch.Tensor:
    """The official `extract_speaker_embedding` (mel front end + encoder), run on `encoder`."""
    official, _ = _official()
    owner = types.SimpleNamespace(speaker_encoder=encoder, device=torch.device("cpu"), dtype=dtype)
    return official.Qwen3TTSForConditionalGeneration.extract_speaker_embedding(owner, audio, 24000).float()


def _audio(num_samples: int, seed: int) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(num_samples) * 0.1).astype(np.float32)


def test_mel_matches_official_mel_spectrogram():
    official, _ = _official()
    audio = torch.from_numpy(_audio(24000 + 333, seed=1)).unsqueeze(0)
    expected = official.mel_spectrogram(audio, n_fft=1024, num_mels=128, sampling_rate=24000, hop_size=256,
                                        win_size=1024, fmin=0, fmax=12000)
    ours = LogMelSpectrogram()(audio)
    assert ours.shape == expected.shape == (1, 128, (24000 + 333) // 256)
    torch.testing.assert_close(ours, expected, rtol=0, atol=1e-5)


@pytest.mark.parametrize("size", ["tiny", "0b6"])
def test_x_vector_matches_official_fp32(size):
    official_encoder, config, tensors = _official_encoder(size)
    ours = _ours(config, tensors)
    hidden = model_config("base", size)["talker_config"]["hidden_size"]
    x_vectors = []
    for num_samples, seed in [(24000, 0), (3 * 24000 + 123, 1)]:
        audio = _audio(num_samples, seed)
        expected = _official_x_vector(official_encoder, audio)
        got = extract_x_vector(ours, audio)
        assert got.shape == (hidden,) and got.dtype == torch.float32
        assert (got - expected).abs().max().item() <= 1e-4
        assert got.std().item() > 1e-2, "degenerate x-vector: the comparison would prove nothing"
        x_vectors.append(got)
    assert (x_vectors[0] - x_vectors[1]).abs().max().item() > 1e-3, "x-vector ignores the audio"


def test_x_vector_matches_official_bf16():
    official_encoder, config, tensors = _official_encoder("tiny", seed=2)
    ours = _ours(config, tensors, dtype=torch.bfloat16)
    audio = _audio(2 * 24000, seed=5)
    expected = _official_x_vector(official_encoder.to(torch.bfloat16), audio, dtype=torch.bfloat16)
    torch.testing.assert_close(extract_x_vector(ours, audio), expected, rtol=0, atol=0)


def test_perturbed_weight_breaks_parity():
    """The parity check is sensitive: one changed tensor deep in the net shows in the x-vector."""
    official_encoder, config, tensors = _official_encoder("tiny", seed=3)
    tensors["speaker_encoder.blocks.2.res2net_block.blocks.3.conv.weight"] += 0.05
    audio = _audio(24000, seed=6)
    diff = extract_x_vector(_ours(config, tensors), audio) - _official_x_vector(official_encoder, audio)
    assert diff.abs().max().item() > 1e-4


def test_loader_errors_name_the_problem():
    _, config, tensors = _official_encoder("tiny")
    with pytest.raises(CheckpointError, match="'custom_voice' model; only Base checkpoints carry a speaker encoder"):
        _ours(model_config("custom_voice", "tiny"), tensors)

    broken = dict(tensors)
    del broken["speaker_encoder.fc.bias"]
    broken["speaker_encoder.mfa.conv.weight"] = broken["speaker_encoder.mfa.conv.weight"][:, :-1]
    with pytest.raises(CheckpointError, match=r"(?=.*missing tensor 'speaker_encoder\.fc\.bias')(?=.*wrong shape for 'speaker_encoder\.mfa\.conv\.weight')"):
        _ours(config, broken)

    config["speaker_encoder_config"]["enc_dim"] = 64
    with pytest.raises(CheckpointError, match="enc_dim 64 must equal talker_config.hidden_size 48"):
        _ours(config, tensors)


def test_load_from_custom_voice_checkpoint_is_refused(tmp_path):
    from checkpoint.tiny import make_tiny_checkpoint

    model_dir = make_tiny_checkpoint(tmp_path / "tiny-cv", "custom_voice")
    with pytest.raises(CheckpointError, match="only Base checkpoints carry a speaker encoder, so voice cloning needs a Base model"):
        load_speaker_encoder(model_dir)
