"""Work a planned step pays for anyway: the padding of its captured graphs, filled with audio.

A batch of `bs` rows of frame bucket `t` replays a captured (B, T) graph with B >= bs and T >= t
(batch sizes are powers of two): the device decodes B x T row-frames whatever the rows hold. On the
H200 at 256 streams the deadline-budgeted steps held ~17-21 rows on average, so about a quarter of
each launch was padding, and rows shorter than their batch's T padded the rest. Filling it costs no
device time (a row-frame of padding and one of audio cost the same) and decodes audio earlier:

- **Longer rows.** A row of a stream that has more frames waiting takes up to T of them (its chunk
  gets longer, its listener's deadline moves further away). T is the graph's, which may be longer
  than the batch's frame bucket (a call of a slow graph's shape replays a bigger one, graphs.py): the
  batch's bucket then grows to the longest row, within that graph. A voice clone's priming rows keep their
  size (they are not audio), and a row never takes a stream's last frames unless it marks the end.
- **More rows.** Streams left out of the step (deferred by the step budget, or waiting for a bigger
  chunk) fill the batch's empty rows, earliest deadline first, with up to T frames each.

Pure host-side bookkeeping over the engine's stream states: testable without a device.
"""
from __future__ import annotations

from typing import Callable

from vocoder_service.engine.batcher import PlannedBatch, ReadyRow
from vocoder_service.engine.chunk_policy import smallest_bucket_at_least
from vocoder_service.engine.deadlines import urgency_key_s
from vocoder_service.engine.stream_state import StreamState


def padded_shape(batch: PlannedBatch, batch_sizes: list[int],
                 covering_shape: Callable[[int, int], tuple[int, int] | None] | None) -> tuple[int, int]:
    """(rows, frames) the device really decodes for `batch`: its captured graph's shape, or the batch
    size bucket x its frame bucket when no graph covers it (an eager call pads to nothing more, but a
    row added there only costs its frames: stay within the batch bucket to keep the shapes known)."""
    shape = covering_shape(batch.batch_size, batch.frames_bucket) if covering_shape is not None else None
    if shape is not None:
        return shape
    return smallest_bucket_at_least(batch_sizes, batch.batch_size) or batch.batch_size, batch.frames_bucket


def _row(stream: StreamState, num_frames: int) -> ReadyRow:
    return ReadyRow(stream.request_id, stream.slot, num_frames, True, stream.ended and num_frames == stream.num_pending)


def fill_batches(batches: list[PlannedBatch], streams: dict[str, StreamState], spare: list[StreamState],
                 batch_sizes: list[int],
                 covering_shape: Callable[[int, int], tuple[int, int] | None] | None = None) -> int:
    """Grow `batches` in place within their padded shapes; `spare`: streams in no batch of this step,
    most urgent first. -> row-frames of audio added."""
    added = 0
    spare_iter = iter(spare)
    for batch in batches:
        rows_cap, t = padded_shape(batch, batch_sizes, covering_shape)
        for i, row in enumerate(batch.rows):
            stream = streams[row.request_id]
            if not row.emit or row.is_final or stream.num_pending <= row.num_frames:
                continue
            n = min(stream.num_pending, t)
            added += n - row.num_frames
            batch.rows[i] = _row(stream, n)
        while len(batch.rows) < rows_cap:
            stream = next(spare_iter, None)
            if stream is None:
                break
            n = min(stream.num_pending, t)
            batch.rows.append(_row(stream, n))
            added += n
        batch.frames_bucket = max(batch.frames_bucket, max(r.num_frames for r in batch.rows))
    return added


def spare_streams(streams: list[StreamState], in_step: set[str], now_s: float,
                  min_first_frames: int) -> list[StreamState]:
    """Streams that could take a row now but are in no batch of this step: audio frames waiting, no
    voice-clone priming pending, and a stream that has not started only with a whole first chunk
    (`min_first_frames`: a shorter one would start its listener with less audio than the first
    chunk policy gives). Most urgent first (`urgency_key_s`, as the scheduler orders rows)."""
    ready = [s for s in streams if s.request_id not in in_step and s.num_pending and not s.num_context_pending
             and (s.playback.is_started or s.num_pending >= min_first_frames or s.ended)]
    return sorted(ready, key=lambda stream: urgency_key_s(stream, now_s))
