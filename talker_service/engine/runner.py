"""The model runner: the only part of the talker that touches the device.

It owns the TalkerModel (and its slot KV cache), the per-slot sampling table and the frame
decoder. A decode step advances any set of slots by one frame. The step reads only static
per-slot buffers (the last frame's codec embedding lives in `codec_embeds[slot]`, not on the
request); when padding, the batch is padded to a bucket size with rows on a scratch slot (an
extra KV-cache row no request owns), so each bucket has one shape, which `graphs.py` captures
as one CUDA graph per batch bucket. Prompt chunks and their first frames run through
`prefiller.py`, captured per (kind, prompts bucket, length bucket) by `prefill_graphs.py`.
Before the runner is handed out, `warmup.py` runs every shape serving can use.
"""
from __future__ import annotations

import bisect
import dataclasses
import json
import logging
from pathlib import Path

import numpy as np
import torch

from service_common.host_copy import HostCopy, WaitClock
from talker_service.engine.config import EngineConfig, kv_slots_that_fit
from talker_service.engine.graphs import DecodeGraphTable, DecodeStep, GraphStats
from talker_service.engine.prefill_graphs import PrefillGraphTable, PrefillStep
from talker_service.engine.prefill_plan import PrefillShapes
from talker_service.engine.prefiller import PendingPrefill, PrefillChunk, Prefiller
from talker_service.engine.warmup import warm_up
from talker_service.model import FrameDecoder, SamplingParams, SlotSamplingTable, TalkerModel
from talker_service.prompt import PromptVocab

logger = logging.getLogger(__name__)


