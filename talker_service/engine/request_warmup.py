"""Warm-up of the request path: synthetic requests through the engine before SERVING.

The runner's warm-up (warmup.py) runs every captured and padded shape, but a real request also
meets work that is not a shape: building its prompt (speaker or voice rows, role and text
embeddings at the prompt's own length), the sampler's per-slot state, the first frame handed
back, a streamed feed that grows. On the H200 the first request after start still spent 54 ms in
prefill where the steady value is 9 ms (lazily loaded CUDA kernels and first-use allocations on
that path). Here each kind of prompt the model takes runs once, word by word like a streamed
request, for a few frames on real slots, and is then aborted; the engine's and the runner's
counters are reset after, so statistics start at the first real request.
"""
from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

import torch

from talker_service.engine.stats import EngineStats
from talker_service.model import SamplingParams
from talker_service.prompt import PromptRequest, new_text_feed
from talker_service.voice.clone_prompt import VoiceClonePrompt

if TYPE_CHECKING:
    from talker_service.engine.engine import TalkerEngine

logger = logging.getLogger(__name__)

WARM_UP_FRAMES = 3            # the first frame from prefill, then decode steps with text still arriving
_TEXT_IDS = list(range(300, 324))   # ordinary text tokens of every Qwen3-TTS vocabulary, pushed in 3 parts
_REFERENCE_FRAMES = 8         # an in-context clone's reference codes (any valid codes)


def synthetic_prompts(engine: "TalkerEngine") -> list[PromptRequest]:
    """One prompt per kind this model serves: a named speaker, an instruction, an x-vector clone,
    an in-context clone."""
    vocab = engine.vocab
    if vocab.model_type == "custom_voice":
        prompts = [PromptRequest(speaker=vocab.supported_speakers[0])]
        if vocab.has_instruct:
            prompts.append(PromptRequest(speaker=vocab.supported_speakers[0], instruct_ids=_TEXT_IDS[:6]))
        return prompts
    if vocab.model_type == "voice_design":
        return [PromptRequest(instruct_ids=_TEXT_IDS[:6])]
    hidden = engine.runner.model.config.hidden_size
    x_vector = torch.zeros(hidden)
    codes = torch.zeros(_REFERENCE_FRAMES, 16, dtype=torch.long)
    return [PromptRequest(clone=VoiceClonePrompt(x_vector=x_vector, ref_codes=None, ref_text_ids=None)),
            PromptRequest(clone=VoiceClonePrompt(x_vector=x_vector, ref_codes=codes, ref_text_ids=_TEXT_IDS[:6]))]


@torch.no_grad()
def warm_up_requests(engine: "TalkerEngine") -> int:
    """Run each synthetic prompt once (text in three parts, WARM_UP_FRAMES frames); -> how many ran.
    Nothing is left behind: every request is aborted, every counter starts from zero after."""
    started_s = time.perf_counter()
    prompts = synthetic_prompts(engine)
    part = len(_TEXT_IDS) // 3
    for index, prompt in enumerate(prompts):
        rid = ("warm-up", index)
        feed = new_text_feed(engine.vocab, prompt, max_text_tokens=engine.config.max_text_tokens)
        feed.push(_TEXT_IDS[:part])
        engine.add_request(rid, prompt, feed, SamplingParams(seed=index, min_new_tokens=WARM_UP_FRAMES + 1,
                                                             max_new_tokens=WARM_UP_FRAMES + 2))
        frames, pushed = 0, 1
        for _ in range(4 * WARM_UP_FRAMES + 8):   # queued -> prefill -> frames; bounded, never a hang
            for out in engine.step():
                if out.request_id != rid:
                    continue
                if not hasattr(out, "codes"):
                    raise RuntimeError(f"talker warm-up request {index} failed: {out.code}: {out.message}")
                frames += out.codes.shape[0]
            if pushed < 3 and rid in engine:
                engine.push_text(rid, _TEXT_IDS[pushed * part:(pushed + 1) * part])
                pushed += 1
                if pushed == 3:
                    engine.end_text(rid)
            if frames >= WARM_UP_FRAMES or rid not in engine:
                break
        if rid in engine:
            engine.abort(rid)
        if frames == 0:
            raise RuntimeError(f"talker warm-up request {index} produced no frame")
    if engine.runner.model.device.type == "cuda":
        torch.cuda.synchronize(engine.runner.model.device)
    engine.stats = EngineStats()
    graph_stats = engine.runner.graph_stats
    graph_stats.reset_counters()
    warm_up_s = time.perf_counter() - started_s
    graph_stats.warm_up_s += warm_up_s
    logger.info("talker warm-up: %d synthetic requests in %.2f s", len(prompts), warm_up_s)
    return len(prompts)
