"""The talker decode step as one CUDA graph per batch bucket.

A decode step is thousands of small kernels (talker layers, codec head, logit processing,
seeded sampling, 15 code-predictor positions); launched one by one they cost several times the
GPU work. `DecodeStep` is the whole step as one function of four static index rows (slots,
positions, frame counts, text ids), so it can be captured once per shape and replayed.

A step of n rows uses the smallest captured batch >= n; rows n.. point at the runner's scratch
slot (position 0, pad text), which no request owns: their KV writes, history marks and codec
embeddings land on that slot only, and every real row reads only its own slot. Attention reads
each row's keys up to its own position (kernels/slot_attention.py), so one graph per batch size
serves every context length: the table has no context dimension.

All graphs share one memory pool: replays never overlap (one engine thread). `emulate=True`
(CPU tests) keeps the same static buffers, padding and lookup and runs the step eagerly instead
of replaying, so the padding logic is tested without a GPU.
"""
from __future__ import annotations

import contextlib
import logging
import time
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import torch

from kernels import gemm_tuning, pdl
from kernels.small_m_linear import max_rows_on
from talker_service.model import FrameDecoder, TalkerModel

logger = logging.getLogger(__name__)

NUM_WARMUP_RUNS = 2
NUM_INDEX_ROWS = 4   # slots, positions, frame counts, text ids


def captures_with_pdl(batch_size: int, device: torch.device | str) -> bool:
    """Whether a decode graph of batch_size rows is captured with programmatic dependent launch
    (kernels/pdl.py): where its GEMMs go to our few-row Triton kernel (kernels/small_m_linear.py,
    1-2 rows by default) the step is a chain of our own kernels and PDL shortens it (H100, batch 1:
    4.24 -> 4.09-4.14 ms); where they are cuBLAS PDL made every batch measured slower (+1 to +4%;
    benchmarks/results/2026-11-26-talker-pdl-h100.md)."""
    return batch_size <= max_rows_on(torch.device(device))


def capture_graph(fn, num_warmup: int = NUM_WARMUP_RUNS, pool=None, use_pdl: bool = False,
                  tune_gemms: bool = False):
    """fn() captured as one CUDA graph -> (graph, fn's output tensors). Warm-up runs on a side
    stream first (lazy init, cuBLAS algorithm choice), as capture requires. use_pdl: our Triton
    kernels in it are PDL launches (kernels/pdl.py; also compiles their PDL variants in warm-up).
    tune_gemms: the warm-up's GEMM problems not seen before are timed against cuBLASLt's algorithms
    and the fastest kept (kernels/gemm_tuning.py), so the graph captures the chosen ones."""
    with pdl.scope(use_pdl):
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side), (gemm_tuning.allow_tuning() if tune_gemms else contextlib.nullcontext()):
            for _ in range(num_warmup):
                fn()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=pool, capture_error_mode="thread_local"):
            out = fn()
    return graph, out


class DecodeStep:
    """One frame for a batch of slots, reading and writing only device tensors (capturable).

    codec_embeds [S, H] holds each slot's last-frame embedding (the next input minus its text
    track); the step reads it for its rows and writes back the new frame's embedding."""

    def __init__(self, model: TalkerModel, frames: FrameDecoder, codec_embeds: torch.Tensor) -> None:
        self.model, self.frames, self.codec_embeds = model, frames, codec_embeds

    def __call__(self, index_rows: torch.Tensor) -> torch.Tensor:
        """index_rows int64 [4, bs] (slots, positions, counts, text ids) -> codes int64 [bs, 16]."""
        slots, positions, counts, text_ids = index_rows
        inputs = self.codec_embeds[slots] + self.model.embed_text(text_ids)          # [bs, H]
        out = self.frames.decode(inputs, slots, positions, counts)
        self.codec_embeds[slots] = out.codec_embeds.to(self.codec_embeds.dtype)
        return out.codes


