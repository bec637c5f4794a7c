"""ENCODE_VOICE under load, in process: requests queued while the encoder thread is busy are
encoded together in one batch (fewer forwards than requests), each answer is the request's own
(as when it is encoded alone), copies of one clip are encoded once, and a bad clip or a device
fault fails only its own request. The encoder thread is held inside its first forward so that
the rest are queued before it looks again: which requests share a batch is decided, not raced."""
from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest

from checkpoint.files import resolve_model_dir
from protos.tts.internal.v1 import talker_pb2
from talker_service.model.loader import read_talker_config
from talker_service.server.voice_jobs import VoiceEncoding
from test_vocoder_process_support import one_cpu_thread
from test_voice_batch_encode import X_VECTOR_ATOL, clip

WAIT_S = 60.0


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    with one_cpu_thread():
        yield


def encoding(**kw) -> VoiceEncoding:
    model_dir = resolve_model_dir("tiny-base")
    return VoiceEncoding(model_dir, "base", "tiny-base", read_talker_config(model_dir).hidden_size, **kw)


def request(rid: str, x_vector_only: bool = False, text_ids=(11, 12, 13)) -> talker_pb2.EncodeVoice:
    text_ids = [] if x_vector_only else list(text_ids)
    return talker_pb2.EncodeVoice(request_id=rid, model="tiny-base", x_vector_only=x_vector_only,
                                  sample_rate_hz=24000, reference_text_token_ids=text_ids)


def answers(voices: VoiceEncoding, count: int) -> dict:
    got, deadline = {}, time.monotonic() + WAIT_S
    while len(got) < count:
        assert time.monotonic() < deadline, f"only {sorted(got)} answered"
        got.update({a.request_id: a for a in voices.take_finished()})
        time.sleep(0.01)
    return got


class Counted:
    """Wraps an encoder call: the clips of every call, and the first call held until released."""

    def __init__(self, forward, hold: bool = False, fails_on=None) -> None:
        self.forward = forward
        self.num_clips: list[int] = []
        self.entered = threading.Event()
        self.release = threading.Event()
        if not hold:
            self.release.set()
        self.fails_on = fails_on   # clip -> True: the call raises, as a device fault would

    def __call__(self, clips, *args):
        self.num_clips.append(len(clips))
        self.entered.set()
        assert self.release.wait(WAIT_S)
        if self.fails_on is not None and any(self.fails_on(c) for c in clips):
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        return self.forward(clips, *args)


def counted(voices: VoiceEncoding, hold: bool = False, codec_fails_on=None) -> tuple[Counted, Counted]:
    encoder = voices.encoder()   # loaded here, before the worker, so its calls can be counted
    speaker = Counted(encoder.speaker_encoder, hold=hold)
    codec = Counted(encoder.codec_encoder.encode_batch, fails_on=codec_fails_on)
    encoder.speaker_encoder = speaker
    encoder.codec_encoder = SimpleNamespace(encode_batch=codec)
    return speaker, codec


def held_then_together(voices: VoiceEncoding, speaker: Counted, first, rest) -> dict:
    """`first` encoded alone (held in its forward) while `rest` is queued, then all answers."""
    voices.submit(b"gw", *first)
    assert speaker.entered.wait(WAIT_S)
    for item in rest:
        voices.submit(b"gw", *item)
    speaker.release.set()
    return answers(voices, 1 + len(rest))


def lone_prompt(req: talker_pb2.EncodeVoice, audio: np.ndarray) -> talker_pb2.VoicePrompt:
    solo = encoding(max_cached=0)
    try:
        solo.submit(b"gw", req, audio)
        return answers(solo, 1)[req.request_id].encoded.prompt
    finally:
        solo.close()


def assert_same_prompt(got: talker_pb2.VoicePrompt, want: talker_pb2.VoicePrompt) -> None:
    np.testing.assert_allclose(got.speaker_embedding, want.speaker_embedding, rtol=0, atol=X_VECTOR_ATOL)
    assert list(got.reference_codes) == list(want.reference_codes)
    assert got.num_reference_frames == want.num_reference_frames and got.x_vector_only == want.x_vector_only
    assert list(got.reference_text_token_ids) == list(want.reference_text_token_ids)


