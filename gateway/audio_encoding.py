"""Output audio: speed change, resampling and encoding of streamed float32 PCM.

Maintained libraries do the signal work: soxr resamples (streaming, state kept across chunks),
librosa's phase vocoder changes speed (imported only when a request asks for speed != 1, since
importing it costs seconds), libsndfile (soundfile) writes Ogg Opus, mu-law and whole WAV files,
numpy converts to PCM16/float32. The only bytes written by hand are the streamed WAV header,
whose size fields must say "unknown length", which libsndfile cannot produce.
"""
from __future__ import annotations

import io
import logging
import struct
from dataclasses import dataclass

import numpy as np
import soundfile
import soxr

from protos.tts.v1 import config_pb2
from service_common.audio_samples import NO_FAULTS, SampleFaults, count_faults, is_clean, peak, repaired

logger = logging.getLogger(__name__)

E = config_pb2
OPUS_RATES_HZ = (8000, 12000, 16000, 24000, 48000)
MIN_RATE_HZ, MAX_RATE_HZ = 8000, 48000
_UNKNOWN_SIZE = 0xFFFFFFFF
# written by libsndfile, which wraps float samples past +-1.0 around instead of clipping them
_WRAPPING_ENCODINGS = (E.AUDIO_ENCODING_MULAW, E.AUDIO_ENCODING_OGG_OPUS)


def pcm16_bytes(pcm: np.ndarray, is_in_range: bool = False) -> bytes:
    """Little-endian 16-bit samples of float `pcm`. `is_in_range`: every sample is known to be finite
    and inside (-1, 1) (a checked chunk with no clipped sample), so the clamp, a pass over the samples
    that cost as much as the rest of the conversion, is left out."""
    if not is_in_range:
        pcm = np.clip(pcm, -1.0, 1.0)
    return (pcm * 32767.0).round().astype("<i2").tobytes()


def streaming_wav_header(sample_rate_hz: int) -> bytes:
    """RIFF/WAVE header of a 16-bit mono stream of unknown length (sizes 0xFFFFFFFF)."""
    byte_rate = sample_rate_hz * 2
    return (b"RIFF" + struct.pack("<I", _UNKNOWN_SIZE) + b"WAVE"
            + b"fmt " + struct.pack("<IHHIIHH", 16, 1, 1, sample_rate_hz, byte_rate, 2, 16)
            + b"data" + struct.pack("<I", _UNKNOWN_SIZE))


def whole_file(pcm: np.ndarray, sample_rate_hz: int, encoding: int) -> bytes:
    """A complete WAV or Ogg Opus file of mono float32 `pcm` (clamped to full scale: libsndfile
    wraps float samples past +-1.0 around rather than clipping them)."""
    pcm = np.clip(pcm, -1.0, 1.0)
    out = io.BytesIO()
    if encoding == E.AUDIO_ENCODING_WAV:
        soundfile.write(out, pcm, sample_rate_hz, format="WAV", subtype="PCM_16")
    elif encoding == E.AUDIO_ENCODING_OGG_OPUS:
        soundfile.write(out, pcm, sample_rate_hz, format="OGG", subtype="OPUS")
    else:
        raise ValueError(f"whole_file handles WAV and OGG_OPUS, not encoding {encoding}")
    return out.getvalue()


class _AppendSink(io.RawIOBase):
    """File object libsndfile writes an Ogg stream into; we take the new bytes after each write."""

    def __init__(self) -> None:
        self.buffer = bytearray()
        self.num_written = 0

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True  # libsndfile asks for the end and the start at open; it never rewrites Ogg

    def write(self, data) -> int:
        self.buffer += bytes(data)
        self.num_written += len(data)
        return len(data)

    def seek(self, offset: int, whence: int = 0) -> int:
        return self.num_written

    def tell(self) -> int:
        return self.num_written

    def take(self) -> bytes:
        out, self.buffer = bytes(self.buffer), bytearray()
        return out


@dataclass
class Encoded:
    audio: bytes
    num_samples: int       # output-rate samples this chunk accounts for
    # samples of the chunk that were NaN/inf (encoded as 0) and at or past full scale (clamped unless
    # the encoding is FLOAT32), as the vocoder or the encoder found them (service_common/audio_samples.py)
    faults: SampleFaults = NO_FAULTS


