"""Every setting of the talker engine in one dataclass (the service config derives it)."""
from __future__ import annotations

from dataclasses import dataclass


def power_of_two_buckets(max_size: int) -> list[int]:
    """1, 2, 4, ... up to and including max_size (max_size itself is always a bucket)."""
    sizes, size = [], 1
    while size < max_size:
        sizes.append(size)
        size *= 2
    return sizes + [max_size]


@dataclass
class EngineConfig:
    max_slots: int = 8                 # requests generating at once (KV cache rows)
    max_seq_len: int = 2048            # positions per slot: prompt plus frames
    max_prefill_batch: int = 8         # prompts prefilled together in one step
    max_queued: int = 64               # admitted requests waiting for a slot; beyond: RESOURCE_EXHAUSTED
    batch_buckets: tuple[int, ...] = ()  # decode batch sizes (graph buckets); empty: powers of two
    pad_to_buckets: bool | None = None   # None: on CUDA only (where a fixed shape lets a graph replay)
    max_text_tokens: int = 4096        # text tokens per request

    def __post_init__(self) -> None:
        problems = []
        for name in ("max_slots", "max_seq_len", "max_prefill_batch", "max_text_tokens"):
            if getattr(self, name) < 1:
                problems.append(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.max_queued < 0:
            problems.append(f"max_queued must be >= 0, got {self.max_queued}")
        if any(size < 1 or size > self.max_slots for size in self.batch_buckets):
            problems.append(f"batch_buckets {self.batch_buckets} must lie in [1, max_slots={self.max_slots}]")
        if problems:
            raise ValueError("invalid talker engine config: " + "; ".join(problems))

    def buckets(self) -> list[int]:
        """Sorted decode batch sizes, the largest always max_slots (every batch fits one)."""
        return sorted(set(self.batch_buckets) | {self.max_slots}) if self.batch_buckets \
            else power_of_two_buckets(self.max_slots)
