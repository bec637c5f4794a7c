"""Reference-audio checks (each bad input -> a ValueError that says what is wrong) and resampling."""
from __future__ import annotations

import librosa
import numpy as np
import pytest

from talker_service.voice.reference_audio import ReferenceAudioLimits, resample_to_24k, validate_reference_audio


def _speechlike(duration_s: float, sample_rate_hz: int, rms: float = 0.1) -> np.ndarray:
    rng = np.random.default_rng(0)
    audio = rng.standard_normal(int(duration_s * sample_rate_hz)).astype(np.float32)
    return audio * (rms / float(np.sqrt(np.mean(audio**2))))


def test_accepts_good_audio_and_returns_float32():
    audio = _speechlike(2.0, 16000).astype(np.float64)
    out = validate_reference_audio(audio, 16000)
    assert out.dtype == np.float32 and out.shape == audio.shape


@pytest.mark.parametrize(
    "audio, sample_rate_hz, message",
    [
        (_speechlike(0.5, 24000), 24000, r"too short: 0\.500 s .* at least 1 s"),
        (_speechlike(31.0, 8000), 8000, r"too long: 31\.0 s; the limit is 30 s"),
        (np.zeros(48000, dtype=np.float32), 24000, r"silent: RMS 0\.00e\+00 \(-inf dBFS\)"),
        (_speechlike(2.0, 24000, rms=1e-4), 24000, r"silent: RMS 1\.00e-04 \(-80\.0 dBFS\)"),
        (_speechlike(2.0, 4000), 4000, r"sample rate 4000 Hz is unsupported; use 8000\.\.192000 Hz"),
        (_speechlike(2.0, 24000), 384000, "sample rate 384000 Hz is unsupported"),
        (_speechlike(2.0, 24000), 24000.0, "sample rate must be an integer"),
        (np.stack([_speechlike(2.0, 24000)] * 2, axis=1), 24000, r"must be mono .* shape \(48000, 2\)"),
        ((_speechlike(2.0, 24000) * 32767).astype(np.int16), 24000, "must be float samples .* int16"),
        (np.where(np.arange(48000) == 7, np.nan, _speechlike(2.0, 24000)).astype(np.float32), 24000, "1 NaN or Inf"),
        ([0.1] * 48000, 24000, "must be a numpy array"),
    ],
)
def test_bad_reference_audio_is_refused_with_reason(audio, sample_rate_hz, message):
    with pytest.raises(ValueError, match=message):
        validate_reference_audio(audio, sample_rate_hz)


def test_limits_are_configurable():
    limits = ReferenceAudioLimits(min_duration_s=0.25, max_duration_s=3.0, min_rms=1e-5)
    validate_reference_audio(_speechlike(0.5, 24000, rms=1e-4), 24000, limits)
    with pytest.raises(ValueError, match="the limit is 3 s"):
        validate_reference_audio(_speechlike(4.0, 24000), 24000, limits)
    with pytest.raises(ValueError, match="min_duration_s <= max_duration_s"):
        ReferenceAudioLimits(min_duration_s=5.0, max_duration_s=1.0)


def test_resample_matches_librosa_default_and_keeps_24k_untouched():
    audio = _speechlike(1.5, 44100)
    out = resample_to_24k(audio, 44100)
    expected = librosa.resample(audio, orig_sr=44100, target_sr=24000, res_type="soxr_hq")
    assert out.dtype == np.float32 and out.shape == (36000,)
    np.testing.assert_array_equal(out, expected)
    same = _speechlike(1.0, 24000)
    assert resample_to_24k(same, 24000) is same
