"""Every vocoder engine setting in one place (flags and env map onto these fields)."""
from __future__ import annotations

from dataclasses import dataclass, field

from vocoder_service.engine.chunk_policy import ChunkPolicy
from vocoder_service.engine.deadlines import DeadlinePolicy


@dataclass
class VocoderEngineConfig:
    max_slots: int = 64
    chunk: ChunkPolicy = field(default_factory=ChunkPolicy)
    deadline: DeadlinePolicy = field(default_factory=DeadlinePolicy)   # which rows a step decodes
    # Fill the rows and frames a step's captured graphs pad with audio of streams that have frames
    # waiting (batch_fill.py: no device time, audio sooner); False: only the planned rows.
    fill_padding: bool = True
    # Fixed cost of one decode launch, in row-frames, for the batch-merging cost model.
    launch_cost_row_frames: float = 64.0
    # A request (not ended) fails with UNAVAILABLE once its talker sent nothing at all (frames or
    # heartbeats) for this long; a request merely waiting for text is not judged by its own silence.
    talker_timeout_s: float = 10.0
    # Bound on frames buffered per request that are not yet decoded (backpressure on a runaway talker).
    max_pending_frames: int = 2048
    # At most this many context (voice-clone reference) frames per request (~60 s).
    max_context_frames: int = 750
    sample_rate_hz: int = 24000
    samples_per_frame: int = 1920
