"""build_clone_prompt: equal to the official create_voice_clone_prompt, and its input checks."""
from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from oracle import import_oracle

from checkpoint.configs import speaker_encoder_config, speech_tokenizer_config
from talker_service.voice.builder import build_clone_prompt, reference_text_ids
from talker_service.voice.codec_encoder import CodecEncoder, load_codec_encoder
from talker_service.voice.reference_audio import resample_to_24k
from talker_service.voice.speaker_encoder import SpeakerEncoder, SpeakerEncoderConfig
from talker_service.voice.xvector import extract_x_vector, load_speaker_encoder


def _audio(duration_s: float, sample_rate_hz: int, seed: int = 0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(int(duration_s * sample_rate_hz)) * 0.1).astype(np.float32)


@pytest.mark.oracle
def test_matches_official_create_voice_clone_prompt(tmp_path):
    """x-vector, reference codes and reference text ids equal the official wrapper's, from 16 kHz audio."""
    import_oracle()
    from qwen_tts.inference.qwen3_tts_model import Qwen3TTSModel

    from checkpoint.text_tokenizer import load_text_tokenizer
    from checkpoint.tiny import make_tiny_checkpoint

    model_dir = make_tiny_checkpoint(tmp_path / "tiny-base", "base", seed=1)
    official = Qwen3TTSModel.from_pretrained(str(model_dir), dtype=torch.float32)
    speaker_encoder = load_speaker_encoder(model_dir)
    codec_encoder = load_codec_encoder(model_dir)
    tokenizer = load_text_tokenizer(model_dir)

    audio, ref_text = _audio(2.5, 16000, seed=4), "Hello there, how are you today?"
    (expected,) = official.create_voice_clone_prompt(ref_audio=(audio, 16000), ref_text=ref_text, x_vector_only_mode=False)
    expected_ids = official._tokenize_texts([official._build_ref_text(ref_text)])[0][0, 3:-2].tolist()

    prompt = build_clone_prompt(audio, 16000, ref_text, speaker_encoder, codec_encoder, tokenizer, x_vector_only=False)
    assert prompt.icl_mode and expected.icl_mode
    assert (prompt.x_vector - expected.ref_spk_embedding.float()).abs().max().item() <= 1e-4
    assert torch.equal(prompt.ref_codes, expected.ref_code.cpu())
    assert prompt.ref_codes.shape == (32, 16)   # ceil(2.5 s * 24000 / 1920)
    assert prompt.ref_text_ids == expected_ids
    assert prompt.tts_model_size == "1b7" and prompt.ref_text == ref_text

    # a leading newline merges with the marker's newline; the reference's fixed slice drops it
    for text in ("\nSecond line first.", " leading space ", "Hi"):
        expected_ids = official._tokenize_texts([official._build_ref_text(text)])[0][0, 3:-2].tolist()
        assert reference_text_ids(tokenizer, text) == expected_ids, text

    xvec_only = build_clone_prompt(audio, 16000, None, speaker_encoder, None, None, x_vector_only=True)
    assert not xvec_only.icl_mode and torch.equal(xvec_only.x_vector, prompt.x_vector)


class _CharTokenizer:
    """Stand-in text tokenizer: chat markers and "\n\n" (as in Qwen2's BPE) are single ids, every
    other character its code point."""

    _SPECIAL = {"<|im_start|>": 151644, "<|im_end|>": 151645, "\n\n": 271}

    def __call__(self, text: str) -> dict:
        ids: list[int] = []
        for piece in re.split(r"(<\|im_start\|>|<\|im_end\|>|\n\n)", text):
            ids.extend([self._SPECIAL[piece]] if piece in self._SPECIAL else [ord(c) for c in piece])
        return {"input_ids": ids}


@pytest.fixture(scope="module")
def random_encoders():
    torch.manual_seed(0)
    speaker = SpeakerEncoder(SpeakerEncoderConfig.from_dict(speaker_encoder_config("tiny")), tts_model_size="1b7").eval()
    codec = CodecEncoder(speech_tokenizer_config("tiny")).eval()
    return speaker, codec


def test_x_vector_only_needs_no_codec_or_tokenizer(random_encoders):
    speaker, _ = random_encoders
    audio = _audio(1.5, 44100)
    prompt = build_clone_prompt(audio, 44100, "ignored in this mode", speaker, None, None, x_vector_only=True)
    assert not prompt.icl_mode and prompt.ref_text is None
    assert torch.equal(prompt.x_vector, extract_x_vector(speaker, resample_to_24k(audio, 44100)))


def test_icl_mode_has_codes_and_bare_text_ids(random_encoders):
    speaker, codec = random_encoders
    prompt = build_clone_prompt(_audio(1.2, 24000), 24000, "  Hi you\n", speaker, codec, _CharTokenizer(), x_vector_only=False)
    assert prompt.ref_text_ids == [ord(c) for c in "  Hi you\n"]   # markers sliced off, text kept as given
    assert prompt.ref_codes.shape == (15, 16)                  # ceil(1.2 s * 24000 / 1920)


@pytest.mark.parametrize("ref_text", [None, "", "  \n"])
def test_icl_mode_requires_reference_text(random_encoders, ref_text):
    speaker, codec = random_encoders
    with pytest.raises(ValueError, match="ref_text is required for in-context cloning"):
        build_clone_prompt(_audio(2.0, 24000), 24000, ref_text, speaker, codec, _CharTokenizer(), x_vector_only=False)


def test_icl_mode_requires_codec_encoder_and_tokenizer(random_encoders):
    speaker, codec = random_encoders
    with pytest.raises(ValueError, match="needs the codec encoder and the text tokenizer"):
        build_clone_prompt(_audio(2.0, 24000), 24000, "hi", speaker, None, _CharTokenizer(), x_vector_only=False)
    with pytest.raises(ValueError, match="needs the codec encoder and the text tokenizer"):
        build_clone_prompt(_audio(2.0, 24000), 24000, "hi", speaker, codec, None, x_vector_only=False)


def test_bad_audio_is_refused_before_any_model_runs(random_encoders):
    speaker, codec = random_encoders
    with pytest.raises(ValueError, match="reference audio is silent"):
        build_clone_prompt(np.zeros(48000, np.float32), 24000, "hi", speaker, codec, _CharTokenizer(), x_vector_only=False)
    with pytest.raises(ValueError, match="reference audio is too short"):
        build_clone_prompt(_audio(0.3, 24000), 24000, None, speaker, None, None, x_vector_only=True)


def test_leading_newline_is_dropped_with_the_merged_marker_token_as_in_the_reference():
    # "assistant\n" + "\nHi" tokenizes as [im_start, a,s,s,i,s,t,a,n,t, "\n\n", H, i, ...]: the
    # reference's fixed slice removes the merged "\n\n" and keeps the words
    assert reference_text_ids(_CharTokenizer(), "\nHi") == [ord("H"), ord("i")]


def test_tokenizer_without_chat_markers_is_refused():
    def whitespace_words(text: str) -> dict:   # glues the markers to the neighbouring words
        return {"input_ids": [hash(word) % 1000 for word in text.split()]}

    with pytest.raises(ValueError, match="does not keep the chat markers"):
        reference_text_ids(whitespace_words, "hello")
