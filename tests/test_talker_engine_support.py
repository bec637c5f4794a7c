"""Helpers of the talker engine tests: a tiny CustomVoice engine and request builders. No tests here."""
from __future__ import annotations

import random

import numpy as np

from checkpoint.files import resolve_model_dir
from talker_service.engine import EngineConfig, ErrorOut, FramesOut, ModelRunner, TalkerEngine
from talker_service.model import SamplingParams
from talker_service.prompt import PromptRequest, new_text_feed

SPEAKERS = ("vivian", "ryan", "serena", "eric")
# EngineConfig fields every make_engine() call gets unless it names them: a test module that reruns
# the engine tests in another mode (test_talker_async_decode.py) sets them for its duration
ENGINE_DEFAULTS: dict = {}


def make_engine(max_slots: int = 4, max_seq_len: int = 128, **overrides) -> TalkerEngine:
    config = EngineConfig(max_slots=max_slots, max_seq_len=max_seq_len, **{**ENGINE_DEFAULTS, **overrides})
    return TalkerEngine(ModelRunner.from_checkpoint(resolve_model_dir("tiny"), config))


def text_ids(seed: int, n: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(300, 5000) for _ in range(n)]


def sampling(seed: int, greedy: bool = False, max_new_tokens: int = 12, min_new_tokens: int = 2) -> SamplingParams:
    return SamplingParams(do_sample=not greedy, subtalker_dosample=not greedy, max_new_tokens=max_new_tokens,
                          min_new_tokens=min_new_tokens, seed=seed)


def add(engine: TalkerEngine, rid, ids: list[int] | None, seed: int, *, streaming: bool = True, greedy: bool = False,
        speaker: str = "vivian", max_new_tokens: int = 12, min_new_tokens: int = 2, close: bool = True):
    """Queue a request; its feed gets `ids` (None: nothing yet) and is closed when `close`."""
    prompt = PromptRequest(language="english", speaker=speaker, non_streaming_mode=not streaming)
    feed = new_text_feed(engine.vocab, prompt, max_text_tokens=engine.config.max_text_tokens)
    if ids:
        feed.push(ids)
    if close:
        feed.close()
    engine.add_request(rid, prompt, feed, sampling(seed, greedy, max_new_tokens, min_new_tokens))
    return feed


class Collector:
    """Per request: frames received in order (seq checked), the final output, or the error."""

    def __init__(self) -> None:
        self.frames: dict = {}
        self.final: dict = {}
        self.errors: dict = {}
        self.next_seq: dict = {}

    def take(self, outs: list) -> None:
        for out in outs:
            if isinstance(out, ErrorOut):
                self.errors[out.request_id] = out
                continue
            assert isinstance(out, FramesOut)
            assert out.request_id not in self.final, f"output after the final one for {out.request_id!r}"
            assert out.seq == self.next_seq.get(out.request_id, 0), f"seq gap for {out.request_id!r}"
            self.next_seq[out.request_id] = out.seq + 1
            got = self.frames.setdefault(out.request_id, [])
            assert out.first_frame_index == len(got)
            got.extend(out.codes)
            if out.is_final:
                self.final[out.request_id] = out

    def codes(self, rid) -> np.ndarray:
        rows = self.frames.get(rid, [])
        return np.stack(rows) if rows else np.zeros((0, 16), dtype=np.int64)


def run_until_idle(engine: TalkerEngine, collector: Collector, max_steps: int = 1000) -> None:
    for _ in range(max_steps):
        if not engine.has_work():
            return
        collector.take(engine.step())
    raise AssertionError(f"engine still busy after {max_steps} steps")
