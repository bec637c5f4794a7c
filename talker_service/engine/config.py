"""Every setting of the talker engine in one dataclass (the service config derives it)."""
from __future__ import annotations

from dataclasses import dataclass

GRAPH_MODES = ("auto", "capture", "emulate", "off")
MIN_PREFILL_TOKEN_BUCKET = 16   # the smallest prompt-length bucket (a streaming prompt is ~10 positions)


def power_of_two_buckets(max_size: int) -> list[int]:
    """1, 2, 4, ... up to and including max_size (max_size itself is always a bucket)."""
    sizes, size = [], 1
    while size < max_size:
        sizes.append(size)
        size *= 2
    return sizes + [max_size]


# Decode batches above this many rows are padded to quarter steps of the next power of two (160, 192,
# 224 below 256), not to the power itself. The H200 step (1.7B, captured) costs 6.24 / 6.68 / 7.95 ms
# at 64 / 128 / 256 rows: flat below 128, ~0.01 ms a row above, where a batch of 140-190 rows
# (streams of a wave ending, the next one starting) paid for 256.
FINE_DECODE_BUCKETS_FROM = 128


def decode_batch_buckets(max_size: int) -> list[int]:
    """Default decode batch sizes: powers of two up to FINE_DECODE_BUCKETS_FROM, then three more per
    power of two (quarter steps); max_size itself always."""
    sizes, size = set(), 1
    while size < max_size:
        sizes.add(size)
        if size >= FINE_DECODE_BUCKETS_FROM:
            sizes.update(s for s in (size * 5 // 4, size * 3 // 2, size * 7 // 4) if s < max_size)
        size *= 2
    return sorted(sizes | {max_size})


def kv_slots_that_fit(max_slots: int, bytes_per_slot: int, free_bytes: int, memory_fraction: float,
                      num_extra_slots: int) -> int:
    """Request slots (<= max_slots) whose KV rows, plus `num_extra_slots` scratch rows, take at most
    memory_fraction of free_bytes. Raises ValueError when not even one slot fits."""
    budget_bytes = int(free_bytes * memory_fraction)
    fit = budget_bytes // bytes_per_slot - num_extra_slots
    if fit < 1:
        raise ValueError(
            f"the talker KV cache does not fit: one slot needs {bytes_per_slot / 2**20:.1f} MiB "
            f"(+{num_extra_slots} scratch), the budget is {memory_fraction:.2f} x {free_bytes / 2**20:.0f} MiB free "
            f"= {budget_bytes / 2**20:.0f} MiB; lower max_seq_len or raise kv_memory_fraction")
    return min(max_slots, fit)


@dataclass
class EngineConfig:
    max_slots: int = 8                 # requests generating at once (KV cache rows)
    max_seq_len: int = 2048            # positions per slot: prompt plus frames
    # prompts prefilled together in one forward: a burst of arrivals (64 streams that start at once)
    # is prefilled in a few forwards, not one forward per 8 (H200: queue p95 158 ms at 64 with 8)
    max_prefill_batch: int = 32
    # a prompt longer than this is prefilled in chunks of at most this many positions, one chunk per
    # step, between the decode steps of the running streams; also the largest prompt-length bucket
    prefill_chunk_tokens: int = 256
    # positions prefilled per engine step over all prompts, counted padded (prompts bucket x length
    # bucket): bounds the pause a burst of arrivals puts between two decode steps of running streams
    prefill_token_budget: int = 1024   # 32 short prompts (32-position bucket) in one step
    prefill_token_buckets: tuple[int, ...] = ()   # prompt-length buckets; empty: 16, 32, ... up to the chunk
    max_queued: int = 64               # admitted requests waiting for a slot; beyond: RESOURCE_EXHAUSTED
    # > 0: a step prefills only what fits into the running streams' smallest slack (audio ahead of a
    # real-time listener) less two decode steps and this margin; arrivals wait, at most
    # cadence_max_hold_ms (engine/cadence.py, issue #36). 0: off (the token budget alone bounds a step)
    cadence_margin_ms: float = 0.0
    cadence_max_hold_ms: float = 500.0
    # > 0: while at least prefill_gather_min_decoding streams decode, ready arrivals wait until
    # prefill_gather_batch of them are ready or the oldest waited this long, so arrivals spread in
    # time are prefilled together (a prefill costs about a decode step whatever its batch;
    # engine/prefill_gather.py, issue #36). 0: off (every ready arrival is prefilled at once). On an
    # H200 at 256 streams under Poisson arrivals it took TTFA p95 from 611 to 174 ms at the same p50
    # (benchmarks/results/2026-11-28-gapless7-h200.md); from 128 decoding streams, so 64 and fewer
    # streams never wait for it
    prefill_gather_ms: float = 60.0
    prefill_gather_batch: int = 8
    prefill_gather_min_decoding: int = 128
    batch_buckets: tuple[int, ...] = ()  # decode batch sizes (graph buckets); empty: decode_batch_buckets()
    pad_to_buckets: bool | None = None   # None: on CUDA only (where a fixed shape lets a graph replay)
    max_text_tokens: int = 4096        # text tokens per request
    # decode step as one CUDA graph per batch bucket and prefill (with the first frame) as one per
    # (prompts bucket, length bucket, fresh or continued): "auto" captures on CUDA and runs eagerly
    # on CPU; "emulate" runs the graph path's padded static buffers eagerly (tests)
    decode_graphs: str = "auto"
    # retired: graphs were once keyed by a context bucket too. Attention reads each row's own length
    # from its slot (kernels/slot_attention.py), so a context dimension only multiplied captures;
    # kept as a field so a configured value is refused with a message, not silently dropped
    context_buckets: tuple[int, ...] = ()
    graph_max_batch: int = 0           # graphs only for batch buckets <= this (0: all); larger run eagerly
    # > 0 (CUDA): max_slots shrinks until the KV cache takes at most this fraction of the device
    # memory free after the weights load; 0: allocate max_slots x max_seq_len as configured
    kv_memory_fraction: float = 0.0
    # run every shape serving can use once before the engine is handed out (Triton compiles, cuBLAS
    # choices, allocator growth), so the first request is as fast as the hundredth; None: on CUDA
    warm_up: bool | None = None
    # queue decode step N+1 before reading step N's codes back, so the GPU never waits for the host
    # between steps (its inputs live on the device; only EOS needs the codes, and a row launched for
    # a stream that turns out to have ended is dropped); None: on CUDA, where launches are queued
    async_decode: bool | None = None

    def __post_init__(self) -> None:
        problems = []
        for name in ("max_slots", "max_seq_len", "max_prefill_batch", "max_text_tokens", "prefill_chunk_tokens",
                     "prefill_gather_batch"):
            if getattr(self, name) < 1:
                problems.append(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("max_queued", "graph_max_batch", "cadence_margin_ms", "cadence_max_hold_ms", "prefill_gather_ms",
                     "prefill_gather_min_decoding"):
            if getattr(self, name) < 0:
                problems.append(f"{name} must be >= 0, got {getattr(self, name)}")
        if any(size < 1 or size > self.max_slots for size in self.batch_buckets):
            problems.append(f"batch_buckets {self.batch_buckets} must lie in [1, max_slots={self.max_slots}]")
        if self.prefill_token_budget < self.prefill_chunk_tokens:
            problems.append(f"prefill_token_budget ({self.prefill_token_budget}) must be >= prefill_chunk_tokens "
                            f"({self.prefill_chunk_tokens}): one chunk must fit a step")
        if any(size < 1 or size > self.prefill_chunk_tokens for size in self.prefill_token_buckets):
            problems.append(f"prefill_token_buckets {self.prefill_token_buckets} must lie in "
                            f"[1, prefill_chunk_tokens={self.prefill_chunk_tokens}]")
        if self.context_buckets:
            problems.append(f"context_buckets {self.context_buckets} is no longer supported: decode attention reads "
                            "each row's own length, so there is one decode graph per batch bucket; drop the "
                            "setting (--context-buckets)")
        if self.decode_graphs not in GRAPH_MODES:
            problems.append(f"decode_graphs must be one of {GRAPH_MODES}, got {self.decode_graphs!r}")
        if not 0.0 <= self.kv_memory_fraction < 1.0:
            problems.append(f"kv_memory_fraction must be in [0, 1), got {self.kv_memory_fraction}")
        if problems:
            raise ValueError("invalid talker engine config: " + "; ".join(problems))

    def buckets(self) -> list[int]:
        """Sorted decode batch sizes, the largest always max_slots (every batch fits one)."""
        return sorted(set(self.batch_buckets) | {self.max_slots}) if self.batch_buckets \
            else decode_batch_buckets(self.max_slots)

    def max_prefill_chunk(self) -> int:
        """Positions of one prompt per chunk: a prompt is shorter than max_seq_len, so no more."""
        return min(self.prefill_chunk_tokens, self.max_seq_len)

    def prefill_prompt_buckets(self) -> list[int]:
        """Prompts prefilled in one forward, padded up to one of these: powers of two up to
        max_prefill_batch, or max_slots when fewer (no more prompts than slots are ever prefilled)."""
        return power_of_two_buckets(min(self.max_prefill_batch, self.max_slots))

    def prefill_length_buckets(self) -> list[int]:
        """Chunk lengths padded up to one of these; the largest is always max_prefill_chunk()."""
        chunk = self.max_prefill_chunk()
        sizes = self.prefill_token_buckets or tuple(
            b for b in power_of_two_buckets(chunk) if b >= min(MIN_PREFILL_TOKEN_BUCKET, chunk))
        return sorted({min(b, chunk) for b in sizes} | {chunk})

    def is_async_decode(self, device_type: str) -> bool:
        return device_type == "cuda" if self.async_decode is None else self.async_decode

    def is_warm_up(self, device_type: str) -> bool:
        return device_type == "cuda" if self.warm_up is None else self.warm_up

    def graph_mode(self, device_type: str) -> str:
        """"capture", "emulate" or "off" for a runner on `device_type`."""
        if self.decode_graphs == "auto":
            return "capture" if device_type == "cuda" else "off"
        if self.decode_graphs == "capture" and device_type != "cuda":
            raise ValueError(f"decode_graphs='capture' needs a CUDA device, the talker runs on {device_type}")
        return self.decode_graphs

    def is_padding(self, device_type: str) -> bool:
        """Batches padded to buckets: always with graphs (one shape per graph), else pad_to_buckets."""
        if self.graph_mode(device_type) != "off":
            return True
        return device_type == "cuda" if self.pad_to_buckets is None else self.pad_to_buckets
