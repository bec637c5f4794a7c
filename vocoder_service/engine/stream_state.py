"""Per-request bookkeeping of the vocoder engine (host side; decoder state lives in slot pools)."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class StreamState:
    request_id: str
    slot: int
    reply_to: str | None
    talker_id: str | None
    opened_at_s: float
    last_activity_s: float
    next_seq: int = 0                    # sequence number the next frames message must carry
    context: list[np.ndarray] = field(default_factory=list)   # [n,16] blocks not yet primed
    pending: list[np.ndarray] = field(default_factory=list)   # [n,16] blocks not yet decoded
    num_context_pending: int = 0
    num_pending: int = 0
    oldest_pending_s: float | None = None
    ended: bool = False                  # the talker sent its final frames
    num_chunks_emitted: int = 0
    num_samples_emitted: int = 0
    num_frames_decoded: int = 0
    pcm_seq: int = 0                     # sequence number of the next PCM chunk to the gateway

    def take(self, blocks_attr: str, count_attr: str, num_frames: int) -> np.ndarray:
        """Pop the first `num_frames` frames of the pending or context queue as one [n,16] array."""
        blocks: list[np.ndarray] = getattr(self, blocks_attr)
        out, need = [], num_frames
        while need:
            head = blocks[0]
            if len(head) <= need:
                out.append(head)
                blocks.pop(0)
                need -= len(head)
            else:
                out.append(head[:need])
                blocks[0] = head[need:]
                need = 0
        setattr(self, count_attr, getattr(self, count_attr) - num_frames)
        return out[0] if len(out) == 1 else np.concatenate(out, axis=0)
