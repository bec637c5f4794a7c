"""Per-request bookkeeping of the vocoder engine (host side; decoder state lives in slot pools)."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from service_common.playback import PlaybackClock


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
    num_audio_frames_in: int = 0         # audio frames received so far (context frames not counted)
    oldest_pending_s: float | None = None
    ended_at_s: float | None = None      # when the talker's final frames came (engine clock); None: not yet
    num_chunks_emitted: int = 0
    num_samples_emitted: int = 0
    num_frames_decoded: int = 0
    pcm_seq: int = 0                     # sequence number of the next PCM chunk to the gateway
    # the listener's deadline on the engine clock (first chunk out + audio sent); scheduling key
    playback: PlaybackClock = field(default_factory=PlaybackClock)

    @property
    def ended(self) -> bool:
        """The talker sent its final frames."""
        return self.ended_at_s is not None

    def take_into(self, dest: np.ndarray, blocks_attr: str, count_attr: str) -> None:
        """Pop the first n frames of a queue straight into `dest` [16, n] (a row of the batch codes).

        Blocks are gathered as views and written with one transposed copy: a talker often sends
        1-frame blocks, and one copy per block would cost more than the single concatenation.
        """
        blocks: list[np.ndarray] = getattr(self, blocks_attr)
        num_frames = dest.shape[1]
        parts, need, consumed = [], num_frames, 0
        while need:
            head = blocks[consumed]
            if len(head) <= need:
                parts.append(head)
                consumed += 1
                need -= len(head)
            else:
                parts.append(head[:need])
                blocks[consumed] = head[need:]
                need = 0
        del blocks[:consumed]
        dest[...] = (parts[0] if len(parts) == 1 else np.concatenate(parts, axis=0)).T   # [16, n]
        setattr(self, count_attr, getattr(self, count_attr) - num_frames)
