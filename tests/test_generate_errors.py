"""Bad requests fail early with a ValueError that names the problem (and the valid choices)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from checkpoint.configs import model_config
from checkpoint.tiny import make_tiny_checkpoint
from talker_service.generate import SynthesisRequest, Synthesizer
from talker_service.prompt import PromptRequest, PromptVocab, validate_request
from talker_service.voice.clone_prompt import VoiceClonePrompt
from test_prompt_oracle import one_torch_thread  # noqa: F401  (autouse: one intra-op thread)


@pytest.fixture(scope="module")
def synths(tmp_path_factory):
    out = {}
    for model_type in ("base", "custom_voice", "voice_design"):
        directory = make_tiny_checkpoint(tmp_path_factory.mktemp(model_type) / "ckpt", model_type)
        out[model_type] = Synthesizer.from_pretrained(directory, max_slots=1, max_seq_len=64, max_text_tokens=12)
    return out


def x_vector_voice(synth) -> VoiceClonePrompt:
    return VoiceClonePrompt(x_vector=torch.randn(synth.talker.config.hidden_size), ref_codes=None, ref_text_ids=None)


def check(synth, match, **request):
    with pytest.raises(ValueError, match=match):
        synth.prepare(SynthesisRequest(**request))


def test_unknown_speaker_and_missing_speaker_list_the_valid_ones(synths):
    cv = synths["custom_voice"]
    check(cv, r"unknown speaker 'nobody'; valid: aiden, dylan, eric, ono_anna, ryan, serena, sohee, uncle_fu, vivian",
          text="Hi.", voice="nobody", language="english")
    check(cv, r"needs a speaker; valid: aiden, dylan", text="Hi.", language="english")


def test_unknown_language_lists_the_valid_ones(synths):
    valid = r"valid: auto, chinese, english, french, german, italian, japanese, korean, portuguese, russian, spanish"
    check(synths["custom_voice"], "unknown language 'klingon'.*" + valid, text="Hi.", voice="vivian",
          language="klingon")
    # dialects are reached through their speakers (eric, dylan), not named as languages
    check(synths["custom_voice"], "unknown language 'sichuan_dialect'", text="Hi.", voice="eric",
          language="sichuan_dialect")
    check(synths["voice_design"], "unknown language", text="Hi.", language="")


def test_instruction_on_a_model_without_one(synths):
    check(synths["base"], "instruction given but a Base model", text="Hi.", voice=x_vector_voice(synths["base"]),
          instruct="Speak softly.")
    config = model_config("custom_voice", "tiny") | {"tts_model_size": "0b6"}
    vocab = PromptVocab.from_config(config)
    with pytest.raises(ValueError, match="0.6B CustomVoice model has no instruction"):
        validate_request(vocab, PromptRequest(language="english", speaker="vivian", instruct_ids=[1, 2, 3]))


def test_voice_kind_must_fit_the_model_type(synths):
    base, cv, vd = synths["base"], synths["custom_voice"], synths["voice_design"]
    check(base, "Base model needs a voice to clone", text="Hi.", language="english")
    check(base, "speaker 'vivian' given, but a Base model has no named speakers", text="Hi.", voice="vivian")
    check(cv, "voice cloning needs a Base model; this is a custom_voice model", text="Hi.", voice=x_vector_voice(cv))
    check(vd, "speaker 'vivian' given, but a voice_design model has no named speakers", text="Hi.", voice="vivian")
    with pytest.raises(ValueError, match="voice cloning needs a Base model"):
        cv.clone_voice(np.zeros(24000, dtype=np.float32), 24000, None, x_vector_only=True)


def test_text_empty_or_over_the_limit(synths):
    vd = synths["voice_design"]
    check(vd, "text is empty", text="")
    check(vd, "text is empty", text="   \n")
    check(vd, "more than the limit of 12", text="word " * 40)
    check(vd, "more than the limit of 12", text_ids=list(range(1000, 1013)))


def test_voice_prompt_of_another_model_size(synths):
    wrong = VoiceClonePrompt(x_vector=torch.randn(7), ref_codes=None, ref_text_ids=None)
    check(synths["base"], "hidden size 7", text="Hi.", voice=wrong)


def test_bad_reference_audio(synths):
    base = synths["base"]
    rng = np.random.default_rng(0)
    speech = (0.3 * rng.standard_normal(3 * 24000)).astype(np.float32)
    with pytest.raises(ValueError, match="ref_text is required"):
        base.clone_voice(speech, 24000, None, x_vector_only=False)
    with pytest.raises(ValueError, match="(?i)silent"):
        base.clone_voice(np.zeros(3 * 24000, dtype=np.float32), 24000, None, x_vector_only=True)
    with pytest.raises(ValueError, match="(?i)short"):
        base.clone_voice(speech[:2400], 24000, None, x_vector_only=True)
    with pytest.raises(ValueError, match="(?i)sample rate"):
        base.clone_voice(speech, 100, None, x_vector_only=True)


def test_prompt_longer_than_the_context(synths):
    vd = synths["voice_design"]
    with pytest.raises(ValueError, match="does not fit the context of 64"):
        vd.generate([SynthesisRequest(text_ids=list(range(1000, 1012)), instruct="word " * 60)])
