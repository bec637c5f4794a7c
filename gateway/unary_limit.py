"""Unary Synthesize never produces a reply its caller cannot receive.

Its reply carries the whole audio in one message; a gRPC client refuses a message over its
receive limit (4 MiB by default) only after the server did all the work. So before any work the
gateway bounds the reply from the request's frame budget (service_common/frame_budget.py, the
same number the talker stops at) and refuses a request whose worst case is over
--max-unary-audio-bytes (default protos/limits.py MAX_UNARY_AUDIO_BYTES) with INVALID_ARGUMENT
pointing to StreamSynthesize, which has no such limit.
"""
from __future__ import annotations

import math

from gateway.errors import InvalidArgument
from gateway.resolve import Resolved
from protos.tts.v1 import config_pb2
from service_common.frame_budget import FRAME_RATE_HZ, frame_budget

E = config_pb2
_BYTES_PER_SAMPLE = {E.AUDIO_ENCODING_PCM16: 2, E.AUDIO_ENCODING_FLOAT32: 4, E.AUDIO_ENCODING_MULAW: 1,
                     E.AUDIO_ENCODING_WAV: 2}
# Opus tops out at 510 kbit/s (63,750 B/s) whatever the sample rate; Ogg pages add about 1%.
_OPUS_MAX_BYTES_PER_S = 65_000
# WAV and Ogg file headers (libsndfile writes 44 bytes for PCM WAV, a few hundred for Ogg Opus).
_FILE_HEADER_BYTES = 4096
_HAS_HEADER = {E.AUDIO_ENCODING_WAV, E.AUDIO_ENCODING_OGG_OPUS}


def bytes_per_second(encoding: int, sample_rate_hz: int) -> int:
    """Most bytes one second of output audio takes in `encoding` at `sample_rate_hz`."""
    if encoding == E.AUDIO_ENCODING_OGG_OPUS:
        return _OPUS_MAX_BYTES_PER_S
    return sample_rate_hz * _BYTES_PER_SAMPLE[encoding]


def worst_case_audio_bytes(num_frames: int, encoding: int, sample_rate_hz: int, speed: float) -> int:
    """Bytes of `num_frames` codec frames as output audio (speed < 1 lengthens it)."""
    audio_s = num_frames / FRAME_RATE_HZ / speed
    header = _FILE_HEADER_BYTES if encoding in _HAS_HEADER else 0
    return math.ceil(audio_s * bytes_per_second(encoding, sample_rate_hz)) + header


def max_frames_within(limit_bytes: int, encoding: int, sample_rate_hz: int, speed: float) -> int:
    """The most frames whose worst-case audio fits `limit_bytes` (0 if not even one does)."""
    header = _FILE_HEADER_BYTES if encoding in _HAS_HEADER else 0
    frames = math.floor((limit_bytes - header) / bytes_per_second(encoding, sample_rate_hz) * FRAME_RATE_HZ * speed)
    while frames > 0 and worst_case_audio_bytes(frames, encoding, sample_rate_hz, speed) > limit_bytes:
        frames -= 1   # float rounding at the boundary
    return max(frames, 0)


def check_unary_audio(resolved: Resolved, num_text_tokens: int, limit_bytes: int) -> int:
    """The request's frame budget; InvalidArgument if its worst-case audio is over `limit_bytes`."""
    budget = frame_budget(num_text_tokens, resolved.max_frames, resolved.sampling.min_frames)
    worst = worst_case_audio_bytes(budget, resolved.encoding, resolved.sample_rate_hz, resolved.speed)
    if worst <= limit_bytes:
        return budget
    fits = max_frames_within(limit_bytes, resolved.encoding, resolved.sample_rate_hz, resolved.speed)
    encoding = E.AudioEncoding.Name(resolved.encoding).removeprefix("AUDIO_ENCODING_")
    raise InvalidArgument(
        "text", f"unary Synthesize returns all audio in one message; for this request that may be up to "
        f"{budget} frames ({budget / FRAME_RATE_HZ / resolved.speed:.1f} s, {worst} bytes of {encoding} at "
        f"{resolved.sample_rate_hz} Hz), over this server's limit of {limit_bytes} bytes per reply "
        f"(--max-unary-audio-bytes). Use StreamSynthesize for long audio, or set config.sampling.max_frames "
        f"<= {fits}")
