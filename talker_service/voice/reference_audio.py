"""Check clone reference audio and bring it to 24 kHz, refusing what would make a bad voice.

Limits and why:
- at least 1.0 s: the x-vector pools statistics over time (1 s = 93 mel frames) and the in-context
  prompt needs a dozen codec frames to carry a voice; the official demos use 3-10 s clips, below
  1 s the cloned voice is mostly noise. (Hard floors: the mel's reflect pad needs > 384 samples.)
- at most 30 s by default: in-context mode puts 12.5 codec frames per second into every request's
  prefill (30 s = 375 positions + text), which costs KV cache for the whole utterance.
- silent = RMS below -60 dBFS (1e-3 of full scale): speech sits around -20..-35 dBFS; a clip this
  quiet gives an x-vector of the noise floor.
- sample rate in [8 kHz, 192 kHz]: below 8 kHz there is no speech band left to resample; above
  192 kHz is not audio we expect from a client.
- mono float samples only; channels are not mixed silently (a stereo clip with one dead or
  phase-inverted channel would clone badly), and integer PCM must be scaled by the caller.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

logger = logging.getLogger(__name__)

TARGET_SAMPLE_RATE_HZ = 24000


@dataclass(frozen=True)
class ReferenceAudioLimits:
    min_duration_s: float = 1.0
    max_duration_s: float = 30.0
    min_rms: float = 1e-3
    min_sample_rate_hz: int = 8000
    max_sample_rate_hz: int = 192000

    def __post_init__(self) -> None:
        if not 0 < self.min_duration_s <= self.max_duration_s:
            raise ValueError(f"need 0 < min_duration_s <= max_duration_s, got {self.min_duration_s}, {self.max_duration_s}")
        if not 0 < self.min_sample_rate_hz <= self.max_sample_rate_hz:
            raise ValueError(f"bad sample-rate limits [{self.min_sample_rate_hz}, {self.max_sample_rate_hz}]")


def validate_reference_audio(audio: np.ndarray, sample_rate_hz: int, limits: ReferenceAudioLimits = ReferenceAudioLimits()) -> np.ndarray:
    """The audio as float32 [N] if it is usable as a clone reference; otherwise a ValueError saying why."""
    if not isinstance(audio, np.ndarray):
        raise ValueError(f"reference audio must be a numpy array of samples, got {type(audio).__name__}")
    if isinstance(sample_rate_hz, bool) or not isinstance(sample_rate_hz, (int, np.integer)):
        raise ValueError(f"reference audio sample rate must be an integer in Hz, got {sample_rate_hz!r}")
    sample_rate_hz = int(sample_rate_hz)
    if not limits.min_sample_rate_hz <= sample_rate_hz <= limits.max_sample_rate_hz:
        raise ValueError(
            f"reference audio sample rate {sample_rate_hz} Hz is unsupported; use "
            f"{limits.min_sample_rate_hz}..{limits.max_sample_rate_hz} Hz (24000 Hz avoids resampling)"
        )
    if audio.ndim != 1:
        raise ValueError(
            f"reference audio must be mono [samples], got shape {audio.shape}; mix the channels down "
            "(e.g. audio.mean(axis=-1)) before cloning"
        )
    if not np.issubdtype(audio.dtype, np.floating):
        raise ValueError(
            f"reference audio must be float samples in [-1, 1], got dtype {audio.dtype}; "
            "scale integer PCM first (int16: divide by 32768)"
        )
    duration_s = audio.shape[0] / sample_rate_hz
    if duration_s < limits.min_duration_s:
        raise ValueError(
            f"reference audio is too short: {duration_s:.3f} s ({audio.shape[0]} samples at {sample_rate_hz} Hz); "
            f"need at least {limits.min_duration_s:g} s"
        )
    if duration_s > limits.max_duration_s:
        raise ValueError(f"reference audio is too long: {duration_s:.1f} s; the limit is {limits.max_duration_s:g} s")
    audio = audio.astype(np.float32, copy=False)
    if not np.isfinite(audio).all():
        raise ValueError(f"reference audio contains {int((~np.isfinite(audio)).sum())} NaN or Inf samples")
    rms = float(np.sqrt(np.mean(np.square(audio, dtype=np.float64))))
    if rms < limits.min_rms:
        level = "-inf" if rms == 0 else f"{20 * np.log10(rms):.1f}"
        raise ValueError(
            f"reference audio is silent: RMS {rms:.2e} ({level} dBFS) is below {limits.min_rms:g} "
            f"({20 * np.log10(limits.min_rms):.0f} dBFS)"
        )
    peak = float(np.max(np.abs(audio)))
    if peak > 1.0:
        # the reference model only warns here too; the x-vector of clipped-range input still works
        logger.warning("reference audio peaks at %.3f, outside [-1, 1]; is it scaled integer PCM?", peak)
    return audio


def resample_to_24k(audio: np.ndarray, sample_rate_hz: int) -> np.ndarray:
    """float32 [N'] at 24 kHz, with librosa's default soxr_hq resampler as the reference uses."""
    if sample_rate_hz == TARGET_SAMPLE_RATE_HZ:
        return audio
    import librosa  # only the cloning path needs librosa (and soxr)

    resampled = librosa.resample(audio.astype(np.float32), orig_sr=int(sample_rate_hz), target_sr=TARGET_SAMPLE_RATE_HZ)
    return resampled.astype(np.float32)
