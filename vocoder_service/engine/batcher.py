"""Groups requests with ready frames into decode batches.

Each row of a batch decodes `length` frames of one request into a chunk padded to the batch's
frame bucket `t`. Rows of different lengths may share a batch: right padding is safe because the
streaming decoder advances each slot's state by its own length only. Merging two groups pays when
one launch of the merged (bs, t) shape costs less than the two launches apart; cost is modelled as
`launch_cost_row_frames + padded_bs * t` in row-frames (a graph replay has a fixed cost
that small batches are dominated by, measured on the GPU; see benchmarks/results).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from vocoder_service.engine.chunk_policy import ChunkPolicy, smallest_bucket_at_least


@dataclass
class ReadyRow:
    request_id: str
    slot: int
    num_frames: int       # frames this row decodes now (1..steady)
    emit: bool            # False for voice-clone context frames: decode into state, emit no audio
    is_final: bool        # the request's last frames: its audio ends with this chunk


@dataclass
class PlannedBatch:
    frames_bucket: int                    # t: every row padded to this many frames
    rows: list[ReadyRow] = field(default_factory=list)

    @property
    def batch_size(self) -> int:
        return len(self.rows)


def plan_batches(
    rows: list[ReadyRow],
    policy: ChunkPolicy,
    batch_sizes: list[int],
    launch_cost_row_frames: float,
    covering_shape: Callable[[int, int], tuple[int, int] | None] | None = None,
) -> list[PlannedBatch]:
    """Partition `rows` into batches; every row appears exactly once.

    Rows are grouped by their own frame bucket, groups larger than the biggest batch size are split,
    then adjacent groups (in bucket order) are merged greedily while the merged launch is cheaper.
    `covering_shape(bs, t)` gives the captured graph shape (B, T) a batch would really replay (None:
    eager); with few captured shapes, batches that pad to the same graph merge for free.
    """
    if not rows:
        return []
    max_bs = batch_sizes[-1]
    by_bucket: dict[int, list[ReadyRow]] = {}
    for row in rows:
        by_bucket.setdefault(policy.bucket_for(row.num_frames), []).append(row)
    groups: list[PlannedBatch] = []
    for t in sorted(by_bucket):
        members = by_bucket[t]
        for start in range(0, len(members), max_bs):
            groups.append(PlannedBatch(t, members[start:start + max_bs]))

    def cost(bs: int, t: int) -> float:
        shape = covering_shape(bs, t) if covering_shape is not None else None
        if shape is not None:
            return launch_cost_row_frames + shape[0] * shape[1]
        padded = smallest_bucket_at_least(batch_sizes, bs) or bs
        return launch_cost_row_frames + padded * t

    merged: list[PlannedBatch] = []
    for group in groups:
        if merged:
            last = merged[-1]
            bs = last.batch_size + group.batch_size
            t = max(last.frames_bucket, group.frames_bucket)
            apart = cost(last.batch_size, last.frames_bucket) + cost(group.batch_size, group.frames_bucket)
            if bs <= max_bs and cost(bs, t) < apart:
                merged[-1] = PlannedBatch(t, last.rows + group.rows)
                continue
        merged.append(group)
    return merged
