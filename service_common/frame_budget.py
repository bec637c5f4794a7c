"""How many codec frames a request may generate: a runaway guard that follows the text's length.

The talker stops a request when the model samples its end-of-speech code. A model that never
does (a random checkpoint, or a real one stuck repeating itself) would otherwise run to the
context limit: minutes of audio for one short sentence. So by default a request may generate
at most `text_budget_frames(num_text_tokens)` frames, a generous margin over the longest speech
that many text tokens plausibly need:

    budget = max(MIN_BUDGET_FRAMES, ceil(FRAMES_PER_TEXT_TOKEN * num_text_tokens) + MARGIN_FRAMES)

Why FRAMES_PER_TEXT_TOKEN = 8 (0.64 s of audio per text token, at 12.5 frames/s): the Qwen2
tokenizer gives about 1.3 tokens per English word and about 0.7 per Chinese character. Normal
read speech (150 words/min, 4-5 Mandarin syllables/s) is about 4 frames per token; slow,
deliberate reading (100-110 words/min, 3 syllables/s) about 5.5-6; digits are one token each and
read at about 5 frames per token ("1,234,567": 9 tokens, about 3.5 s). 8 frames per token is a
third above the slowest of these (about 75 words/min), so real speech ends by end-of-speech well
before the budget. MARGIN_FRAMES (2 s) covers leading/trailing silence and pauses; MIN_BUDGET_FRAMES
(4 s) lets a one-word text have room for a slow word, a spelled-out abbreviation or a pause.

How the limits combine (`frame_budget`): the text budget is raised to an explicit min_frames
(fixed-length requests, e.g. benchmarks with min_frames = max_frames, keep their length) and
lowered to max_frames (an explicit max_frames below the text budget wins). The talker applies the
text budget once the text has ended: a streamed request's budget grows with every text token and
is final only at end of input. The gateway computes the same number up front for unary calls.

Torch-free on purpose: the gateway and the talker share this one formula.
"""
from __future__ import annotations

import math

FRAME_RATE_HZ = 12.5
FRAMES_PER_TEXT_TOKEN = 8.0
MARGIN_FRAMES = 25            # 2 s
MIN_BUDGET_FRAMES = 50        # 4 s


def text_budget_frames(num_text_tokens: int) -> int:
    """Most frames a text of `num_text_tokens` tokens plausibly needs, with the margin above."""
    if num_text_tokens < 0:
        raise ValueError(f"num_text_tokens must be >= 0, got {num_text_tokens}")
    return max(MIN_BUDGET_FRAMES, math.ceil(FRAMES_PER_TEXT_TOKEN * num_text_tokens) + MARGIN_FRAMES)


def frame_budget(num_text_tokens: int, max_frames: int, min_frames: int = 0) -> int:
    """Frames a request with this text may generate: the text budget, raised to `min_frames`,
    capped by `max_frames` (the request's own limit, explicit or the model's default)."""
    return min(max_frames, max(text_budget_frames(num_text_tokens), min_frames))