class ModelRunner:
    def __init__(self, model: TalkerModel, vocab: PromptVocab, config: EngineConfig) -> None:
        self.model = model
        self.vocab = vocab
        self.config = config
        device = model.device
        self.graph_mode = config.graph_mode(device.type)
        self.is_padding = config.is_padding(device.type)
        num_cache_slots = config.max_slots + (1 if self.is_padding else 0)
        cache = model.cache
        if cache is None or cache.max_slots < num_cache_slots or cache.max_seq_len < config.max_seq_len:
            have = "none" if cache is None else f"{cache.max_slots} slots x {cache.max_seq_len} positions"
            raise ValueError(f"the model's KV cache ({have}) is smaller than the engine needs: {num_cache_slots} slots "
                             f"x {config.max_seq_len} positions (max_slots + 1 scratch slot when padding)")
        self.scratch_slot = config.max_slots if self.is_padding else -1
        self.buckets = config.buckets()
        hidden_size = model.config.hidden_size
        self.table = SlotSamplingTable(cache.max_slots, model.config.vocab_size, device)
        self.frames = FrameDecoder(model, self.table, vocab.ids.codec_eos)
        # per slot: embed_frame of its last frame, i.e. the next step's input minus its text track
        self.codec_embeds = torch.zeros(cache.max_slots, hidden_size, dtype=model.dtype, device=device)  # [S, H]
        self.step = DecodeStep(model, self.frames, self.codec_embeds)
        self.step_rows = torch.zeros(4, self.buckets[-1], dtype=torch.long, device=device)  # [4, max_bs] eager path
        if self.is_padding:   # padding rows sample greedily from a fixed row: no NaN, no randomness
            self.table.assign(self.scratch_slot, SamplingParams(do_sample=False, subtalker_dosample=False,
                                                                min_new_tokens=0, seed=0))
        self.graph_stats = GraphStats()
        self.wait_clock = WaitClock()   # time spent waiting on prefill and decode read-backs
        self.graphs: DecodeGraphTable | None = None
        self.prefill_shapes = PrefillShapes.from_config(config)
        prefill_step = PrefillStep(model, self.frames, self.codec_embeds)
        prefill_graphs: PrefillGraphTable | None = None
        if self.graph_mode != "off":
            emulate = self.graph_mode == "emulate"
            self.graphs = DecodeGraphTable(self.step, self.padding_row(), emulate=emulate)
            limit = config.graph_max_batch or self.buckets[-1]
            self.graphs.capture([b for b in self.buckets if b <= limit] or self.buckets[:1], self.graph_stats)
            prefill_graphs = PrefillGraphTable(prefill_step, [self.scratch_slot, 0, 0, self.scratch_slot],
                                               emulate=emulate, pool=self.graphs.pool)
            prefill_graphs.capture(self.prefill_shapes.all(), self.graph_stats)
        self.prefiller = Prefiller(prefill_step, self.prefill_shapes, self.scratch_slot, self.graph_stats,
                                   prefill_graphs)
        logger.info("talker runner: %d slots x %d positions on %s (KV cache %.1f MiB), decode buckets %s, "
                    "prefill %s prompts x %s positions (budget %d per step), graphs %s%s", config.max_slots,
                    config.max_seq_len, device, self.kv_cache_bytes / 2**20, self.buckets,
                    list(self.prefill_shapes.prompt_buckets), list(self.prefill_shapes.length_buckets),
                    self.prefill_shapes.token_budget, self.graph_mode,
                    " (padded, scratch slot)" if self.is_padding else "")
        self.warmed_shapes: set[tuple] = set()
        if config.is_warm_up(device.type):
            self.warmed_shapes = warm_up(self)

    @classmethod
    def from_checkpoint(cls, model_dir: str | Path, config: EngineConfig, device: str | torch.device = "cpu",
                        dtype: torch.dtype = torch.float32) -> "ModelRunner":
        model_dir = Path(model_dir)
        device = torch.device(device)
        num_extra = 1 if config.is_padding(device.type) else 0
        sized = device.type == "cuda" and config.kv_memory_fraction > 0
        # sized: load with a one-position cache, then size the real one from the memory left free
        model = TalkerModel.from_checkpoint(model_dir, device=device, dtype=dtype,
                                            max_slots=1 if sized else config.max_slots + num_extra,
                                            max_seq_len=1 if sized else config.max_seq_len)
        if sized:
            config = size_kv_cache(model, config, num_extra)
        vocab = PromptVocab.from_config(json.loads((model_dir / "config.json").read_text()))
        return cls(model, vocab, config)

    @property
    def kv_cache_bytes(self) -> int:
        cache = self.model.cache
        return 2 * cache.k.numel() * cache.k.element_size()

    def padding_row(self) -> list[int]:
        """Index-row values of a padding row: scratch slot, position 0, frame 0, pad text."""
        return [self.scratch_slot, 0, 0, self.vocab.tts_pad_id]

    def batch_bucket(self, batch_size: int) -> int:
        """The decode bucket a step of batch_size rows (1..max_slots) falls in, padded to it or not."""
        return self.buckets[bisect.bisect_left(self.buckets, batch_size)]

    def bucket_for(self, batch_size: int) -> int:
        """The batch size a step of batch_size rows runs at: its bucket when padding."""
        return self.batch_bucket(batch_size) if self.is_padding else batch_size

    # ---- per request ----------------------------------------------------------------------
    def assign(self, slot: int, sampling: SamplingParams) -> None:
        self.table.assign(slot, sampling)

    def assign_many(self, slots: list[int], samplings: list[SamplingParams]) -> None:
        """assign() for the requests admitted together: one write per table."""
        self.table.assign_many(slots, samplings)

    def release(self, slot: int) -> None:
        self.model.free_slot(slot)

    # ---- model calls ----------------------------------------------------------------------
    def prefill(self, chunks: list[PrefillChunk]) -> np.ndarray:
        """Prompt chunks into their slots (distinct; at most one forward per kind, as prefill_plan
        planned them), then frame 0 of each prompt a chunk ends -> codes [k, 16] int64, in order."""
        return self.prefiller.launch(chunks).wait(self.wait_clock)

    def launch_prefill(self, chunks: list[PrefillChunk]) -> PendingPrefill:
        """prefill() without waiting: `.wait(runner.wait_clock)` gives the codes."""
        return self.prefiller.launch(chunks)

    @torch.no_grad()
    def decode(self, slots: list[int], positions: list[int], num_frames: list[int], text_ids: list[int]) -> np.ndarray:
        """One frame for each slot: the talker reads text_ids[i] + its last frame at positions[i]
        -> codes [n, 16] int64 (one host sync: the caller needs codes[:, 0] to see EOS)."""
        return self.launch_decode(slots, positions, num_frames, text_ids).wait(self.wait_clock)

    @torch.no_grad()
    def launch_decode(self, slots: list[int], positions: list[int], num_frames: list[int],
                      text_ids: list[int]) -> HostCopy:
        """decode() without waiting: the step and its codes' copy to the host are queued, and the
        caller may queue the next step (whose inputs live on the device) before it reads these."""
        n = len(slots)
        if n == 0 or n > self.config.max_slots:
            raise ValueError(f"a decode step needs 1..{self.config.max_slots} slots, got {n}")
        num_positions = max(positions) + 1
        if num_positions > self.config.max_seq_len or min(positions) < 0:
            raise ValueError(f"decode position {max(positions)} is outside the talker context of "
                             f"{self.config.max_seq_len} positions (max_seq_len); the request must end before it")
        rows = np.array([slots, positions, num_frames, text_ids], dtype=np.int64)   # [4, n]
        graph = self.graphs.find(n) if self.graphs is not None else None
        if graph is not None:
            codes = graph.run(rows)
            self.graph_stats.num_graph_steps += 1
            bs = graph.batch_size
        else:
            bs = self.bucket_for(n)
            codes = self._decode_eager(rows, bs)
            self.graph_stats.num_eager_steps += 1
        self.graph_stats.shape_histogram[bs] += 1
        self.graph_stats.num_padding_rows += bs - n
        return HostCopy(codes)   # queued before any later replay can reuse the graph's output memory

    def _decode_eager(self, rows: np.ndarray, bs: int) -> torch.Tensor:
        """The same step without a graph: padded to bs rows on the scratch slot."""
        n = rows.shape[1]
        host = np.empty((4, bs), dtype=np.int64)
        host[:, :n] = rows
        host[:, n:] = np.asarray(self.padding_row(), dtype=np.int64)[:, None]
        index_rows = self.step_rows[:, :bs]
        index_rows.copy_(torch.from_numpy(host), non_blocking=True)
        return self.step(index_rows)[:n]


