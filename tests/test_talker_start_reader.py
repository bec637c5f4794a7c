"""StartReader turns a resolved Start's sampling into SamplingParams: frame counts to token counts,
min_frames to the EOS mask, unset min_frames to the model default."""
from __future__ import annotations

import json

import pytest

from checkpoint.files import resolve_model_dir
from protos.tts.internal.v1 import talker_pb2
from talker_service.engine import EngineError
from talker_service.prompt import PromptVocab
from talker_service.server.start import StartReader


@pytest.fixture(scope="module")
def reader():
    config = json.loads((resolve_model_dir("tiny") / "config.json").read_text())
    return StartReader(PromptVocab.from_config(config), config["talker_config"]["hidden_size"],
                       default_max_new_tokens=2048, max_text_tokens=512)


def start(reader, **sampling) -> talker_pb2.Start:
    speaker = talker_pb2.SpeakerVoice(speaker_codec_id=min(reader.speaker_names))
    return talker_pb2.Start(request_id="r", speaker=speaker, sampling=talker_pb2.Sampling(
        seed=3, temperature=0.9, top_p=1.0, repetition_penalty=1.0, subtalker_temperature=0.9,
        subtalker_top_p=1.0, **sampling), text_token_ids=[1000, 1001], is_text_complete=True)


def test_min_frames_becomes_min_new_tokens_and_unset_keeps_the_default(reader):
    _, _, fixed, _ = reader.read(start(reader, max_frames=40, min_frames=40))
    assert (fixed.min_new_tokens, fixed.max_new_tokens) == (40, 41)
    _, _, default, _ = reader.read(start(reader, max_frames=40))
    assert (default.min_new_tokens, default.max_new_tokens) == (2, 41)
    _, _, zero, _ = reader.read(start(reader, max_frames=40, min_frames=0))
    assert zero.min_new_tokens == 0


def test_min_frames_over_max_frames_is_invalid_argument(reader):
    with pytest.raises(EngineError, match="min_frames 41 exceeds max_frames 40"):
        reader.read(start(reader, max_frames=40, min_frames=41))


def test_generate_codes_maps_min_frames_and_keeps_the_default_when_unset():
    """The admin GenerateCodes path (the other way frame counts reach SamplingParams). The tiny
    checkpoint never samples EOS, so a process test cannot tell min_frames was applied: this can."""
    from checkpoint.text_tokenizer import load_text_tokenizer
    from protos.tts.internal.v1 import admin_pb2
    from protos.tts.v1 import config_pb2
    from talker_service.server.admin import TalkerAdminServicer

    model_dir = resolve_model_dir("tiny")
    vocab = PromptVocab.from_config(json.loads((model_dir / "config.json").read_text()))
    servicer = TalkerAdminServicer(jobs=None, timeout_s=1.0)
    servicer.bind_model(vocab, load_text_tokenizer(model_dir), {"max_new_tokens": 2048}, 512)

    def params(**sampling):
        config = config_pb2.SynthesisConfig(speaker=config_pb2.SpeakerVoice(name="vivian"), language="english",
                                            sampling=config_pb2.SamplingParams(**sampling))
        return servicer._inputs(admin_pb2.GenerateCodesRequest(text="Hi.", config=config))[2]

    fixed = params(min_frames=24, max_frames=24)
    assert (fixed.min_new_tokens, fixed.max_new_tokens) == (24, 25)
    default = params(max_frames=24)
    assert (default.min_new_tokens, default.max_new_tokens) == (2, 25)
    with pytest.raises(ValueError, match="min_frames 25 exceeds max_frames 24"):
        params(min_frames=25, max_frames=24)


def test_max_frames_over_the_talker_context_is_invalid_argument_naming_field_and_limit():
    config = json.loads((resolve_model_dir("tiny") / "config.json").read_text())
    bounded = StartReader(PromptVocab.from_config(config), config["talker_config"]["hidden_size"],
                          default_max_new_tokens=2048, max_text_tokens=512, max_seq_len=256)
    with pytest.raises(EngineError) as info:
        bounded.read(start(bounded, max_frames=257))
    assert info.value.code == "INVALID_ARGUMENT"
    assert "sampling.max_frames 257" in info.value.message and "256" in info.value.message
    _, _, ok, _ = bounded.read(start(bounded, max_frames=256))
    assert ok.max_new_tokens == 257
    _, _, default, _ = bounded.read(start(bounded))   # unset: the default, capped by the context, no error
    assert default.max_new_tokens == 2048