class CapturedDecode:
    """Static index rows, pinned host staging (two buffers), and the graph of one batch size."""

    def __init__(self, step: DecodeStep, batch_size: int, padding_row: list[int], emulate: bool, pool=None) -> None:
        device = step.model.device
        self.step, self.batch_size = step, batch_size
        self.padding_row = np.asarray(padding_row, dtype=np.int64)                    # [4]
        # two staging buffers, used in turn: with decode steps overlapped (engine async_decode) step
        # N+1's rows are written while step N's upload may still be queued behind step N-1
        self.hosts = []
        for _ in range(2):
            host = torch.zeros(NUM_INDEX_ROWS, batch_size, dtype=torch.long)
            host = host.pin_memory() if device.type == "cuda" else host                # [4, B]
            host.numpy()[:] = self.padding_row[:, None]
            self.hosts.append(host)
        self.staging = [host.numpy() for host in self.hosts]   # views of the same memory
        # per pinned buffer: an event recorded after each upload from it (None: pageable, the copy
        # is staged before copy_ returns). Made once: the loop pays for is_pinned() and Event() otherwise.
        # Before its first record, synchronize() returns at once (torch creates the CUDA event lazily).
        self.uploaded: list[torch.cuda.Event | None] = [
            torch.cuda.Event() if host.is_pinned() else None for host in self.hosts]
        self.next_host = 0
        self.index_rows = self.hosts[0].to(device)                                    # [4, B]
        self.graph, self.codes = None, None
        if not emulate:   # warm-up runs touch the scratch slot only: every row is padding
            self.graph, self.codes = capture_graph(lambda: step(self.index_rows), pool=pool,
                                                   use_pdl=captures_with_pdl(batch_size, device), tune_gemms=True)
            # one replay on those padding rows now: a graph's first launch also uploads it to the
            # device, which would otherwise land on the first step at this batch size
            self.graph.replay()
            torch.cuda.current_stream().synchronize()

    def run(self, rows: np.ndarray) -> torch.Tensor:
        """rows int64 [4, n] (n <= batch_size) -> device codes [n, 16]."""
        n = rows.shape[1]
        if n > self.batch_size:
            raise ValueError(f"a batch of {n} does not fit the graph of batch {self.batch_size}")
        i = self.next_host
        self.next_host = 1 - i
        uploaded = self.uploaded[i]
        if uploaded is not None:   # this buffer's previous upload (two steps ago) has long run: no real wait
            uploaded.synchronize()
        staging = self.staging[i]
        staging[:, :n] = rows
        staging[:, n:] = self.padding_row[:, None]
        self.index_rows.copy_(self.hosts[i], non_blocking=True)
        if uploaded is not None:   # the DMA reads the pinned buffer later: mark when it has
            uploaded.record()
        if self.graph is None:
            return self.step(self.index_rows)[:n]
        self.graph.replay()
        return self.codes[:n]


