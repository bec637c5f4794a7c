"""What the vocoder engine hands back: PCM chunks (with their timing), request errors, and the
`EngineError` its request calls raise. Plain data, shared by the engine and the server."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from service_common.audio_samples import NO_FAULTS, SampleFaults


class EngineError(Exception):
    """A request-level failure with a gRPC-style status name (INVALID_ARGUMENT, RESOURCE_EXHAUSTED...)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass
class ChunkTiming:
    """Where one chunk's time went; times are on the engine clock (seconds)."""

    oldest_frame_s: float    # arrival of the chunk's oldest frame (chunk latency starts here)
    newest_frame_s: float    # the request's latest frames arrival before the decode
    decode_start_s: float
    decode_ms: float         # wall time of the batched runner call (perf_counter)
    batch_size: int          # real rows of that call
    is_graph: bool           # the runner replayed a captured CUDA graph


@dataclass
class PcmOut:
    request_id: str
    reply_to: str | None
    seq: int
    sample_offset: int
    pcm: np.ndarray          # [n] float32 at sample_rate_hz
    is_final: bool
    num_frames: int = 0
    timing: ChunkTiming | None = None   # None for an empty closing chunk
    faults: SampleFaults = NO_FAULTS    # what the engine found in pcm (non-finite ones are 0 by now)
    talker_done_s: float | None = None  # a final chunk's: when the talker's final frames came (engine clock)


@dataclass
class ErrorOut:
    request_id: str
    reply_to: str | None
    talker_id: str | None
    code: str
    message: str
