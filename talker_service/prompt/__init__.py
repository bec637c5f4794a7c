"""Prompt building for the three Qwen3-TTS model types and the dual-track text feed."""
from .embed import Embedder, PreparedPrompt, embed_plan, embed_prepared
from .layout import PromptPlan, plan_prompt
from .request import (DEFAULT_NON_STREAMING_MODE, PromptRequest, build_prefill, new_text_feed, prepare_prefill,
                      validate_request)
from .text_feed import ALL_TEXT, TextFeed
from .text_ids import TargetText, tokenize_instruct, tokenize_target
from .vocab import PromptVocab

__all__ = [
    "ALL_TEXT", "DEFAULT_NON_STREAMING_MODE", "Embedder", "PreparedPrompt", "PromptPlan", "PromptRequest",
    "PromptVocab", "TargetText", "TextFeed",
    "build_prefill", "embed_plan", "embed_prepared", "new_text_feed", "plan_prompt", "prepare_prefill",
    "tokenize_instruct", "tokenize_target", "validate_request",
]
