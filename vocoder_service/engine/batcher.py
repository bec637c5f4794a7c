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


def cheapest_split(n: int, t: int, batch_sizes: list[int], cost: Callable[[int, int], float]) -> list[int]:
    """Batch sizes (largest first, each <= batch_sizes[-1]) that add up to n rows of frame bucket t
    at the least total cost(bs, t): a dynamic program over the row count, trying each batch size
    and the whole remainder (padded up by `cost`). The vocoder's work grows with the padded rows, so
    a group just past a captured size is cheaper as two launches than padded to the next one."""
    max_bs = batch_sizes[-1]
    best = [0.0] + [float("inf")] * n
    take = [0] * (n + 1)
    for m in range(1, n + 1):
        for size in {*batch_sizes, m}:
            size = min(size, m)
            if size > max_bs:
                continue
            total = cost(size, t) + best[m - size]
            if total < best[m]:
                best[m], take[m] = total, size
    sizes = []
    while n:
        sizes.append(take[n])
        n -= take[n]
    return sorted(sizes, reverse=True)


def largest_covered(batch_sizes: list[int], t: int,
                    covering_shape: Callable[[int, int], tuple[int, int] | None] | None) -> int:
    """The most rows one batch of frame bucket t should hold: the largest of `batch_sizes` that a
    captured graph covers at t; all of them when no graph covers even one row of t (no graphs: every
    shape runs eagerly anyway)."""
    if covering_shape is None or covering_shape(1, t) is None:
        return batch_sizes[-1]
    covered = [b for b in batch_sizes if covering_shape(b, t) is not None]
    return covered[-1] if covered else batch_sizes[-1]


def plan_batches(
    rows: list[ReadyRow],
    policy: ChunkPolicy,
    batch_sizes: list[int],
    launch_cost_row_frames: float,
    covering_shape: Callable[[int, int], tuple[int, int] | None] | None = None,
    split_cache: dict[tuple[int, int], list[int]] | None = None,
) -> list[PlannedBatch]:
    """Partition `rows` into batches; every row appears exactly once.

    Rows are grouped by their own frame bucket, each group is cut into the batch sizes that cost
    least (`cheapest_split`: 70 rows go as 64 + 8, not padded to a 128-row graph), then adjacent
    groups (in bucket order) are merged greedily while the merged launch is cheaper.
    `covering_shape(bs, t)` gives the captured graph shape (B, T) a batch would really replay (None:
    eager); with few captured shapes, batches that pad to the same graph merge for free.
    `split_cache` keeps each (rows, frame bucket) split for the next call (~3 ms to work out for 256
    rows in Python): the caller's, valid while its batch sizes and captured shapes stay the same.
    Where graphs cover a frame bucket, no batch of it outgrows the largest graph that covers it
    (`largest_covered`): a bigger one would run eagerly, on activations that the graph memory budget
    never set aside (an 80 GB card ran out of memory that way at 256 streams).
    """
    if not rows:
        return []
    caps: dict[int, int] = {}

    def cap_for(t: int) -> int:
        if t not in caps:
            caps[t] = largest_covered(batch_sizes, t, covering_shape)
        return caps[t]

    def cost(bs: int, t: int) -> float:
        shape = covering_shape(bs, t) if covering_shape is not None else None
        if shape is not None:
            return launch_cost_row_frames + shape[0] * shape[1]
        padded = smallest_bucket_at_least(batch_sizes, bs) or bs
        return launch_cost_row_frames + padded * t

    by_bucket: dict[int, list[ReadyRow]] = {}
    for row in rows:
        by_bucket.setdefault(policy.bucket_for(row.num_frames), []).append(row)
    groups: list[PlannedBatch] = []
    for t in sorted(by_bucket):
        members = by_bucket[t]
        start = 0
        key = (len(members), t)
        sizes = split_cache.get(key) if split_cache is not None else None
        if sizes is None:
            sizes = cheapest_split(len(members), t, [b for b in batch_sizes if b <= cap_for(t)], cost)
            if split_cache is not None:
                split_cache[key] = sizes
        for size in sizes:
            groups.append(PlannedBatch(t, members[start:start + size]))
            start += size

    merged: list[PlannedBatch] = []
    for group in groups:
        if merged:
            last = merged[-1]
            bs = last.batch_size + group.batch_size
            t = max(last.frames_bucket, group.frames_bucket)
            apart = cost(last.batch_size, last.frames_bucket) + cost(group.batch_size, group.frames_bucket)
            if bs <= cap_for(t) and cost(bs, t) < apart:
                merged[-1] = PlannedBatch(t, last.rows + group.rows)
                continue
        merged.append(group)
    return merged
