"""The model runner: the only part of the talker that touches the device.

It owns the TalkerModel (and its slot KV cache), the per-slot sampling table and the frame
decoder. A decode step advances any set of slots by one frame with one `FrameDecoder.decode`.
Built for CUDA graphs (a later perf task): the step reads only static per-slot buffers (the last
frame's codec embedding lives in `codec_embeds[slot]`, not on the request), and with
`pad_to_buckets` the batch is padded to a fixed bucket size with rows that point at a scratch
slot (an extra KV-cache row no request owns), so each bucket has one shape to capture.
"""
from __future__ import annotations

import bisect
import json
import logging
from pathlib import Path

import numpy as np
import torch

from talker_service.engine.config import EngineConfig
from talker_service.model import FrameDecoder, SamplingParams, SlotSamplingTable, TalkerModel
from talker_service.prompt import PromptVocab

logger = logging.getLogger(__name__)


class ModelRunner:
    def __init__(self, model: TalkerModel, vocab: PromptVocab, config: EngineConfig) -> None:
        self.model = model
        self.vocab = vocab
        self.config = config
        self.is_padding = model.device.type == "cuda" if config.pad_to_buckets is None else config.pad_to_buckets
        num_cache_slots = config.max_slots + (1 if self.is_padding else 0)
        cache = model.cache
        if cache is None or cache.max_slots < num_cache_slots or cache.max_seq_len < config.max_seq_len:
            have = "none" if cache is None else f"{cache.max_slots} slots x {cache.max_seq_len} positions"
            raise ValueError(f"the model's KV cache ({have}) is smaller than the engine needs: {num_cache_slots} slots "
                             f"x {config.max_seq_len} positions (max_slots + 1 scratch slot when padding)")
        self.scratch_slot = config.max_slots if self.is_padding else -1
        self.buckets = config.buckets()
        device, hidden_size = model.device, model.config.hidden_size
        self.table = SlotSamplingTable(cache.max_slots, model.config.vocab_size, device)
        self.frames = FrameDecoder(model, self.table, vocab.ids.codec_eos)
        # per slot: embed_frame of its last frame, i.e. the next step's input minus its text track
        self.codec_embeds = torch.zeros(cache.max_slots, hidden_size, dtype=model.dtype, device=device)  # [S, H]
        max_bs = self.buckets[-1]
        self.step_slots = torch.zeros(max_bs, dtype=torch.long, device=device)       # [max_bs]
        self.step_positions = torch.zeros(max_bs, dtype=torch.long, device=device)   # [max_bs]
        self.step_counts = torch.zeros(max_bs, dtype=torch.long, device=device)      # [max_bs] frames so far
        self.step_text = torch.zeros(max_bs, dtype=torch.long, device=device)        # [max_bs] text track ids
        if self.is_padding:   # padding rows sample greedily from a fixed row: no NaN, no randomness
            self.table.assign(self.scratch_slot, SamplingParams(do_sample=False, subtalker_dosample=False,
                                                                min_new_tokens=0, seed=0))
        logger.info("talker runner: %d slots x %d positions on %s, decode buckets %s%s", config.max_slots,
                    config.max_seq_len, device, self.buckets, " (padded, scratch slot)" if self.is_padding else "")

    @classmethod
    def from_checkpoint(cls, model_dir: str | Path, config: EngineConfig, device: str | torch.device = "cpu",
                        dtype: torch.dtype = torch.float32) -> "ModelRunner":
        model_dir = Path(model_dir)
        device = torch.device(device)
        is_padding = device.type == "cuda" if config.pad_to_buckets is None else config.pad_to_buckets
        model = TalkerModel.from_checkpoint(model_dir, device=device, dtype=dtype,
                                            max_slots=config.max_slots + (1 if is_padding else 0),
                                            max_seq_len=config.max_seq_len)
        vocab = PromptVocab.from_config(json.loads((model_dir / "config.json").read_text()))
        return cls(model, vocab, config)

    @property
    def kv_cache_bytes(self) -> int:
        cache = self.model.cache
        return 2 * cache.k.numel() * cache.k.element_size()

    def bucket_for(self, batch_size: int) -> int:
        if not self.is_padding:
            return batch_size
        return self.buckets[bisect.bisect_left(self.buckets, batch_size)]

    # ---- per request ----------------------------------------------------------------------
    def assign(self, slot: int, sampling: SamplingParams) -> None:
        self.table.assign(slot, sampling)

    def release(self, slot: int) -> None:
        self.model.free_slot(slot)

    # ---- model calls ----------------------------------------------------------------------
    @torch.no_grad()
    def prefill(self, embeds: list[torch.Tensor], slots: list[int]) -> np.ndarray:
        """Prompts embeds[i] [L_i, H] into slots[i], then their first frame -> codes [n, 16] int64."""
        if len(embeds) == 1:
            hidden, logits = self.model.prefill(embeds[0], slots[0])
            hidden, logits = hidden[None], logits[None]                        # [1, H], [1, vocab]
        else:   # one right-padded pass for prompts that arrived together
            hidden, logits = self.model.prefill_batch(embeds, slots)          # [n, H], [n, vocab]
        slot_ids = torch.tensor(slots, device=self.model.device)
        steps = torch.zeros(len(slots), dtype=torch.long, device=self.model.device)
        out = self.frames.finish(hidden, logits, slot_ids, steps)
        self.codec_embeds[slot_ids] = out.codec_embeds.to(self.codec_embeds.dtype)
        return out.codes.cpu().numpy()

    @torch.no_grad()
    def decode(self, slots: list[int], positions: list[int], num_frames: list[int], text_ids: list[int]) -> np.ndarray:
        """One frame for each slot: the talker reads text_ids[i] + its last frame at positions[i]
        -> codes [n, 16] int64 (one host sync: the caller needs codes[:, 0] to see EOS)."""
        n = len(slots)
        bs = self.bucket_for(n)
        pad = bs - n
        host = torch.tensor([slots + [self.scratch_slot] * pad, positions + [0] * pad, num_frames + [0] * pad,
                             text_ids + [self.vocab.tts_pad_id] * pad], dtype=torch.long)   # [4, bs]
        for buffer, row in zip((self.step_slots, self.step_positions, self.step_counts, self.step_text), host):
            buffer[:bs].copy_(row, non_blocking=True)
        slot_ids = self.step_slots[:bs]
        inputs = self.codec_embeds[slot_ids] + self.model.embed_text(self.step_text[:bs])   # [bs, H]
        out = self.frames.decode(inputs, slot_ids, self.step_positions[:bs], self.step_counts[:bs])
        self.codec_embeds[slot_ids] = out.codec_embeds.to(self.codec_embeds.dtype)
        return out.codes[:n].cpu().numpy()
