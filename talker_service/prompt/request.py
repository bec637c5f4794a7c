"""What a prompt is built from, checked against what the loaded model type supports."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .embed import Embedder, PreparedPrompt, embed_prepared, prepare_plan
from .layout import num_icl_prefill_positions, plan_prompt
from .text_feed import ALL_TEXT, TextFeed
from .vocab import PromptVocab


# The official API defaults (generate_voice_clone / generate_custom_voice / generate_voice_design).
DEFAULT_NON_STREAMING_MODE = {"base": False, "custom_voice": True, "voice_design": True}


@dataclass
class PromptRequest:
    language: str = "auto"
    speaker: str | None = None              # CustomVoice named speaker
    instruct_ids: list[int] | None = None   # ids of the wrapped instruction (tokenize_instruct)
    clone: object | None = None             # Base: a voice.clone_prompt.VoiceClonePrompt
    non_streaming_mode: bool = False
    role_ids: list[int] | None = None       # from tokenize_target; None = the standard 3 ids

    @property
    def is_icl(self) -> bool:
        return self.clone is not None and getattr(self.clone, "ref_codes", None) is not None


def validate_request(vocab: PromptVocab, request: PromptRequest) -> None:
    """Raise ValueError naming the problem when the request does not fit the model type."""
    vocab.check_language(request.language)
    kind = vocab.model_type
    if request.instruct_ids and not vocab.has_instruct:
        why = ("the 0.6B CustomVoice model has no instruction input" if kind == "custom_voice"
               else "a Base model takes no instruction; it clones reference audio")
        raise ValueError(f"instruction given but {why}")
    if kind == "base":
        if request.speaker:
            raise ValueError(f"speaker {request.speaker!r} given, but a Base model has no named speakers; "
                             "give reference audio to clone a voice")
        if request.clone is None:
            raise ValueError("a Base model needs a voice to clone: give reference audio (and its transcript for "
                             "in-context cloning) or a saved voice prompt")
        if request.is_icl and not getattr(request.clone, "ref_text_ids", None):
            raise ValueError("in-context cloning needs the reference transcript ids (ref_text)")
        return
    if request.clone is not None:
        raise ValueError(f"voice cloning needs a Base model; this is a {kind} model")
    if kind == "custom_voice":
        if not request.speaker:
            raise ValueError(f"a CustomVoice model needs a speaker; valid: {', '.join(vocab.supported_speakers)}")
        vocab.speaker_id(request.speaker)
    elif request.speaker:
        raise ValueError(f"speaker {request.speaker!r} given, but a {kind} model has no named speakers")


def new_text_feed(vocab: PromptVocab, request: PromptRequest, max_text_tokens: int | None = None) -> TextFeed:
    if request.non_streaming_mode:
        count = ALL_TEXT
    elif request.is_icl:
        count = num_icl_prefill_positions(int(request.clone.ref_codes.shape[0]))
    else:
        count = 1
    ref_ids = request.clone.ref_text_ids if request.is_icl else ()
    return TextFeed(vocab.tts_eos_id, vocab.tts_pad_id, count, ref_ids=ref_ids, max_text_tokens=max_text_tokens)


def build_prefill(vocab: PromptVocab, request: PromptRequest, feed: TextFeed, embedder: Embedder, *,
                  hidden_size: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """[L, H] prefill embeddings; consumes the feed's prefill text (feed.is_prefill_ready must hold)."""
    prepared = prepare_prefill(vocab, request, feed, hidden_size=hidden_size)
    return embed_prepared([prepared], embedder, device=device, dtype=dtype, hidden_size=hidden_size)[0]


def prepare_prefill(vocab: PromptVocab, request: PromptRequest, feed: TextFeed, *, hidden_size: int) -> PreparedPrompt:
    """The prompt's plan, checked, on the host only (ValueError when it cannot be embedded); consumes
    the feed's prefill text. embed_prepared embeds many of these in one go (a burst of arrivals)."""
    clone = request.clone
    plan = plan_prompt(
        vocab, feed.take_prefill(), language=request.language,
        non_streaming_mode=request.non_streaming_mode, role_ids=request.role_ids,
        instruct_ids=request.instruct_ids if vocab.has_instruct else None,
        speaker=request.speaker if vocab.model_type == "custom_voice" else None,
        has_speaker_vector=clone is not None,
        num_ref_frames=int(clone.ref_codes.shape[0]) if request.is_icl else 0)
    return prepare_plan(plan, hidden_size=hidden_size, speaker_vector=clone.x_vector if clone is not None else None,
                        ref_codes=clone.ref_codes if request.is_icl else None)
