"""How many frames each decode chunk of a request holds, and which frame counts get CUDA graphs.

Chunks ramp up geometrically from a small first chunk (low time-to-first-audio) to the steady size:
first, 2*first, 4*first, ... steady. The ramp keeps the client's buffer ahead: each chunk's audio
lasts as long as the next, twice larger chunk takes to generate once the talker runs at >= 2x real
time, so playback never starves while chunks grow to the efficient steady size.

When the vocoder is nearly idle (at most `quick_first_max_streams` streams open) a stream's first
chunk is `quick_first_chunk_frames` (1) instead: its audio can start right after the talker's
prefill, one talker step earlier. On the H200 that took one stream's TTFA from 28.3 to 20.1 ms;
made the rule for every stream it cost 12 ms p50 at 16 streams and 32 ms at 64 (one more decode
call per stream), hence only at light load (benchmarks/results/2026-11-25-clone-no-cliff-h200.md).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ChunkPolicy:
    first_chunk_frames: int = 2
    steady_chunk_frames: int = 25
    # A request with fewer frames than its chunk size waits for more, unless it has ended (final chunk)
    # or its oldest pending frame has waited this long (a slow talker must not stall audio).
    max_wait_ms: float = 200.0
    quick_first_chunk_frames: int = 1
    quick_first_max_streams: int = 2      # 0: never

    def __post_init__(self) -> None:
        if not 1 <= self.first_chunk_frames <= self.steady_chunk_frames:
            raise ValueError(
                f"chunk policy needs 1 <= first_chunk_frames ({self.first_chunk_frames}) "
                f"<= steady_chunk_frames ({self.steady_chunk_frames})"
            )
        if not 1 <= self.quick_first_chunk_frames <= self.first_chunk_frames:
            raise ValueError(
                f"chunk policy needs 1 <= quick_first_chunk_frames ({self.quick_first_chunk_frames}) "
                f"<= first_chunk_frames ({self.first_chunk_frames})"
            )
        if self.quick_first_max_streams < 0:
            raise ValueError(f"quick_first_max_streams must be >= 0, got {self.quick_first_max_streams}")
        if self.max_wait_ms < 0:
            raise ValueError(f"max_wait_ms must be >= 0, got {self.max_wait_ms}")

    def chunk_frames(self, num_chunks_emitted: int, num_open_streams: int | None = None) -> int:
        """Target size of a request's next chunk after it has emitted `num_chunks_emitted` chunks;
        with `num_open_streams` given, a first chunk at light load is the quick one."""
        if (num_chunks_emitted == 0 and num_open_streams is not None
                and num_open_streams <= self.quick_first_max_streams):
            return self.quick_first_chunk_frames
        size = self.first_chunk_frames << min(num_chunks_emitted, 30)
        return min(size, self.steady_chunk_frames)

    def frame_buckets(self) -> list[int]:
        """Every frame count a batch is padded up to: the ramp sizes, the steady size, and powers of
        two below the steady size for final / timed-out short chunks. Sorted, unique."""
        sizes = {self.steady_chunk_frames, self.quick_first_chunk_frames}
        n = 0
        while self.chunk_frames(n) < self.steady_chunk_frames:
            sizes.add(self.chunk_frames(n))
            n += 1
        p = 1
        while p < self.steady_chunk_frames:
            sizes.add(p)
            p *= 2
        return sorted(sizes)

    def bucket_for(self, num_frames: int) -> int:
        """Smallest frame bucket >= num_frames (num_frames <= steady_chunk_frames)."""
        for size in self.frame_buckets():
            if size >= num_frames:
                return size
        raise ValueError(f"{num_frames} frames exceed the steady chunk size {self.steady_chunk_frames}")


def batch_buckets(max_slots: int) -> list[int]:
    """Powers of two up to max_slots, plus max_slots itself when it is not one."""
    if max_slots < 1:
        raise ValueError(f"max_slots must be >= 1, got {max_slots}")
    sizes = []
    b = 1
    while b < max_slots:
        sizes.append(b)
        b *= 2
    sizes.append(max_slots)
    return sizes


def smallest_bucket_at_least(buckets: list[int], n: int) -> int | None:
    for b in buckets:
        if b >= n:
            return b
    return None
