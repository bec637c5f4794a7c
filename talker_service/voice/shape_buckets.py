"""Fixed forward shapes for the reference encoders: (clips, samples) buckets, warmed before use.

On the H200 the first forward of the speaker or codec encoder at a new (batch, length) shape cost
0.4-1 s (cuDNN picks and builds kernels per shape; every later forward of that shape took 3-40 ms):
a batch of 7 clone requests that met a new shape waited 1.0 s for it, so clone TTFA p95 at 8
streams was 2.1 s. Rounding a group up to a bucket (clips to a power of two, the longest clip to a
multiple of `bucket_s`) leaves few shapes, and all of them are run once at start (on the encoder
thread; a Base talker waits for it before SERVING, requests that come anyway go first). The
extra rows are silent clips and every row is zero-padded to the bucket's length; each clip's
frames stay its own (the encoders mask each row to its own length, batch_encode.py), so this
changes no real clip's result beyond the rounding batched kernels already have.
Caveat: those 0.4-1 s were measured beside running streams, before the decode loop stopped
stalling this thread's launches (service_common/host_copy.py); how much a cold shape costs on
its own has not been measured since.
"""
from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class ShapeBuckets:
    max_clips: int              # largest batch bucket (the worker's max_batch_jobs)
    bucket_samples: int         # longest clip rounded up to a multiple of this
    max_batch_samples: int      # clips x longest per forward (activation memory)
    max_clip_samples: int       # the longest reference accepted

    def clips(self, num_clips: int) -> int:
        """Power of two >= num_clips, at most max_clips (a larger group keeps its own size)."""
        if num_clips >= self.max_clips:
            return num_clips
        return min(self.max_clips, 1 << max(0, math.ceil(math.log2(num_clips))))

    def samples(self, longest: int) -> int:
        return max(self.bucket_samples, -(-longest // self.bucket_samples) * self.bucket_samples)

    def shape(self, lengths: list[int]) -> tuple[int, int]:
        """(clips, samples) a group of clips of these lengths is run at; a bucket over the memory
        budget falls back to the group's own size (the budget already bounds the group itself)."""
        clips, samples = self.clips(len(lengths)), self.samples(max(lengths))
        if clips * samples > self.max_batch_samples:
            clips = len(lengths)
        if clips * samples > self.max_batch_samples:
            samples = max(lengths)
        return clips, samples

    def warm_up_order(self) -> list[tuple[int, int]]:
        """Every (clips, samples) the worker can meet, short and small first (the common ones)."""
        shapes = []
        for samples in range(self.bucket_samples, self.samples(self.max_clip_samples) + 1, self.bucket_samples):
            clips = 1
            while clips <= self.max_clips and clips * samples <= self.max_batch_samples:
                shapes.append((clips, samples))
                clips *= 2
        return sorted(shapes, key=lambda s: (s[1], s[0]))
