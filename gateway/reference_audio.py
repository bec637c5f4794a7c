"""Uploaded reference audio -> mono float32 at 24 kHz, decoded with libsndfile/numpy, resampled with soxr."""
from __future__ import annotations

import io
import logging

import numpy as np
import soundfile
import soxr

from gateway.errors import InvalidArgument
from gateway.model_info import NATIVE_SAMPLE_RATE_HZ
from protos.tts.v1 import config_pb2

logger = logging.getLogger(__name__)

_CONTAINERS = {
    config_pb2.REFERENCE_AUDIO_ENCODING_UNSPECIFIED: None,
    config_pb2.REFERENCE_AUDIO_ENCODING_WAV: "WAV",
    config_pb2.REFERENCE_AUDIO_ENCODING_FLAC: "FLAC",
    config_pb2.REFERENCE_AUDIO_ENCODING_OGG: "OGG",
    config_pb2.REFERENCE_AUDIO_ENCODING_MP3: "MP3",
}
_RAW = {config_pb2.REFERENCE_AUDIO_ENCODING_PCM16: "<i2", config_pb2.REFERENCE_AUDIO_ENCODING_FLOAT32: "<f4"}


def decode_reference_audio(ref: config_pb2.ReferenceAudio, field: str, min_s: float, max_s: float) -> np.ndarray:
    """float32 [num_samples] at 24000 Hz; InvalidArgument naming `field` otherwise."""
    if not ref.data:
        raise InvalidArgument(f"{field}.data", "reference audio is empty")
    if ref.encoding in _RAW:
        if not 8000 <= ref.sample_rate_hz <= 192000:
            raise InvalidArgument(f"{field}.sample_rate_hz", f"{ref.sample_rate_hz} Hz; headerless audio needs "
                                  "a sample rate in 8000..192000")
        dtype = np.dtype(_RAW[ref.encoding])
        if len(ref.data) % dtype.itemsize:
            raise InvalidArgument(f"{field}.data", f"{len(ref.data)} bytes is not a whole number of "
                                  f"{dtype.itemsize}-byte samples")
        audio = np.frombuffer(ref.data, dtype=dtype).astype(np.float32)
        if dtype.kind == "i":
            audio /= 32768.0
        rate = ref.sample_rate_hz
    elif ref.encoding in _CONTAINERS:
        # Bound the work before decoding: a header could claim hours of audio.
        try:
            # libsndfile detects the container from the bytes; the declared encoding is a hint only.
            with soundfile.SoundFile(io.BytesIO(ref.data)) as f:
                if f.samplerate <= 0 or (f.frames > 0 and f.frames / f.samplerate > max_s * 2 + 1):
                    raise InvalidArgument(f"{field}.data", f"reference audio is too long: "
                                          f"{f.frames / max(f.samplerate, 1):.1f} s; the limit is {max_s:g} s")
                audio = f.read(dtype="float32", always_2d=True).mean(axis=1)
                rate = f.samplerate
        except (soundfile.LibsndfileError, RuntimeError, TypeError) as exc:
            raise InvalidArgument(f"{field}.data", f"reference audio could not be decoded ({exc})") from None
    else:
        raise InvalidArgument(f"{field}.encoding", f"unknown reference audio encoding {ref.encoding}")
    duration_s = audio.size / rate
    if duration_s > max_s:
        raise InvalidArgument(f"{field}.data", f"reference audio is too long: {duration_s:.1f} s; the limit is {max_s:g} s")
    if duration_s < min_s:
        raise InvalidArgument(f"{field}.data", f"reference audio is too short: {duration_s:.2f} s; "
                              f"at least {min_s:g} s is needed")
    if not np.isfinite(audio).all():
        raise InvalidArgument(f"{field}.data", "reference audio contains NaN or Inf samples")
    if rate != NATIVE_SAMPLE_RATE_HZ:
        audio = soxr.resample(audio, rate, NATIVE_SAMPLE_RATE_HZ).astype(np.float32)
    return np.ascontiguousarray(audio, dtype=np.float32)