def test_requests_queued_together_are_encoded_in_one_batch_each_as_alone():
    voices = encoding()
    speaker, codec = counted(voices, hold=True)
    jobs = [(request("r0"), clip(2.0, 1.0)), (request("r1", text_ids=(5, 6)), clip(2.0, 0.8)),
            (request("r2", x_vector_only=True), clip(3.0, 0.6, extra_samples=100)),
            (request("r3"), clip(1.5, 0.9, extra_samples=1234)), (request("r4", x_vector_only=True), clip(2.0, 1.1)),
            (request("r5"), clip(4.0, 0.7, extra_samples=7))]
    try:
        got = held_then_together(voices, speaker, jobs[0], jobs[1:])
        stats = voices.stats_proto(reset=False)
    finally:
        voices.close()
    assert speaker.num_clips == [1, 5] and codec.num_clips == [1, 3]   # 4 forwards for 6 requests
    assert stats.num_batches == 2 and dict(stats.batch_size_histogram) == {1: 1, 5: 1} and stats.num_forwards == 4
    assert stats.num_encoded == 6 and stats.num_failed == 0 and voices.num_pending == 0
    assert stats.queue_wait.count == 6 and stats.batch_time.count == 2 and stats.speaker_time.max_ms > 0
    for req, audio in jobs:
        answer = got[req.request_id]
        assert answer.error is None, answer.error
        assert_same_prompt(answer.encoded.prompt, lone_prompt(req, audio))


def test_copies_of_one_clip_in_a_batch_are_encoded_once():
    voices = encoding()
    speaker, codec = counted(voices, hold=True)
    audio, other = clip(2.0, 1.0), clip(2.0, 0.5)
    try:
        got = held_then_together(voices, speaker, (request("other"), other),
                                 [(request("a"), audio), (request("b"), audio), (request("c"), audio)])
        voices.submit(b"gw", request("later"), audio)   # answered from the cache on receipt
        got.update(answers(voices, 1))
    finally:
        voices.close()
    assert speaker.num_clips == [1, 1] and codec.num_clips == [1, 1]
    assert voices.num_encoded == 2 and voices.cache.num_hits == 3   # b and c in the batch, then "later"
    first = got["a"].encoded.prompt
    for rid in ("b", "c", "later"):
        assert got[rid].encoded.prompt == first and got[rid].encoded.request_id == rid


def test_a_failing_clip_fails_only_its_own_request():
    voices = encoding()
    faulty = clip(2.0, 0.3, extra_samples=11)
    speaker, codec = counted(voices, hold=True, codec_fails_on=lambda c: len(c) == len(faulty))
    good = [(request("good-icl"), clip(2.0, 0.8)), (request("good-xvec", x_vector_only=True), clip(3.0, 0.6)),
            (request("good-icl-2", text_ids=(7,)), clip(2.5, 1.1))]
    bad = [(request("silent"), np.zeros(2 * 24000, np.float32)), (request("short"), clip(0.5, 1.0)),
           (request("nan"), np.full(2 * 24000, np.nan, np.float32)), (request("faulty"), faulty)]
    try:
        got = held_then_together(voices, speaker, good[0], good[1:] + bad)
    finally:
        voices.close()
    assert got["silent"].error.code == "INVALID_ARGUMENT" and "silent" in got["silent"].error.message
    assert got["short"].error.code == "INVALID_ARGUMENT" and "too short" in got["short"].error.message
    assert got["nan"].error.code == "INVALID_ARGUMENT" and "NaN" in got["nan"].error.message
    assert got["faulty"].error.code == "INTERNAL" and "illegal memory access" in got["faulty"].error.message
    # the batch's codec forward failed as a whole, then each clip ran alone: only "faulty" failed again
    assert codec.num_clips == [1, 2, 1, 1]   # good-icl alone; then good-icl-2 + faulty, each again alone
    assert voices.num_failed == 4 and voices.num_encoded == 3
    for req, audio in good:
        assert got[req.request_id].error is None, got[req.request_id].error
        assert_same_prompt(got[req.request_id].encoded.prompt, lone_prompt(req, audio))


def test_stats_windows_reset_and_counters_keep_counting():
    voices = encoding()
    try:
        voices.submit(b"gw", request("one", x_vector_only=True), clip(1.5, 1.0))
        answers(voices, 1)
        first = voices.stats_proto(reset=True)
        second = voices.stats_proto(reset=False)
    finally:
        voices.close()
    assert first.num_batches == 1 and first.batch_time.count == 1 and first.codec_time.max_ms == 0.0
    assert first.prepare_time.count == first.mel_time.count == first.speaker_time.count == 1
    assert second.num_batches == 1 and second.num_encoded == 1 and second.batch_time.count == 0
    assert not second.batch_size_histogram
