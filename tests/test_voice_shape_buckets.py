"""Reference-encoder shapes in buckets (voice/shape_buckets.py): a group runs at (clips rounded to a
power of two, longest rounded up to a multiple of bucket_s) with silent rows added, which changes
no clip's codes and keeps x-vectors within the batching tolerance; the warm-up runs every shape the
worker can meet, in the background, and gives way to requests."""
from __future__ import annotations

import queue
import time

import numpy as np
import pytest
import torch

from checkpoint.files import resolve_model_dir
from protos.tts.internal.v1 import talker_pb2
from talker_service.server.voice_jobs import VoiceEncoding
from talker_service.voice.batch_encode import ReferenceClip, ReferenceEncoder, forward_groups
from talker_service.voice.codec_encoder import load_codec_encoder
from talker_service.voice.shape_buckets import ShapeBuckets
from talker_service.voice.xvector import load_speaker_encoder
from test_voice_batch_encode import X_VECTOR_ATOL, clip
from test_vocoder_process_support import one_cpu_thread

RATE = 24000
BUCKETS = ShapeBuckets(max_clips=4, bucket_samples=RATE, max_batch_samples=8 * RATE, max_clip_samples=4 * RATE)


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    with one_cpu_thread():
        yield


def test_rounding_and_the_memory_fallback():
    assert [BUCKETS.clips(n) for n in (1, 2, 3, 4, 5)] == [1, 2, 4, 4, 5]
    assert [BUCKETS.samples(n) for n in (1, RATE, RATE + 1, 3 * RATE - 7)] == [RATE, RATE, 2 * RATE, 3 * RATE]
    assert BUCKETS.shape([RATE // 2] * 3) == (4, RATE)
    assert BUCKETS.shape([int(1.5 * RATE)] * 3) == (4, 2 * RATE)   # 4 x 2 s: within the 8 s budget
    # 4 x 3 s and 3 x 3 s would pass the budget: the group's own size, then its own length
    assert BUCKETS.shape([2 * RATE + 5] * 3) == (3, 2 * RATE + 5)
    assert BUCKETS.shape([int(2.5 * RATE)] * 2) == (2, 3 * RATE)


def test_warm_up_order_covers_every_shape_a_group_can_take():
    shapes = set(BUCKETS.warm_up_order())
    for num_clips in range(1, BUCKETS.max_clips + 1):
        for longest in range(RATE // 4, BUCKETS.max_clip_samples + 1, RATE // 4):
            if num_clips * longest <= BUCKETS.max_batch_samples:   # groups are bounded so (forward_groups)
                got = BUCKETS.shape([longest] * num_clips)
                if got[1] % BUCKETS.bucket_samples == 0:
                    assert got in shapes, (num_clips, longest, got)
    order = BUCKETS.warm_up_order()
    assert order[0] == (1, RATE) and order == sorted(order, key=lambda s: (s[1], s[0]))   # common first
    assert all(c * s <= BUCKETS.max_batch_samples for c, s in order)


@pytest.fixture(scope="module")
def encoders():
    model_dir = resolve_model_dir("tiny-base")
    return load_speaker_encoder(model_dir), load_codec_encoder(model_dir)


def test_bucketed_groups_give_each_clip_its_result(encoders):
    clips = [ReferenceClip(clip(1.3, 1.0), RATE, False), ReferenceClip(clip(2.2, 0.8), RATE, False),
             ReferenceClip(clip(1.7, 0.6), RATE, True)]
    plain, _ = ReferenceEncoder(*encoders, max_batch_samples=8 * RATE).encode(clips)
    bucketed, _ = ReferenceEncoder(*encoders, max_batch_samples=8 * RATE, buckets=BUCKETS).encode(clips)
    for a, b in zip(plain, bucketed):
        assert a.error is None and b.error is None
        assert torch.allclose(a.x_vector, b.x_vector, atol=X_VECTOR_ATOL, rtol=0)
        assert (a.codes is None and b.codes is None) or torch.equal(a.codes, b.codes)
    assert [len(g) for g in forward_groups([len(c.audio) for c in clips], 8 * RATE)] == [3]


def test_warm_up_runs_every_shape_once_and_gives_way_to_requests(monkeypatch):
    seen: list[tuple[int, int]] = []
    real = ReferenceEncoder._x_vectors
    monkeypatch.setattr(ReferenceEncoder, "_x_vectors",
                        lambda self, clips, pad_to, times, lap_s: (seen.append((len(clips), pad_to)),
                                                                   real(self, clips, pad_to, times, lap_s))[1])
    voices = VoiceEncoding(resolve_model_dir("tiny-base"), "base", "tiny-base", 48, max_batch_jobs=2,
                           max_batch_audio_s=4.0, warm_up=True, bucket_s=1.0)
    try:
        # a request while the warm-up runs is answered (the warm-up pauses for it, then goes on)
        request = talker_pb2.EncodeVoice(request_id="r1", model="tiny-base", x_vector_only=True, sample_rate_hz=RATE)
        voices.submit(b"gw", request, clip(1.5, 1.0))
        deadline = time.monotonic() + 60
        answers = []
        while not answers and time.monotonic() < deadline:
            answers = voices.take_finished()
            time.sleep(0.05)
        assert answers and answers[0].error is None and answers[0].encoded.prompt.speaker_embedding
        assert voices.wait_until_warm(60.0)   # what the talker waits for before SERVING (Base on CUDA)
        assert voices.worker.warm_up_left == [] and voices.worker.warm_up_s > 0
    finally:
        voices.close()
    expected = voices.buckets.warm_up_order()
    assert expected[0] == (1, RATE) and len(expected) == len(set(expected))
    warmed = [s for s in seen if s in set(expected)]
    assert set(warmed) == set(expected)
    assert seen.count((1, 2 * RATE)) >= 2   # the 1.5 s request ran at its bucket, warmed before or after


def test_warm_up_stops_when_a_request_waits_and_says_how_far_it_got(encoders):
    encoder = ReferenceEncoder(*encoders, max_batch_samples=8 * RATE, buckets=BUCKETS)
    shapes = BUCKETS.warm_up_order()
    calls = iter([False, False, True])   # a job is queued after two shapes
    assert encoder.warm_up(shapes, should_pause=lambda: next(calls)) == 2
    assert encoder.warm_up(shapes[2:4]) == 2


def test_nothing_to_wait_for_without_a_warm_up():
    cold = VoiceEncoding(resolve_model_dir("tiny-base"), "base", "tiny-base", 48, warm_up=False)
    not_base = VoiceEncoding(resolve_model_dir("tiny"), "custom_voice", "tiny", 48, warm_up=True)
    try:
        assert cold.wait_until_warm(0.0) and not_base.wait_until_warm(0.0)
        assert cold.buckets is None
    finally:
        cold.close()
        not_base.close()