class StreamEncoder:
    """float32 PCM at `in_rate_hz` in, encoded bytes at `out_rate_hz` out, chunk by chunk."""

    def __init__(self, encoding: int, in_rate_hz: int, out_rate_hz: int, speed: float = 1.0) -> None:
        self.encoding = encoding
        self.out_rate_hz = out_rate_hz
        self.speed = speed
        self._resampler = (soxr.ResampleStream(in_rate_hz, out_rate_hz, 1, dtype="float32")
                           if in_rate_hz != out_rate_hz else None)
        self._is_header_sent = False
        self._opus: soundfile.SoundFile | None = None
        self._sink: _AppendSink | None = None
        self._opus_samples_pending = 0
        if encoding == E.AUDIO_ENCODING_OGG_OPUS:
            self._sink = _AppendSink()
            self._opus = soundfile.SoundFile(self._sink, "w", samplerate=out_rate_hz, channels=1,
                                             format="OGG", subtype="OPUS")

    def _stretch(self, pcm: np.ndarray) -> np.ndarray:
        if self.speed == 1.0 or pcm.size == 0:
            return pcm
        import librosa  # lazy: ~5 s import, paid only by requests that change speed

        # Per chunk: a chunk boundary restarts the phase vocoder; chunks are >= 2 frames
        # (3840 samples), longer than its 2048-sample window.
        return librosa.effects.time_stretch(pcm, rate=self.speed).astype(np.float32)

    def _convert(self, pcm: np.ndarray, is_last: bool) -> np.ndarray:
        pcm = np.ascontiguousarray(pcm, dtype=np.float32)
        if self._resampler is not None:
            pcm = self._resampler.resample_chunk(pcm, last=is_last)
        return self._stretch(pcm)

    def _encode(self, pcm: np.ndarray, is_last: bool, is_in_range: bool = False) -> Encoded:
        enc = self.encoding
        if enc in (E.AUDIO_ENCODING_PCM16, E.AUDIO_ENCODING_UNSPECIFIED):
            return Encoded(pcm16_bytes(pcm, is_in_range), pcm.size)
        if enc == E.AUDIO_ENCODING_FLOAT32:
            return Encoded(pcm.astype("<f4").tobytes(), pcm.size)
        if enc == E.AUDIO_ENCODING_WAV:
            header = b"" if self._is_header_sent else streaming_wav_header(self.out_rate_hz)
            self._is_header_sent = True
            return Encoded(header + pcm16_bytes(pcm, is_in_range), pcm.size)
        if enc == E.AUDIO_ENCODING_MULAW:
            out = io.BytesIO()
            if pcm.size:
                soundfile.write(out, pcm, self.out_rate_hz, format="RAW", subtype="ULAW")
            return Encoded(out.getvalue(), pcm.size)
        if enc == E.AUDIO_ENCODING_OGG_OPUS:
            if pcm.size:
                self._opus.write(pcm)
            if is_last:
                self._opus.close()
            self._opus_samples_pending += pcm.size
            data = self._sink.take()
            if not data and not is_last:
                return Encoded(b"", 0)  # libsndfile emits whole Ogg pages; the samples count later
            num, self._opus_samples_pending = self._opus_samples_pending, 0
            return Encoded(data, num)
        raise ValueError(f"unknown audio encoding {enc}")

    def encode(self, pcm: np.ndarray, is_last: bool = False, faults: SampleFaults | None = None) -> Encoded:
        """Encoded bytes of the next `pcm` chunk (may be empty for Opus until a page fills).

        `faults`: what the vocoder found in this chunk (PcmSampleFaults: it checked every sample on
        the GPU and sent NaN/inf as 0), taken as they are, with no second pass over the samples.
        None (a chunk that came without that check): the chunk is checked here, non-finite samples
        encoded as 0, before the resampler, whose state a NaN would poison for the rest of the stream.
        Resampled or stretched chunks are new samples (resampling can overshoot): their full-scale
        samples are counted where they are encoded, in place of the input's count. Samples past
        full scale are clamped where an integer encoding would wrap them (libsndfile's mu-law and
        Opus; PCM16 clamps as it converts); FLOAT32 keeps them."""
        if faults is None:
            pcm, faults = repaired(pcm)
        converted = self._convert(pcm, is_last)
        if converted is not pcm:   # resampled or stretched: count what is really encoded
            clipped = 0 if is_clean(peak(converted)) else count_faults(converted).num_clipped
            faults = SampleFaults(faults.num_nonfinite, clipped)
        if faults.num_clipped and self.encoding in _WRAPPING_ENCODINGS:
            converted = np.clip(converted, -1.0, 1.0)
        # no sample at or past full scale (the faults count them) and none non-finite (sent as 0)
        encoded = self._encode(converted, is_last, is_in_range=not faults.num_clipped)
        encoded.faults = faults
        return encoded

    def close(self) -> None:
        if self._opus is not None and not self._opus.closed:
            self._opus.close()
