"""ENCODE_VOICE on the talker, in process: refusals answered at once by the loop thread, and the
worker's answers (a VoicePrompt equal to the offline Synthesizer's, or a named error)."""
from __future__ import annotations

import time

import numpy as np
import pytest

from checkpoint.files import resolve_model_dir
from protos.tts.internal.v1 import talker_pb2
from talker_service.engine import EngineError
from talker_service.server.voice_jobs import VoiceEncoding
from test_clone_stack import REF_TEXT, reference_audio
from test_vocoder_process_support import one_cpu_thread

WAIT_S = 60.0


@pytest.fixture(scope="module")
def synth():
    from talker_service.generate import Synthesizer
    with one_cpu_thread():
        yield Synthesizer.from_pretrained(resolve_model_dir("tiny-base"), max_slots=1, max_seq_len=128)


def encoding(synth, **kw) -> VoiceEncoding:
    return VoiceEncoding(synth.model_dir, "base", "tiny-base", synth.talker.config.hidden_size, **kw)


def request(rid: str, x_vector_only: bool = False, text_ids=(11, 12, 13), **kw) -> talker_pb2.EncodeVoice:
    fields = dict(request_id=rid, model="tiny-base", x_vector_only=x_vector_only, sample_rate_hz=24000,
                  reference_text_token_ids=[] if x_vector_only else list(text_ids)) | kw
    return talker_pb2.EncodeVoice(**fields)


def answers(voices: VoiceEncoding, count: int) -> dict:
    got, deadline = {}, time.monotonic() + WAIT_S
    while len(got) < count:
        assert time.monotonic() < deadline, got
        got.update({a.request_id: a for a in voices.take_finished()})
        time.sleep(0.01)
    return got


def refused(voices: VoiceEncoding, req, audio) -> EngineError:
    with pytest.raises(EngineError) as error:
        voices.submit(b"gw", req, audio)
    return error.value


def test_refusals_name_the_problem(synth):
    audio = reference_audio()
    custom = VoiceEncoding(synth.model_dir, "custom_voice", "tiny", 4)
    error = refused(custom, request("a", model="tiny"), audio)
    assert error.code == "FAILED_PRECONDITION" and "Base model" in error.message
    voices = encoding(synth)
    cases = [(request("b", model="other"), audio, "NOT_FOUND", "not served here"),
             (request("c"), audio.astype(np.float64), "INVALID_ARGUMENT", "float32"),
             (request("d"), None, "INVALID_ARGUMENT", "float32"),
             (request("e", sample_rate_hz=0), audio, "INVALID_ARGUMENT", "sample_rate_hz"),
             (request("f"), np.zeros(31 * 24000, np.float32), "INVALID_ARGUMENT", "at most 30 s"),
             (request("g", text_ids=()), audio, "INVALID_ARGUMENT", "reference_text_token_ids"),
             (talker_pb2.EncodeVoice(sample_rate_hz=24000), audio, "INVALID_ARGUMENT", "request_id")]
    for req, clip, code, words in cases:
        error = refused(voices, req, clip)
        assert error.code == code and words in error.message, (req.request_id, error.message)
    assert voices.num_pending == 0 and voices._worker is None   # nothing was queued or loaded


def test_worker_answers_prompts_and_errors_and_bounds_the_queue(synth):
    voices = encoding(synth, max_pending=3)
    audio = reference_audio()
    with one_cpu_thread():
        voices.submit(b"gw1", request("icl", text_ids=(5, 6, 7)), audio)
        voices.submit(b"gw2", request("xvec", x_vector_only=True), audio)
        voices.submit(b"gw1", request("silent"), np.zeros(24000 * 2, np.float32))
        error = refused(voices, request("full"), audio)
        assert error.code == "RESOURCE_EXHAUSTED"
        got = answers(voices, 3)
        want_icl = synth.clone_voice(audio, 24000, REF_TEXT, x_vector_only=False)
    voices.close()
    assert voices.num_pending == 0
    icl, xvec, silent = got["icl"], got["xvec"], got["silent"]
    assert icl.identity == b"gw1" and xvec.identity == b"gw2" and icl.error is None and xvec.error is None
    prompt = icl.encoded.prompt
    assert prompt.model == "tiny-base" and not prompt.x_vector_only and icl.encoded.encode_ms > 0
    np.testing.assert_allclose(prompt.speaker_embedding, want_icl.x_vector.numpy(), atol=1e-5)
    codes = np.asarray(prompt.reference_codes).reshape(-1, 16)
    assert prompt.num_reference_frames == len(codes) and np.array_equal(codes, want_icl.ref_codes.numpy())
    assert list(prompt.reference_text_token_ids) == [5, 6, 7]
    assert xvec.encoded.prompt.x_vector_only and not xvec.encoded.prompt.reference_codes
    np.testing.assert_allclose(xvec.encoded.prompt.speaker_embedding, prompt.speaker_embedding, atol=0)
    assert silent.error.code == "INVALID_ARGUMENT" and "silent" in silent.error.message.lower()


def test_a_repeated_clip_is_encoded_once_and_equals_a_fresh_encoding(synth):
    voices = encoding(synth)
    audio = reference_audio()
    other = (reference_audio() * 0.5).astype(np.float32)   # another clip: another voice
    with one_cpu_thread():
        voices.submit(b"gw", request("first"), audio)
        voices.submit(b"gw", request("twin"), audio)        # queued before the first finished
        first = answers(voices, 2)
        voices.submit(b"gw", request("again"), audio)       # answered from the cache, at once
        again = voices.take_finished()
        voices.submit(b"gw", request("xvec", x_vector_only=True), audio)   # another mode: not a hit
        voices.submit(b"gw", request("other-text", text_ids=(9, 9)), audio)  # another transcript
        voices.submit(b"gw", request("other-clip"), other)
        rest = answers(voices, 3)
        fresh = encoding(synth, max_cached=0)
        fresh.submit(b"gw", request("fresh"), audio)
        fresh_prompt = answers(fresh, 1)["fresh"].encoded.prompt
    voices.close()
    fresh.close()
    assert voices.num_encoded == 4 and fresh.num_encoded == 1   # first, xvec, other-text, other-clip
    assert [a.request_id for a in again] == ["again"] and again[0].encoded.encode_ms == 0.0
    for prompt in (first["first"].encoded.prompt, first["twin"].encoded.prompt, again[0].encoded.prompt):
        assert prompt == fresh_prompt
    assert rest["xvec"].encoded.prompt.x_vector_only
    assert list(rest["other-text"].encoded.prompt.reference_text_token_ids) == [9, 9]
    assert rest["other-clip"].encoded.prompt.speaker_embedding != fresh_prompt.speaker_embedding
    assert voices.num_pending == 0 and voices.cache.num_hits == 2


def test_the_cache_is_bounded_and_hands_out_copies():
    from talker_service.server.voice_cache import VoiceCache
    cache = VoiceCache(2)
    for key in (b"a", b"b", b"c"):
        cache.put(key, talker_pb2.VoicePrompt(model=key.decode()))
    assert len(cache) == 2 and cache.get(b"a") is None and cache.get(b"c").model == "c"
    got = cache.get(b"b")
    got.model = "changed"
    assert cache.get(b"b").model == "b"
