"""Turning user strings into the bare token ids a prompt needs.

The official wrapper tokenizes each text inside its chat wrapper and slices fixed counts off the
ends (3 role tokens in front, 5 behind a target text). We do the same rather than tokenizing the
bare text, because BPE merges across the boundary: a text that starts with a newline merges it
into the role's "\n", and the official prompt then carries that merged token in its role
position. `TargetText.role_ids` keeps whatever the slice produced so prompts stay identical to
the official ones even then. (Reference transcripts for cloning are tokenized by
talker_service.voice.builder.reference_text_ids.)
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

logger = logging.getLogger(__name__)

_ROLE_LEN = 3             # <|im_start|> assistant \n
_TARGET_SUFFIX_LEN = 5    # <|im_end|> \n <|im_start|> assistant \n


def assistant_text(text: str) -> str:
    return f"<|im_start|>assistant\n{text}<|im_end|>\n<|im_start|>assistant\n"


def instruct_text(instruct: str) -> str:
    return f"<|im_start|>user\n{instruct}<|im_end|>\n"


@dataclass(frozen=True)
class TargetText:
    role_ids: list[int]     # the 3 role-position ids (normally [151644, 77091, 198])
    text_ids: list[int]     # t1..tN


def _encode(tokenizer, text: str) -> list[int]:
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    # a batched call (list of lists) would mean a misconfigured tokenizer wrapper
    if ids and isinstance(ids[0], list):
        ids = ids[0]
    return [int(i) for i in ids]


def tokenize_target(tokenizer, text: str, expected_role_ids: list[int] | None = None) -> TargetText:
    if not text or not text.strip():
        raise ValueError("text is empty: nothing to synthesize")
    ids = _encode(tokenizer, assistant_text(text))
    if len(ids) <= _ROLE_LEN + _TARGET_SUFFIX_LEN:
        raise ValueError(f"text {text[:40]!r} produced no tokens between the chat markers")
    role = ids[:_ROLE_LEN]
    if expected_role_ids is not None and role != list(expected_role_ids):
        logger.warning("text starts with characters that merge into the role prefix (%s); "
                       "keeping the merged ids as the official implementation does", role)
    return TargetText(role_ids=role, text_ids=ids[_ROLE_LEN:-_TARGET_SUFFIX_LEN])


def tokenize_instruct(tokenizer, instruct: str) -> list[int]:
    """All ids of the wrapped instruction: every one of them is a text-only prompt position."""
    return _encode(tokenizer, instruct_text(instruct))
