"""Prompt prefill plus the first frame as one CUDA graph per (kind, prompts bucket, length bucket).

`PrefillStep` is one forward over P right-padded prompt chunks of T positions (TalkerModel.
prefill_chunk), then, for the chunks that end their prompt, the first frame: codebook-0 sampling
from the last real position and the 15-step code predictor (FrameDecoder.finish). It reads and
writes only device tensors (static embeddings [P, T, H] and four index rows), so it is captured
once per shape and replayed; `prefill_plan.py` decides the shapes.

Index rows: slots, starts, last (index of each chunk's last real position) and sample slots.
A chunk that ends its prompt samples into its own slot (history mark, last-frame embedding);
a chunk that does not, and every padding row (slot = the scratch slot), samples into the scratch
slot, which no request owns: the wasted sampling has no effect on any request. Right padding is
harmless: queries are causal, so a real position never sees the padding after it, and padding
keys land past the prompt's length where the first decode step overwrites them before reading.

`emulate=True` (CPU tests) keeps the static buffers, padding and lookup and runs the step
eagerly instead of replaying.
"""
from __future__ import annotations

import logging
import time

import numpy as np
import torch

from talker_service.engine.graphs import GraphStats, capture_graph
from talker_service.engine.prefill_plan import CONTINUED, FRESH
from talker_service.model import FrameDecoder, TalkerModel

logger = logging.getLogger(__name__)

NUM_PREFILL_ROWS = 4   # slots, starts, last real index, sample slots


class PrefillStep:
    def __init__(self, model: TalkerModel, frames: FrameDecoder, codec_embeds: torch.Tensor) -> None:
        self.model, self.frames, self.codec_embeds = model, frames, codec_embeds

    def span(self, kind: str) -> int | None:
        """Keys a chunk of this kind attends over: its own (fresh) or its slot's whole cache row."""
        return None if kind == FRESH else self.model.cache.max_seq_len

    def forward(self, embeds: torch.Tensor, slots: torch.Tensor, starts: torch.Tensor, last: torch.Tensor,
                kind: str) -> torch.Tensor:
        """embeds [P, T, H] -> post-norm hidden [P, H] at each row's last real position."""
        hidden = self.model.prefill_chunk(embeds, slots, starts, self.span(kind))       # [P, T, H]
        rows = torch.arange(hidden.shape[0], device=hidden.device)
        return hidden[rows, last]

    def first_frames(self, hidden: torch.Tensor, sample_slots: torch.Tensor) -> torch.Tensor:
        """hidden [P, H] -> codes [P, 16] of frame 0, recorded in sample_slots [P]."""
        logits = self.model.head(hidden)
        steps = torch.zeros_like(sample_slots)
        out = self.frames.finish(hidden, logits, sample_slots, steps)
        self.codec_embeds[sample_slots] = out.codec_embeds.to(self.codec_embeds.dtype)
        return out.codes

    def __call__(self, embeds: torch.Tensor, index_rows: torch.Tensor, kind: str) -> torch.Tensor:
        """embeds [P, T, H], index_rows int64 [4, P] -> codes int64 [P, 16] (capturable)."""
        slots, starts, last, sample_slots = index_rows
        return self.first_frames(self.forward(embeds, slots, starts, last, kind), sample_slots)


