"""Batch input assembly: moves a planned batch's frames out of its streams into the padded
arrays the runner decodes (`codes [bs, 16, t]`, `slots [bs]`, `lengths [bs]`)."""
from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np

from vocoder_service.engine.batcher import PlannedBatch
from vocoder_service.engine.codes import NUM_CODE_GROUPS
from vocoder_service.engine.stream_state import StreamState


class DecodeInputs(NamedTuple):
    codes: np.ndarray                     # [bs, 16, t] int64, zero past each row's length
    slots: np.ndarray                     # [bs] int64
    lengths: np.ndarray                   # [bs] int64, frames of each row (<= t)
    arrivals: list[tuple[float, float]]   # per row: (oldest, newest) frame arrival, for ChunkTiming


def gather_batch(batch: PlannedBatch, streams: dict[str, StreamState], clock: Callable[[], float]) -> DecodeInputs:
    """Pop each row's frames (pending audio, or context for priming rows) into the batch arrays."""
    t = batch.frames_bucket
    codes = np.zeros((batch.batch_size, NUM_CODE_GROUPS, t), dtype=np.int64)
    lengths = np.zeros(batch.batch_size, dtype=np.int64)
    slots = np.zeros(batch.batch_size, dtype=np.int64)
    arrivals: list[tuple[float, float]] = []
    for i, row in enumerate(batch.rows):
        stream = streams[row.request_id]
        arrivals.append((stream.oldest_pending_s or stream.last_activity_s, stream.last_activity_s))
        if row.emit:
            stream.take_into(codes[i, :, : row.num_frames], "pending", "num_pending")
            # frames left behind start waiting now: the max_wait_ms clock restarts for them
            stream.oldest_pending_s = clock() if stream.num_pending else None
        else:
            stream.take_into(codes[i, :, : row.num_frames], "context", "num_context_pending")
        lengths[i] = row.num_frames
        slots[i] = stream.slot
    return DecodeInputs(codes, slots, lengths, arrivals)
