"""End to end against the official wrapper (Qwen3TTSModel) on tiny checkpoints in the official
layout: text string -> tokenizer -> prompt -> greedy codes -> decoder -> waveform, for each model
type, including in-context cloning where the reference codes prime the decoder."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from checkpoint.tiny import make_tiny_checkpoint
from oracle import import_oracle
from talker_service.generate import Synthesizer
from test_prompt_oracle import one_torch_thread  # noqa: F401  (autouse: one intra-op thread)

pytestmark = pytest.mark.oracle
TEXT = "Hello world, this is a test."
GREEDY = dict(do_sample=False, subtalker_dosample=False, max_new_tokens=10)
# fp32 on both sides; the decoders differ only in op order (SnakeBeta, conv algorithms)
PCM_TOL = 1e-4


def pair(tmp_path_factory, model_type):
    import_oracle()
    from qwen_tts.inference.qwen3_tts_model import Qwen3TTSModel

    directory = make_tiny_checkpoint(tmp_path_factory.mktemp(model_type) / "ckpt", model_type)
    official = Qwen3TTSModel.from_pretrained(str(directory), dtype=torch.float32)
    return official, Synthesizer.from_pretrained(directory, max_slots=2, max_seq_len=256)


def ours(synth, text, **kwargs):
    sampling = synth.sampling_params(seed=0, **GREEDY)
    return synth.synthesize(text, sampling=sampling, **kwargs)


def assert_same_audio(official_out, our_out):
    (wavs, official_rate), (pcm, rate) = official_out, our_out
    assert rate == official_rate == 24000
    assert pcm.dtype == np.float32 and pcm.shape == wavs[0].shape and pcm.shape[0] > 0
    assert np.abs(pcm - wavs[0]).max() <= PCM_TOL


def test_custom_voice_with_instruct(tmp_path_factory):
    official, synth = pair(tmp_path_factory, "custom_voice")
    expected = official.generate_custom_voice(TEXT, speaker="Vivian", language="English", instruct="Speak slowly.",
                                              **GREEDY)
    assert_same_audio(expected, ours(synth, TEXT, voice="Vivian", language="English", instruct="Speak slowly."))


def test_voice_design_streaming_text(tmp_path_factory):
    official, synth = pair(tmp_path_factory, "voice_design")
    expected = official.generate_voice_design(TEXT, instruct="A deep calm voice.", language="auto",
                                              non_streaming_mode=False, **GREEDY)
    got = ours(synth, TEXT, instruct="A deep calm voice.", language="auto", non_streaming_mode=False)
    assert_same_audio(expected, got)


@pytest.mark.parametrize("x_vector_only", [True, False])
def test_base_voice_clone(tmp_path_factory, x_vector_only):
    official, synth = pair(tmp_path_factory, "base")
    rng = np.random.default_rng(0)
    t = np.arange(2 * 24000) / 24000
    ref = (0.3 * np.sin(2 * np.pi * 220 * t) + 0.05 * rng.standard_normal(t.shape)).astype(np.float32)
    ref_text = None if x_vector_only else "A short reference sentence."
    expected = official.generate_voice_clone(TEXT, language="english", ref_audio=(ref, 24000), ref_text=ref_text,
                                             x_vector_only_mode=x_vector_only, **GREEDY)
    voice = synth.clone_voice(ref, 24000, ref_text, x_vector_only=x_vector_only)
    assert voice.icl_mode is not x_vector_only
    assert_same_audio(expected, ours(synth, TEXT, voice=voice, language="english"))
