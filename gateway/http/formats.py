"""The `response_format`s the HTTP API serves, and how each is produced.

pcm, wav and opus stream: the gateway's gRPC stream already encodes them chunk by chunk (a WAV
header with an unknown length first; Ogg pages as they fill). flac and mp3 are whole-file formats
here: libsndfile rewrites their headers at the end (FLAC's STREAMINFO, MP3's Xing frame count), and
bytes sent without those rewrites decoded short in a check (12168 of 48000 MP3 samples), so their
bytes leave once synthesis ends, encoded from float PCM.
"""
from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np
import soundfile

from protos.tts.v1 import config_pb2

NATIVE_RATE_HZ = 24000


@dataclass(frozen=True)
class OutputFormat:
    name: str
    content_type: str
    grpc_encoding: int
    sample_rate_hz: int
    is_streamed: bool
    soundfile_format: tuple[str, str] | None = None   # (format, subtype) for whole-file formats

    def whole_file(self, pcm_f32: np.ndarray) -> bytes:
        """The file of float PCM that came as FLOAT32 (which keeps samples past full scale; the
        gateway counted them), clamped first as the gateway's own whole files are: what libsndfile
        does past full scale differs by format (it wraps for some integer encodings)."""
        out = io.BytesIO()
        soundfile.write(out, np.clip(pcm_f32, -1.0, 1.0), self.sample_rate_hz, format=self.soundfile_format[0],
                        subtype=self.soundfile_format[1])
        return out.getvalue()


E = config_pb2
FORMATS = {
    "mp3": OutputFormat("mp3", "audio/mpeg", E.AUDIO_ENCODING_FLOAT32, NATIVE_RATE_HZ, False, ("MP3", "MPEG_LAYER_III")),
    "opus": OutputFormat("opus", "audio/ogg", E.AUDIO_ENCODING_OGG_OPUS, NATIVE_RATE_HZ, True),
    "flac": OutputFormat("flac", "audio/flac", E.AUDIO_ENCODING_FLOAT32, NATIVE_RATE_HZ, False, ("FLAC", "PCM_16")),
    "wav": OutputFormat("wav", "audio/wav", E.AUDIO_ENCODING_WAV, NATIVE_RATE_HZ, True),
    # OpenAI's pcm: raw 24 kHz 16-bit little-endian mono
    "pcm": OutputFormat("pcm", "audio/pcm", E.AUDIO_ENCODING_PCM16, NATIVE_RATE_HZ, True),
}
