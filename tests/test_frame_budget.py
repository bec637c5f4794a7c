"""The frame budget (a runaway guard that follows the text) and the unary audio limit, without
sockets or a model: the formula, how it combines with max_frames/min_frames, how a streamed
request's budget grows until its text ends, and the gateway's checks before any work."""
from __future__ import annotations

import io

import numpy as np
import pytest
import soundfile

from service_common.frame_budget import (FRAMES_PER_TEXT_TOKEN, MARGIN_FRAMES, MIN_BUDGET_FRAMES, frame_budget,
                                         text_budget_frames)
from talker_service.engine.request import (FINISH_BUDGET, FINISH_CONTEXT, FINISH_LENGTH, EngineRequest)
from talker_service.model import SamplingParams
from talker_service.prompt import PromptRequest, TextFeed


def test_text_budget_is_a_floor_then_grows_linearly_with_the_text():
    assert MIN_BUDGET_FRAMES >= 3 * 12.5 and MARGIN_FRAMES > 0   # at least a few seconds
    assert text_budget_frames(0) == text_budget_frames(1) == MIN_BUDGET_FRAMES
    n = 100
    assert text_budget_frames(n) == int(np.ceil(FRAMES_PER_TEXT_TOKEN * n)) + MARGIN_FRAMES
    assert text_budget_frames(n + 1) - text_budget_frames(n) == FRAMES_PER_TEXT_TOKEN
    # a generous bound over slow speech (about 6 frames per token), never below it
    assert all(text_budget_frames(k) >= 6 * k + 12 for k in range(0, 2000, 7))
    with pytest.raises(ValueError):
        text_budget_frames(-1)


def test_max_frames_can_only_lower_the_budget_and_min_frames_raises_it():
    text = text_budget_frames(10)
    assert frame_budget(10, max_frames=2048) == text               # default cap far above: the text decides
    assert frame_budget(10, max_frames=20) == 20                   # an explicit smaller max_frames wins
    assert frame_budget(10, max_frames=10**6, min_frames=2) == text
    assert frame_budget(10, max_frames=500, min_frames=300) == 300  # fixed length (benchmarks) is kept
    assert frame_budget(10, max_frames=300, min_frames=300) == 300


def request(max_new_tokens: int = 2049, min_new_tokens: int = 2, by_context: int = 10**6,
            num_prefill_positions: int = 1) -> EngineRequest:
    feed = TextFeed(tts_eos_id=1, tts_pad_id=2, num_prefill_positions=num_prefill_positions)
    out = EngineRequest("r", PromptRequest(language="english", speaker="vivian"), feed,
                        SamplingParams(max_new_tokens=max_new_tokens, min_new_tokens=min_new_tokens), arrival_s=0.0)
    out.max_frames_by_length = max_new_tokens - 1
    out.max_frames_by_context = by_context
    return out


def test_a_streamed_request_budget_grows_with_its_text_and_is_final_at_end_of_input():
    r = request()
    r.feed.push([100] * 3)
    # text still open: only the request's own cap applies (more text may raise the budget)
    assert r.frame_limit() == (2048, FINISH_LENGTH)
    r.feed.push([101] * 40)
    r.feed.push([102] * 7)
    assert r.frame_limit() == (2048, FINISH_LENGTH)
    r.feed.close()
    assert r.frame_limit() == (text_budget_frames(50), FINISH_BUDGET)
    assert text_budget_frames(50) > text_budget_frames(3)


def test_limits_combine_with_the_smallest_winning_and_its_reason_reported():
    short = request(max_new_tokens=21)           # explicit max_frames 20, below the text budget
    short.feed.push([5] * 30)
    short.feed.close()
    assert short.frame_limit() == (20, FINISH_LENGTH)
    tight = request(by_context=30)               # the slot's context ends first
    tight.feed.push([5] * 30)
    tight.feed.close()
    assert tight.frame_limit() == (30, FINISH_CONTEXT)
    fixed = request(max_new_tokens=401, min_new_tokens=400)   # min_frames = max_frames = 400
    fixed.feed.push([5] * 2)
    fixed.feed.close()
    assert fixed.frame_limit() == (400, FINISH_LENGTH)


def test_the_limit_kept_after_end_of_input_follows_the_prefill_limits_it_was_formed_from():
    r = request(by_context=10**6)
    r.feed.push([5] * 30)
    r.feed.close()
    assert r.frame_limit() == (text_budget_frames(30), FINISH_BUDGET)
    assert r.frame_limit() == (text_budget_frames(30), FINISH_BUDGET)   # kept: same answer
    r.max_frames_by_context = 12   # a prefill-time limit changed after it was kept: formed again
    assert r.frame_limit() == (12, FINISH_CONTEXT)
    r.max_frames_by_length = 5
    assert r.frame_limit() == (5, FINISH_LENGTH)
    open_text = request()
    open_text.feed.push([5] * 30)
    assert open_text.frame_limit() == (2048, FINISH_LENGTH)   # nothing kept while text may come
    open_text.feed.close()
    assert open_text.frame_limit() == (text_budget_frames(30), FINISH_BUDGET)


# ---- gateway: the unary audio limit and the max_frames bound ----------------------------------

