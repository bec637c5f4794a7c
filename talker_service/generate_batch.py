"""Continuous batching for the offline generate API, as a thin user of the talker engine.

The engine (talker_service.engine) does the work: prefill into free slots, then one decode
step per call over every request whose next text-track token is known; a request whose text has
not arrived yet is parked, not padded. This wrapper only gathers each request's frames into one
`Finished` result, keyed by whatever the caller submitted it under.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Hashable

import numpy as np
import torch

from talker_service.engine import EngineConfig, ErrorOut, ModelRunner, TalkerEngine
from talker_service.model import SamplingParams, TalkerModel
from talker_service.prompt import PromptRequest, PromptVocab, TextFeed

logger = logging.getLogger(__name__)


@dataclass
class Finished:
    codes: torch.Tensor     # [n, 16] int64 on CPU
    finish_reason: str      # "eos" | "length" | "context" | "budget"
    prompt_len: int


@dataclass
class _Row:
    """A request still generating: its frames so far (the engine streams them out per step)."""
    key: Hashable
    frames: list[np.ndarray] = field(default_factory=list)   # each [16] int64


class BatchRunner:
    def __init__(self, model: TalkerModel, vocab: PromptVocab):
        if model.cache is None:
            raise RuntimeError("TalkerModel has no KV cache; load it with from_checkpoint")
        # Offline: every submitted request waits its turn (no refusal), no padding to buckets.
        config = EngineConfig(max_slots=model.cache.max_slots, max_seq_len=model.cache.max_seq_len,
                              max_queued=2**31, pad_to_buckets=False)
        self.engine = TalkerEngine(ModelRunner(model, vocab, config))
        self._rows: dict[Hashable, _Row] = {}
        self.finished: dict[Hashable, Finished] = {}

    @property
    def has_work(self) -> bool:
        return self.engine.has_work()

    @property
    def active(self) -> list[_Row]:
        """Requests holding a slot, with the frames they have generated so far."""
        return [self._rows[key] for key in self.engine.scheduler.running]

    def submit(self, key: Hashable, request: PromptRequest, feed: TextFeed, sampling: SamplingParams) -> None:
        self.engine.add_request(key, request, feed, sampling)
        self._rows[key] = _Row(key)

    def step(self) -> bool:
        """Admit what fits, then advance every ready request by one frame. False when nothing
        could run (all requests parked on text that has not arrived)."""
        if not self.engine.has_runnable():
            return False
        for out in self.engine.step():
            if isinstance(out, ErrorOut):
                self._rows.pop(out.request_id, None)
                raise ValueError(out.message)
            row = self._rows[out.request_id]
            row.frames.extend(out.codes)
            if out.is_final:
                del self._rows[out.request_id]
                codes = np.stack(row.frames) if row.frames else np.zeros((0, 16), dtype=np.int64)
                self.finished[out.request_id] = Finished(torch.from_numpy(codes), out.finish_reason,
                                                         out.num_prompt_tokens)
        return True