@dataclass
class GraphStats:
    num_graphs: int = 0                 # decode graphs
    graph_memory_bytes: int = 0         # decode and prefill graphs
    capture_s: float = 0.0
    num_graph_steps: int = 0
    num_eager_steps: int = 0
    num_padding_rows: int = 0
    shape_histogram: Counter = field(default_factory=Counter)   # batch bucket -> steps
    num_prefill_graphs: int = 0
    prefill_capture_failed: bool = False   # the prefill graphs could not be captured: prefill runs eagerly
    num_prefill_graph_steps: int = 0    # prefill forwards (with their first frames) replayed
    num_prefill_eager_steps: int = 0    # prefill forwards run eagerly: the counted fallback
    num_prefill_padding_tokens: int = 0
    prefill_shape_histogram: Counter = field(default_factory=Counter)   # (kind, prompts, positions) -> forwards
    warm_up_s: float = 0.0
    num_warm_up_shapes: int = 0

    @property
    def hit_rate(self) -> float:
        total = self.num_graph_steps + self.num_eager_steps
        return self.num_graph_steps / total if total else 0.0

    @property
    def prefill_hit_rate(self) -> float:
        total = self.num_prefill_graph_steps + self.num_prefill_eager_steps
        return self.num_prefill_graph_steps / total if total else 0.0

    def reset_counters(self) -> None:
        """Forget the steps counted so far (the warm-up's), keep what was captured."""
        self.num_graph_steps = self.num_eager_steps = self.num_padding_rows = 0
        self.num_prefill_graph_steps = self.num_prefill_eager_steps = self.num_prefill_padding_tokens = 0
        self.shape_histogram = Counter()
        self.prefill_shape_histogram = Counter()

    def summary(self) -> dict:
        return dict(num_graphs=self.num_graphs, graph_memory_bytes=self.graph_memory_bytes,
                    capture_s=self.capture_s, num_graph_steps=self.num_graph_steps,
                    num_eager_steps=self.num_eager_steps, hit_rate=self.hit_rate,
                    num_padding_rows=self.num_padding_rows,
                    shape_histogram={f"bs{b}": n for b, n in sorted(self.shape_histogram.items())},
                    num_prefill_graphs=self.num_prefill_graphs, prefill_capture_failed=self.prefill_capture_failed,
                    num_prefill_graph_steps=self.num_prefill_graph_steps,
                    num_prefill_eager_steps=self.num_prefill_eager_steps, prefill_hit_rate=self.prefill_hit_rate,
                    num_prefill_padding_tokens=self.num_prefill_padding_tokens,
                    prefill_shape_histogram={f"{k}_p{p}_t{t}": n
                                             for (k, p, t), n in sorted(self.prefill_shape_histogram.items())},
                    warm_up_s=self.warm_up_s, num_warm_up_shapes=self.num_warm_up_shapes)


class DecodeGraphTable:
    """Captured decode steps by batch size, and the smallest one covering a step."""

    def __init__(self, step: DecodeStep, padding_row: list[int], emulate: bool) -> None:
        device = step.model.device
        if not emulate and device.type != "cuda":
            raise ValueError(f"CUDA graphs need a CUDA talker, this one is on {device}")
        self.step, self.padding_row, self.emulate = step, padding_row, emulate
        self.graphs: dict[int, CapturedDecode] = {}
        self.batch_sizes: list[int] = []
        self.pool = None if emulate else torch.cuda.graph_pool_handle()

    @torch.no_grad()
    def capture(self, batch_sizes: list[int], stats: GraphStats) -> None:
        """Every batch size, smallest first (a failure stops before the big ones)."""
        if not batch_sizes or min(batch_sizes) < 1:
            raise ValueError(f"capture needs positive batch sizes, got {batch_sizes}")
        device = self.step.model.device
        reserved0 = torch.cuda.memory_reserved(device) if not self.emulate else 0
        started_s = time.perf_counter()
        for batch_size in sorted(set(batch_sizes)):
            self.graphs[batch_size] = CapturedDecode(self.step, batch_size, self.padding_row, self.emulate, self.pool)
        if not self.emulate:
            torch.cuda.synchronize(device)
            stats.graph_memory_bytes = torch.cuda.memory_reserved(device) - reserved0
        self.batch_sizes = sorted(self.graphs)
        stats.num_graphs = len(self.graphs)
        stats.capture_s = time.perf_counter() - started_s
        tuned = [c for c in gemm_tuning.choices().values() if c.algo is not None]
        logger.info("%s %d talker decode graphs (batch %s) in %.1f s, %.1f MiB; GEMM tuning %.1f s so far, "
                    "%d of %d problems on a cuBLASLt pick", "emulated" if self.emulate else "captured",
                    len(self.graphs), self.batch_sizes, stats.capture_s, stats.graph_memory_bytes / 2**20,
                    gemm_tuning.tuning_seconds, len(tuned), len(gemm_tuning.choices()))

    def find(self, batch_size: int) -> CapturedDecode | None:
        """The graph for a step of batch_size rows (None: no bucket that large is captured, run eagerly)."""
        batch = next((b for b in self.batch_sizes if b >= batch_size), None)
        return None if batch is None else self.graphs[batch]

    def __len__(self) -> int:
        return len(self.graphs)