@pytest.fixture(scope="module")
def resolver():
    from checkpoint.files import resolve_model_dir
    from gateway.model_info import load_model_info
    from gateway.resolve import Resolver
    from gateway.text_tokenizer import TextTokenizer

    model_dir = resolve_model_dir("tiny")
    return Resolver(load_model_info(model_dir, "tiny"), TextTokenizer.from_dir(model_dir), voices=None,
                    min_reference_s=1.0, max_reference_s=30.0)


def config(encoding=None, rate: int = 0, speed: float = 0.0, **sampling):
    from protos.tts.v1 import config_pb2 as C
    return C.SynthesisConfig(speaker=C.SpeakerVoice(name="vivian"), language="english", speed=speed,
                             audio_format=C.AudioFormat(encoding=encoding or C.AUDIO_ENCODING_PCM16,
                                                        sample_rate_hz=rate),
                             sampling=C.SamplingParams(**sampling))


def test_max_frames_above_the_model_context_is_refused_naming_field_and_limit(resolver):
    from gateway.errors import InvalidArgument
    limit = resolver.model.max_positions
    assert limit == 32768
    with pytest.raises(InvalidArgument) as info:
        resolver.resolve(config(max_frames=10**9), is_unary=False)
    assert info.value.field == "config.sampling.max_frames" and str(limit) in info.value.message
    ok = resolver.resolve(config(max_frames=limit), is_unary=False)
    assert ok.sampling.max_frames == ok.max_frames == limit
    unset = resolver.resolve(config(), is_unary=False)
    # unset: the talker applies its own default; the gateway bounds with the model's
    assert unset.sampling.max_frames == 0 and unset.max_frames == resolver.model.generation["max_new_tokens"]


def test_worst_case_bytes_follow_encoding_rate_and_speed():
    from gateway.unary_limit import max_frames_within, worst_case_audio_bytes
    from protos.tts.v1 import config_pb2 as C
    one_second = 12.5   # frames
    assert worst_case_audio_bytes(125, C.AUDIO_ENCODING_PCM16, 24000, 1.0) == 10 * 48000
    assert worst_case_audio_bytes(125, C.AUDIO_ENCODING_FLOAT32, 24000, 1.0) == 10 * 96000
    assert worst_case_audio_bytes(125, C.AUDIO_ENCODING_MULAW, 8000, 1.0) == 10 * 8000
    assert worst_case_audio_bytes(125, C.AUDIO_ENCODING_PCM16, 24000, 0.5) == 20 * 48000
    assert worst_case_audio_bytes(125, C.AUDIO_ENCODING_WAV, 16000, 1.0) > 10 * 32000
    for encoding, rate, speed in [(C.AUDIO_ENCODING_PCM16, 24000, 1.0), (C.AUDIO_ENCODING_FLOAT32, 48000, 0.5),
                                  (C.AUDIO_ENCODING_OGG_OPUS, 48000, 2.0), (C.AUDIO_ENCODING_WAV, 8000, 1.0)]:
        fits = max_frames_within(3 << 20, encoding, rate, speed)
        assert worst_case_audio_bytes(fits, encoding, rate, speed) <= 3 << 20
        assert worst_case_audio_bytes(fits + 1, encoding, rate, speed) > 3 << 20
        assert fits > 5 * one_second   # float32 at 48 kHz, half speed: 384 kB per second


@pytest.mark.parametrize("rate", [8000, 48000])
def test_opus_worst_case_bounds_a_real_file_of_noise(rate):
    """Noise is the hardest signal for Opus: the real file must still fit the bound."""
    from gateway.audio_encoding import whole_file
    from gateway.unary_limit import worst_case_audio_bytes
    from protos.tts.v1 import config_pb2 as C
    pcm = np.random.default_rng(0).uniform(-1, 1, 5 * rate).astype(np.float32)
    data = whole_file(pcm, rate, C.AUDIO_ENCODING_OGG_OPUS)
    assert len(data) <= worst_case_audio_bytes(5 * 12.5, C.AUDIO_ENCODING_OGG_OPUS, rate, 1.0)
    wav = whole_file(pcm, rate, C.AUDIO_ENCODING_WAV)
    assert len(wav) <= worst_case_audio_bytes(5 * 12.5, C.AUDIO_ENCODING_WAV, rate, 1.0)
    assert soundfile.info(io.BytesIO(data)).duration == pytest.approx(5.0, abs=0.1)


def test_unary_check_uses_the_text_budget_and_points_to_stream_synthesize(resolver):
    from gateway.errors import InvalidArgument
    from gateway.unary_limit import check_unary_audio, worst_case_audio_bytes
    from protos.tts.v1 import config_pb2 as C
    short = resolver.resolve(config(C.AUDIO_ENCODING_FLOAT32), is_unary=True)
    assert check_unary_audio(short, 10, 3 << 20) == text_budget_frames(10)
    # 3000 text tokens: a budget of minutes, over any one-message reply
    with pytest.raises(InvalidArgument) as info:
        check_unary_audio(short, 3000, 3 << 20)
    assert "StreamSynthesize" in info.value.message and "config.sampling.max_frames <=" in info.value.message
    # an explicit max_frames that fits lets the same long text through (it caps the budget)
    capped = resolver.resolve(config(C.AUDIO_ENCODING_FLOAT32, max_frames=300), is_unary=True)
    assert check_unary_audio(capped, 3000, 3 << 20) == 300
    assert worst_case_audio_bytes(300, C.AUDIO_ENCODING_FLOAT32, 24000, 1.0) <= 3 << 20
