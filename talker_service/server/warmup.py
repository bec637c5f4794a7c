"""Warm-up before SERVING, through the engine's own request path (issue #10).

The first request after start took 275 ms on the H200 where the steady one takes ~120: the decode
graphs are captured at start, but the prefill and the first frame run eagerly and pay, on first
use, Triton's JIT compile of each kernel specialization (Triton specializes integer arguments
that are 1 or divisible by 16, so prompt lengths of both kinds matter), cuBLAS handle and heuristic
set-up, and the allocator's first blocks. So the talker runs a few short requests of its own
before it reports SERVING: prompts of several lengths, alone and prefilled together, two frames
each with end of speech masked. They leave no trace: the engine's counters and the graph step
counts are reset afterwards.
"""
from __future__ import annotations

import logging
import time

import torch

from talker_service.engine import ErrorOut, TalkerEngine
from talker_service.engine.stats import EngineStats
from talker_service.model import SamplingParams
from talker_service.prompt import PromptRequest, new_text_feed
from talker_service.voice.clone_prompt import VoiceClonePrompt

logger = logging.getLogger(__name__)

# Text tokens per warm-up prompt: short and long, one divisible by 16 and others not.
WARMUP_TEXT_TOKENS = (5, 16, 37)
WARMUP_FRAMES = 2
MAX_WARMUP_STEPS = 200   # a bound, not an expectation: each round needs WARMUP_FRAMES + 1 steps


def warmup_prompts(engine: TalkerEngine) -> list[tuple[PromptRequest, list[int]]]:
    """(prompt, text ids) pairs in the model type's own voice form; filler text ids."""
    vocab = engine.vocab
    speaker, clone = None, None
    if vocab.model_type == "custom_voice":
        speaker = vocab.supported_speakers[0]
    elif vocab.model_type == "base":   # x-vector cloning with a fixed made-up speaker embedding
        hidden_size = engine.runner.model.config.hidden_size
        clone = VoiceClonePrompt(x_vector=torch.full((hidden_size,), 0.01), ref_codes=None, ref_text_ids=None)
    filler = vocab.tts_pad_id   # any in-vocabulary id: the frames are thrown away
    return [(PromptRequest(language="auto", speaker=speaker, clone=clone, non_streaming_mode=False), [filler] * n)
            for n in WARMUP_TEXT_TOKENS]


def warm_up(engine: TalkerEngine, max_text_tokens: int) -> float:
    """Run the warm-up requests (alone, then all together); returns the seconds it took."""
    started_s = time.monotonic()
    sampling = SamplingParams(seed=0, max_new_tokens=WARMUP_FRAMES + 1, min_new_tokens=WARMUP_FRAMES)
    prompts = warmup_prompts(engine)
    rounds = [[p] for p in prompts] + [prompts[: engine.config.max_prefill_batch]]
    num_requests = 0
    for round_prompts in rounds:
        for prompt, text_ids in round_prompts:
            feed = new_text_feed(engine.vocab, prompt, max_text_tokens=max_text_tokens)
            feed.push(text_ids)
            feed.close()
            engine.add_request(f"warmup-{num_requests}", prompt, feed, sampling)
            num_requests += 1
        for _ in range(MAX_WARMUP_STEPS):
            if not engine.has_work():
                break
            outs = engine.step()
            errors = [o for o in outs if isinstance(o, ErrorOut)]
            if errors:
                raise RuntimeError(f"talker warm-up request failed: {errors[0]}")
        else:
            raise RuntimeError(f"talker warm-up did not finish within {MAX_WARMUP_STEPS} steps")
    engine.stats = EngineStats()
    graph_stats = engine.runner.graph_stats
    graph_stats.num_graph_steps = graph_stats.num_eager_steps = graph_stats.num_padding_rows = 0
    graph_stats.shape_histogram.clear()
    elapsed_s = time.monotonic() - started_s
    logger.info("talker warmed up: %d requests (prompts of %s text tokens, alone and together) in %.2f s",
                num_requests, ", ".join(map(str, WARMUP_TEXT_TOKENS)), elapsed_s)
    return elapsed_s
