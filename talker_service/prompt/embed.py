"""Embedding a PromptPlan into the talker's prefill inputs.

Each position is 0 + T(text) + C(codec) accumulated into a zero buffer: adding to an exact 0 is
exact and two-term float addition commutes, so every position equals the official `T + C` sum
bit for bit, up to the matmul blocking of the text projection.
"""
from __future__ import annotations

from typing import Protocol

import torch

from .layout import NO_CODEC, NO_TEXT, SPEAKER, PromptPlan


class Embedder(Protocol):
    """The three lookups the talker model exposes (TalkerModel implements them)."""

    def embed_text(self, ids: torch.Tensor) -> torch.Tensor: ...      # [...] -> [..., H]
    def embed_codec(self, ids: torch.Tensor) -> torch.Tensor: ...     # [...] -> [..., H]
    def embed_frame(self, codes: torch.Tensor) -> torch.Tensor: ...   # [..., 16] -> [..., H]


@torch.no_grad()
def embed_plan(plan: PromptPlan, embedder: Embedder, *, device: torch.device, dtype: torch.dtype,
               hidden_size: int, speaker_vector: torch.Tensor | None = None,
               ref_codes: torch.Tensor | None = None) -> torch.Tensor:
    """[L, H] prefill embeddings. speaker_vector [H] fills the SPEAKER slot; ref_codes [K, 16]
    fills the reference-frame positions."""
    text = torch.tensor(plan.text_ids, dtype=torch.long, device=device)       # [L]
    codec = torch.tensor(plan.codec_ids, dtype=torch.long, device=device)     # [L]
    frames = torch.tensor(plan.ref_frames, dtype=torch.long, device=device)   # [L]
    out = torch.zeros(len(plan), hidden_size, dtype=dtype, device=device)     # [L, H]

    has_text = text != NO_TEXT
    if has_text.any():
        out[has_text] += embedder.embed_text(text[has_text]).to(dtype)
    has_codec = codec >= 0
    if has_codec.any():
        out[has_codec] += embedder.embed_codec(codec[has_codec]).to(dtype)

    is_speaker = codec == SPEAKER
    if is_speaker.any():
        if speaker_vector is None:
            raise ValueError("the prompt has a speaker slot but no speaker vector was given")
        if speaker_vector.shape != (hidden_size,):
            raise ValueError(f"speaker vector must be [{hidden_size}], got {list(speaker_vector.shape)}")
        out[is_speaker] += speaker_vector.to(device=device, dtype=dtype)

    has_frame = frames >= 0
    if has_frame.any():
        if ref_codes is None:
            raise ValueError("the prompt has reference-frame positions but no reference codes were given")
        codes = ref_codes.to(device=device, dtype=torch.long)[frames[has_frame]]   # [K, 16]
        out[has_frame] += embedder.embed_frame(codes).to(dtype)
    unused = (codec == NO_CODEC) & ~has_text & ~has_frame
    if unused.any():
        raise ValueError("prompt plan has positions with neither text nor codec input")
    return out
