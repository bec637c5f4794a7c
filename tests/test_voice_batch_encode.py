"""Clone references encoded as one batch (issue #14): each clip's x-vector and codes are the clip's
own, whatever its batch mates and their lengths.

Two kinds of check. Bitwise, where shapes are the same on both sides: what lies in a row past its
own clip (padding, or another clip's content) never changes that clip's mel frames, x-vector or
codes. Against the lone encode, where the batch shape differs: codes equal, x-vectors within
X_VECTOR_ATOL, because batched CPU kernels (oneDNN convs, reductions) round differently from
batch 1 - measured <= 3e-7 on x-vectors of magnitude ~1.3 in equal-length batches, <= 3e-6 when
a clip shares the batch with longer ones.
The control test shows what the same comparisons see when the masking is switched off.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from checkpoint.files import resolve_model_dir
from talker_service.voice import codec_encoder as codec_module
from talker_service.voice.batch_encode import ReferenceClip, ReferenceEncoder, forward_groups
from talker_service.voice.codec_encoder import load_codec_encoder
from talker_service.voice.reference_audio import resample_to_24k
from talker_service.voice.xvector import extract_x_vector, load_speaker_encoder
from test_clone_stack import reference_audio
from test_vocoder_process_support import one_cpu_thread

# as the project's other float comparisons: 3x the largest rounding seen (2.9e-6, a short clip beside a
# long one, whose mean and softmax count its frames by mask), while one padded frame leaking into a
# clip's statistics moves its x-vector by 8e-2 and plain right padding by ~1 (the control test)
X_VECTOR_ATOL = 1e-5


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    with one_cpu_thread():
        yield


@pytest.fixture(scope="module")
def encoders():
    model_dir = resolve_model_dir("tiny-base")
    return load_speaker_encoder(model_dir), load_codec_encoder(model_dir)


def clip(seconds: float, gain: float, extra_samples: int = 0) -> np.ndarray:
    """A distinct 24 kHz voiced clip per (gain): the gain also sets a slow ripple of its own."""
    audio = reference_audio(seconds + 0.01)[: int(seconds * 24000) + extra_samples]
    return (gain * audio * (1.0 + 0.3 * np.cos(np.arange(len(audio)) / (700 * gain)))).astype(np.float32)


def at_16k(audio_24k: np.ndarray) -> np.ndarray:
    import librosa
    return librosa.resample(audio_24k, orig_sr=24000, target_sr=16000).astype(np.float32)


# equal lengths, lengths apart by less than a mel hop / a codec frame, far apart, 16 kHz, both modes
MIXED = [ReferenceClip(clip(2.0, 1.0), 24000, False), ReferenceClip(clip(2.0, 0.8), 24000, True),
         ReferenceClip(clip(2.0, 0.6, extra_samples=100), 24000, False),
         ReferenceClip(clip(3.0, 0.9, extra_samples=1234), 24000, True),
         ReferenceClip(clip(1.25, 1.1), 24000, False), ReferenceClip(clip(4.0, 0.7, extra_samples=7), 24000, False),
         ReferenceClip(at_16k(clip(2.5, 0.5)), 16000, False)]


def alone(encoder: ReferenceEncoder, reference: ReferenceClip):
    (result,), _ = encoder.encode([reference])
    assert result.error is None, result.error
    return result


def test_a_mixed_batch_gives_each_clip_its_lone_result(encoders):
    speaker, codec = encoders
    encoder = ReferenceEncoder(speaker, codec)
    results, times = encoder.encode(MIXED)
    assert times.num_forwards == 2   # one speaker forward over all seven, one codec forward over the five in-context
    for reference, result in zip(MIXED, results):
        assert result.error is None, result.error
        solo = alone(encoder, reference)
        audio_24k = resample_to_24k(reference.audio, reference.sample_rate_hz)
        # the lone encode is the offline path's, bit for bit (same kernels, same shapes)
        assert torch.equal(solo.x_vector, extract_x_vector(speaker, audio_24k))
        torch.testing.assert_close(result.x_vector, solo.x_vector, rtol=0, atol=X_VECTOR_ATOL)
        if reference.x_vector_only:
            assert result.codes is None and solo.codes is None
        else:
            assert torch.equal(solo.codes, codec.encode(audio_24k))
            assert torch.equal(result.codes, solo.codes)
            assert result.codes.shape == (-(-len(audio_24k) // 1920), 16)


def test_padding_and_batch_mates_never_reach_a_clips_frames(encoders):
    """Same shapes on both sides, so the comparison is bitwise: only a clip's own samples count."""
    speaker, codec = encoders
    encoder = ReferenceEncoder(speaker, codec)
    rng = np.random.default_rng(1)
    short, long_a = torch.from_numpy(clip(1.5, 1.0, extra_samples=77)), torch.from_numpy(clip(3.0, 0.8))
    long_b = torch.from_numpy(rng.normal(0.0, 0.3, len(long_a)).astype(np.float32))   # another batch mate
    mel_a, frames = encoder.mel.forward_clips([short, long_a])
    mel_b, _ = encoder.mel.forward_clips([short, long_b])
    assert torch.equal(mel_a[0, :, :frames[0]], mel_b[0, :, :frames[0]])
    garbage = mel_a.clone()
    garbage[0, :, frames[0]:] = torch.from_numpy(rng.normal(0.0, 50.0, garbage[0, :, frames[0]:].shape)).float()
    with torch.inference_mode():
        assert torch.equal(speaker(mel_a, frames)[0], speaker(garbage, frames)[0])
    samples = [len(short), len(long_a)]
    padded = torch.nn.utils.rnn.pad_sequence([short, long_a], batch_first=True).unsqueeze(1)   # [2, 1, N]
    noisy = padded.clone()
    noisy[0, 0, len(short):] = torch.from_numpy(rng.normal(0.0, 0.5, len(long_a) - len(short))).float()
    zero_codes, noisy_codes = codec.codes_of_padded(padded, samples), codec.codes_of_padded(noisy, samples)
    assert all(torch.equal(a, b) for a, b in zip(zero_codes, noisy_codes))


def test_the_checks_fail_without_the_masking(encoders, monkeypatch):
    """Controls: plain right padding (what the official batched encode does) is not the lone result."""
    speaker, codec = encoders
    encoder = ReferenceEncoder(speaker, codec)
    short, longer = torch.from_numpy(clip(1.5, 1.0, extra_samples=77)), torch.from_numpy(clip(3.0, 0.8))
    mel, frames = encoder.mel.forward_clips([short, longer])
    with torch.inference_mode():
        masked, unmasked = speaker(mel, frames)[0], speaker(mel)[0]
    solo = alone(encoder, ReferenceClip(short.numpy(), 24000, True)).x_vector
    assert (masked - solo).abs().max() <= X_VECTOR_ATOL < 1e-2 < (unmasked - solo).abs().max()
    monkeypatch.setattr(codec_module, "_as_if_alone", lambda conv, x, lengths: x)
    assert not torch.equal(codec.encode_batch([short, longer])[0], codec.encode(short))


def test_forward_groups_bound_the_padded_audio():
    assert forward_groups([5, 3, 9, 3], 100) == [[1, 3, 0, 2]]
    assert forward_groups([5, 3, 9, 3], 18) == [[1, 3, 0], [2]]   # 3 x 5 fits, 4 x 9 does not
    assert forward_groups([50, 3], 20) == [[1], [0]]              # a clip over the budget goes alone
    assert forward_groups([], 10) == []
