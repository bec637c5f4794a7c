"""Prompt building for the three Qwen3-TTS model types and the dual-track text feed."""
from .embed import Embedder, embed_plan
from .layout import PromptPlan, plan_prompt
from .request import DEFAULT_NON_STREAMING_MODE, PromptRequest, build_prefill, new_text_feed, validate_request
from .text_feed import ALL_TEXT, TextFeed
from .text_ids import TargetText, tokenize_instruct, tokenize_target
from .vocab import PromptVocab

__all__ = [
    "ALL_TEXT", "DEFAULT_NON_STREAMING_MODE", "Embedder", "PromptPlan", "PromptRequest", "PromptVocab", "TargetText",
    "TextFeed",
    "build_prefill", "embed_plan", "new_text_feed", "plan_prompt", "tokenize_instruct",
    "tokenize_target", "validate_request",
]