def size_kv_cache(model: TalkerModel, config: EngineConfig, num_extra_slots: int) -> EngineConfig:
    """Allocate the slot KV cache within config.kv_memory_fraction of the free device memory;
    max_slots shrinks (max_seq_len never does: it is each request's guarantee)."""
    cfg = model.config
    bytes_per_slot = 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * config.max_seq_len * cfg.head_dim \
        * torch.empty((), dtype=model.dtype).element_size()
    model.cache = None   # drop the one-position cache before measuring
    torch.cuda.empty_cache()
    free_bytes, _ = torch.cuda.mem_get_info(model.device)
    num_slots = kv_slots_that_fit(config.max_slots, bytes_per_slot, free_bytes, config.kv_memory_fraction,
                                  num_extra_slots)
    if num_slots < config.max_slots:
        logger.warning("KV cache: %d of the configured %d slots fit in %.2f of %.1f GiB free", num_slots,
                       config.max_slots, config.kv_memory_fraction, free_bytes / 2**30)
        config = dataclasses.replace(config, max_slots=num_slots,
                                     batch_buckets=tuple(b for b in config.batch_buckets if b <= num_slots))
    model.init_runtime(max_slots=num_slots + num_extra_slots, max_seq_len=config.max_seq_len)
    logger.info("KV cache sized: %d slots (+%d scratch) x %d positions = %.1f GiB of %.1f GiB free",
                num_slots, num_extra_slots, config.max_seq_len,
                (num_slots + num_extra_slots) * bytes_per_slot / 2**30, free_bytes / 2**30)
    return config