class CapturedPrefill:
    """Static embeddings and index rows, pinned host staging, and the graph of one shape."""

    def __init__(self, step: PrefillStep, kind: str, num_prompts: int, num_positions: int, padding_row: list[int],
                 emulate: bool, pool=None) -> None:
        model = step.model
        device = model.device
        self.step, self.kind, self.num_prompts, self.num_positions = step, kind, num_prompts, num_positions
        self.padding_row = np.asarray(padding_row, dtype=np.int64)                           # [4]
        host = torch.zeros(NUM_PREFILL_ROWS, num_prompts, dtype=torch.long)
        self.host = host.pin_memory() if device.type == "cuda" else host                     # [4, P]
        self.host.numpy()[:] = self.padding_row[:, None]
        self.index_rows = self.host.to(device)                                               # [4, P]
        self.embeds = torch.zeros(num_prompts, num_positions, model.config.hidden_size, dtype=model.dtype,
                                  device=device)                                             # [P, T, H]
        self.graph, self.codes = None, None
        if not emulate:   # warm-up runs touch the scratch slot only: every row is padding
            self.graph, self.codes = capture_graph(lambda: step(self.embeds, self.index_rows, kind), pool=pool)

    def run(self, chunks: list[torch.Tensor], rows: np.ndarray) -> torch.Tensor:
        """chunks[i] [len_i, H] with rows int64 [4, n] -> device codes [n, 16]."""
        n = rows.shape[1]
        if n > self.num_prompts or max(c.shape[0] for c in chunks) > self.num_positions:
            raise ValueError(f"{n} chunks of up to {max(c.shape[0] for c in chunks)} positions do not fit the "
                             f"prefill graph of {self.num_prompts} x {self.num_positions}")
        staging = self.host.numpy()
        staging[:, :n] = rows
        staging[:, n:] = self.padding_row[:, None]
        self.index_rows.copy_(self.host, non_blocking=True)
        # zeros past each chunk: padding stays finite whatever ran before (it is masked, never NaN)
        self.embeds.zero_()
        for i, chunk in enumerate(chunks):
            self.embeds[i, :chunk.shape[0]].copy_(chunk)
        if self.graph is None:
            return self.step(self.embeds, self.index_rows, self.kind)[:n]
        self.graph.replay()
        return self.codes[:n]


class PrefillGraphTable:
    """Captured prefill steps by (kind, prompts bucket, length bucket)."""

    def __init__(self, step: PrefillStep, padding_row: list[int], emulate: bool, pool=None) -> None:
        device = step.model.device
        if not emulate and device.type != "cuda":
            raise ValueError(f"CUDA graphs need a CUDA talker, this one is on {device}")
        self.step, self.padding_row, self.emulate = step, padding_row, emulate
        self.graphs: dict[tuple[str, int, int], CapturedPrefill] = {}
        self.pool = pool if pool is not None or emulate else torch.cuda.graph_pool_handle()

    @torch.no_grad()
    def capture(self, shapes: list[tuple[str, int, int]], stats: GraphStats) -> None:
        """Every shape, smallest work first. A capture failure is logged with its traceback and
        leaves the table empty: prefill then runs eagerly, counted (num_prefill_eager_steps), and the
        talker still serves, where a failure of the decode graphs would stop it."""
        for kind, num_prompts, num_positions in shapes:
            if kind not in (FRESH, CONTINUED) or num_prompts < 1 or num_positions < 1:
                raise ValueError(f"not a prefill shape: {(kind, num_prompts, num_positions)}")
        device = self.step.model.device
        reserved0 = torch.cuda.memory_reserved(device) if not self.emulate else 0
        started_s = time.perf_counter()
        try:
            for kind, num_prompts, num_positions in sorted(shapes, key=lambda s: (s[1] * s[2], s)):
                self.graphs[(kind, num_prompts, num_positions)] = CapturedPrefill(
                    self.step, kind, num_prompts, num_positions, self.padding_row, self.emulate, self.pool)
        except Exception:  # noqa: BLE001 - any capture failure: serve with the eager prefill instead
            logger.exception("talker prefill graph capture failed after %d of %d shapes; prefill runs eagerly",
                             len(self.graphs), len(shapes))
            self.graphs.clear()
            stats.prefill_capture_failed = True
        if not self.emulate:
            torch.cuda.synchronize(device)
            stats.graph_memory_bytes += torch.cuda.memory_reserved(device) - reserved0
        stats.num_prefill_graphs = len(self.graphs)
        stats.capture_s += time.perf_counter() - started_s
        logger.info("%s %d talker prefill graphs in %.1f s", "emulated" if self.emulate else "captured",
                    len(self.graphs), time.perf_counter() - started_s)

    def find(self, kind: str, num_prompts: int, num_positions: int) -> CapturedPrefill | None:
        return self.graphs.get((kind, num_prompts, num_positions))

    def __len__(self) -> int:
        return len(self.graphs)
