"""Continuous batching for the offline generate API: prefill into free slots, then one decode
step per call over every row whose next text-track token is known.

A row whose text has not arrived yet (TextFeed says not ready) is parked: it skips the step
without consuming anything and without holding back the others, and resumes when text comes.
Rows finish independently (EOS or length) and free their slot for the next waiting request.
This is the synchronous core of what the talker service's scheduler does around the same
model calls; it holds no sockets and is driven by `step()`.
"""
from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass, field
from typing import Hashable

import torch

from talker_service.model import FrameDecoder, SamplingParams, SlotSamplingTable, TalkerModel
from talker_service.prompt import PromptRequest, PromptVocab, TextFeed, build_prefill

logger = logging.getLogger(__name__)


@dataclass
class _Waiting:
    key: Hashable
    request: PromptRequest
    feed: TextFeed
    sampling: SamplingParams


@dataclass
class _Row:
    key: Hashable
    slot: int
    feed: TextFeed
    prompt_len: int
    max_frames: int
    frames: list[torch.Tensor] = field(default_factory=list)   # each [16] int64
    codec_embeds: torch.Tensor | None = None                  # [H] embed_frame of the last frame


@dataclass
class Finished:
    codes: torch.Tensor     # [n, 16] int64 on CPU
    finish_reason: str      # "eos" | "length"
    prompt_len: int


class BatchRunner:
    def __init__(self, model: TalkerModel, vocab: PromptVocab):
        if model.cache is None:
            raise RuntimeError("TalkerModel has no KV cache; load it with from_checkpoint")
        self.model = model
        self.vocab = vocab
        self.max_slots = model.cache.max_slots
        self.max_seq_len = model.cache.max_seq_len
        self.table = SlotSamplingTable(self.max_slots, model.config.vocab_size, model.device)
        self.frames = FrameDecoder(model, self.table, vocab.ids.codec_eos)
        self.free_slots = list(range(self.max_slots - 1, -1, -1))
        self.waiting: deque[_Waiting] = deque()
        self.active: list[_Row] = []
        self.finished: dict[Hashable, Finished] = {}

    @property
    def has_work(self) -> bool:
        return bool(self.waiting or self.active)

    def submit(self, key: Hashable, request: PromptRequest, feed: TextFeed, sampling: SamplingParams) -> None:
        self.waiting.append(_Waiting(key, request, feed, sampling))

    @torch.no_grad()
    def step(self) -> bool:
        """Admit what fits, then advance every ready row by one frame. False when nothing could
        run (all rows parked on text that has not arrived)."""
        admitted = self._admit()
        return self._decode() or admitted

    # ---- admission: prefill + first frame --------------------------------------------------
    def _admit(self) -> bool:
        new_rows, hiddens, logits = [], [], []
        for waiting in list(self.waiting):
            if not self.free_slots:
                break
            if not waiting.feed.is_prefill_ready:
                continue
            self.waiting.remove(waiting)
            embeds = build_prefill(self.vocab, waiting.request, waiting.feed, self.model,
                                   hidden_size=self.model.config.hidden_size, device=self.model.device,
                                   dtype=self.model.dtype)  # [L, H]
            prompt_len = embeds.shape[0]
            if prompt_len >= self.max_seq_len:
                raise ValueError(f"request {waiting.key!r}: prompt of {prompt_len} positions does not fit the "
                                 f"context of {self.max_seq_len}; shorten the text or reference")
            # official: max_new_tokens counts c0 samplings and the last one never gets residual
            # codes, so at most max_new_tokens-1 frames; frame g>=1 is decoded at position L+g-1
            max_frames = min(waiting.sampling.max_new_tokens - 1, self.max_seq_len - prompt_len + 1)
            if max_frames <= 0:
                self.finished[waiting.key] = Finished(torch.zeros(0, 16, dtype=torch.long), "length", prompt_len)
                continue
            slot = self.free_slots.pop()
            hidden, logit = self.model.prefill(embeds, slot)
            self.table.assign(slot, waiting.sampling)
            new_rows.append(_Row(waiting.key, slot, waiting.feed, prompt_len, max_frames))
            hiddens.append(hidden)
            logits.append(logit)
            logger.debug("request %r: prefilled %d positions into slot %d", waiting.key, prompt_len, slot)
        if not new_rows:
            return False
        slots = torch.tensor([r.slot for r in new_rows], device=self.model.device)
        steps = torch.zeros(len(new_rows), dtype=torch.long, device=self.model.device)
        out = self.frames.finish(torch.stack(hiddens), torch.stack(logits), slots, steps)
        self.active.extend(new_rows)
        self._accept(new_rows, out.codes, out.codec_embeds)
        return True

    # ---- one decode step over the ready rows ------------------------------------------------
    def _decode(self) -> bool:
        rows, text_ids = [], []
        for row in self.active:
            token = row.feed.take_step()
            if token is None:   # parked: its next text token has not arrived
                continue
            rows.append(row)
            text_ids.append(token)
        if not rows:
            return False
        device = self.model.device
        text = self.model.embed_text(torch.tensor(text_ids, device=device))                 # [bs, H]
        inputs = torch.stack([r.codec_embeds for r in rows]) + text                          # [bs, H]
        slots = torch.tensor([r.slot for r in rows], device=device)
        steps = torch.tensor([len(r.frames) for r in rows], device=device)
        positions = torch.tensor([r.prompt_len + len(r.frames) - 1 for r in rows], device=device)
        out = self.frames.decode(inputs, slots, positions, steps)
        self._accept(rows, out.codes, out.codec_embeds)
        return True

    def _accept(self, rows: list[_Row], codes: torch.Tensor, codec_embeds: torch.Tensor) -> None:
        host_codes = codes.cpu()   # [bs, 16]; one sync per step decides which rows end
        for i, row in enumerate(rows):
            if int(host_codes[i, 0]) == self.vocab.ids.codec_eos:
                self._finish(row, "eos")
                continue
            row.frames.append(host_codes[i])
            row.codec_embeds = codec_embeds[i]
            if len(row.frames) >= row.max_frames:
                self._finish(row, "length")

    def _finish(self, row: _Row, reason: str) -> None:
        self.active.remove(row)
        self.model.free_slot(row.slot)
        self.free_slots.append(row.slot)
        codes = torch.stack(row.frames) if row.frames else torch.zeros(0, 16, dtype=torch.long)
        self.finished[row.key] = Finished(codes, reason, row.prompt_len)
        logger.debug("request %r: %d frames (%s)", row.key, codes.shape[0], reason)
