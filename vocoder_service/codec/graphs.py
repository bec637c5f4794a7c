"""Replay a StreamingDecoder step from CUDA graphs captured per (batch size, frames) bucket.

A call with bs rows of t frames runs the smallest captured bucket (B >= bs, T >= t): its rows
beyond bs point at the decoder's scratch slot and its frames beyond t are right padding (beyond
every row's length), so neither touches real state nor real output. Graphs share one memory pool
and are captured largest first so smaller buckets reuse its blocks.

Without CUDA (`use_cuda_graphs=False`, the default on CPU) the same bucketing and padding run the
body eagerly: that is how the padding logic is tested on CPU.
"""
from __future__ import annotations

import bisect
import logging
from dataclasses import dataclass
from typing import Callable, Sequence

import torch

from vocoder_service.codec.streaming import StreamingDecoder

logger = logging.getLogger(__name__)

StepBody = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass
class _Bucket:
    codes: torch.Tensor  # [B, Q, T] int64
    slots: torch.Tensor  # [B] int64
    lengths: torch.Tensor  # [B] int64
    out: torch.Tensor | None = None  # [B, T * samples_per_frame], written by every replay
    graph: "torch.cuda.CUDAGraph | None" = None


class GraphedStep:
    def __init__(
        self,
        decoder: StreamingDecoder,
        batch_sizes: Sequence[int],
        chunk_frames: Sequence[int],
        body: StepBody | None = None,
        use_cuda_graphs: bool | None = None,
        num_warmup: int = 2,
    ) -> None:
        if not batch_sizes or not chunk_frames or min(batch_sizes) < 1 or min(chunk_frames) < 1:
            raise ValueError(f"need positive batch sizes and chunk frames, got {batch_sizes} and {chunk_frames}")
        self.decoder = decoder
        self.batch_sizes = sorted(set(batch_sizes))
        self.chunk_frames = sorted(set(chunk_frames))
        self.body = body or decoder.step_unchecked
        self.use_cuda_graphs = decoder.device.type == "cuda" if use_cuda_graphs is None else use_cuda_graphs
        self.num_warmup = num_warmup
        self.buckets: dict[tuple[int, int], _Bucket] = {}

    def capture(self) -> None:
        """Allocate static buffers (and on CUDA capture one graph) for every (B, T) bucket."""
        pool = torch.cuda.graph_pool_handle() if self.use_cuda_graphs else None
        for bsz in reversed(self.batch_sizes):
            for frames in reversed(self.chunk_frames):
                self.buckets[(bsz, frames)] = self._capture_one(bsz, frames, pool)
        logger.info("prepared %d step buckets (cuda graphs: %s)", len(self.buckets), self.use_cuda_graphs)

    def _capture_one(self, bsz: int, frames: int, pool) -> _Bucket:
        dec = self.decoder
        # Every row on the scratch slot during warmup and capture: real slots stay untouched.
        bucket = _Bucket(
            codes=torch.zeros((bsz, dec.num_quantizers, frames), dtype=torch.int64, device=dec.device),
            slots=torch.full((bsz,), dec.scratch_slot, dtype=torch.int64, device=dec.device),
            lengths=torch.full((bsz,), frames, dtype=torch.int64, device=dec.device),
        )
        if not self.use_cuda_graphs:
            return bucket
        side = torch.cuda.Stream(device=dec.device)
        side.wait_stream(torch.cuda.current_stream(dec.device))
        with torch.cuda.stream(side):
            for _ in range(self.num_warmup):  # compiles kernels (Triton, cuDNN autotune) outside capture
                self.body(bucket.codes, bucket.slots, bucket.lengths)
        torch.cuda.current_stream(dec.device).wait_stream(side)
        bucket.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(bucket.graph, pool=pool):
            bucket.out = self.body(bucket.codes, bucket.slots, bucket.lengths)
        return bucket

    def bucket_for(self, bsz: int, frames: int) -> tuple[int, int]:
        i = bisect.bisect_left(self.batch_sizes, bsz)
        j = bisect.bisect_left(self.chunk_frames, frames)
        if i == len(self.batch_sizes):
            raise ValueError(f"batch of {bsz} rows exceeds the largest captured batch size {self.batch_sizes[-1]}")
        if j == len(self.chunk_frames):
            raise ValueError(f"chunk of {frames} frames exceeds the largest captured chunk {self.chunk_frames[-1]}")
        return self.batch_sizes[i], self.chunk_frames[j]

    def __call__(self, codes, slots, lengths=None, validate: bool = True) -> torch.Tensor:
        """Like StreamingDecoder.step: pcm [bs, t*1920]. The result is a view into graph-owned
        memory that the next call (any bucket: they share one pool) overwrites; copy it to keep it.
        `validate=False` takes device int64 tensors already checked by the caller."""
        if validate:
            codes, slots, lengths = self.decoder.as_step_inputs(codes, slots, lengths)
        if not self.buckets:
            self.capture()
        bsz, _, frames = codes.shape
        bucket = self.buckets[self.bucket_for(bsz, frames)]
        bucket.codes[:bsz, :, :frames].copy_(codes, non_blocking=True)
        bucket.slots[:bsz].copy_(slots, non_blocking=True)
        bucket.slots[bsz:].fill_(self.decoder.scratch_slot)
        bucket.lengths[:bsz].copy_(lengths, non_blocking=True)
        bucket.lengths[bsz:].fill_(1)
        if bucket.graph is not None:
            bucket.graph.replay()
        else:
            bucket.out = self.body(bucket.codes, bucket.slots, bucket.lengths)
        return bucket.out[:bsz, : frames * self.decoder.samples_per_frame]
