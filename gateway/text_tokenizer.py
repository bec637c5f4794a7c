"""The checkpoint's Qwen2 byte-level BPE tokenizer built with `tokenizers` (no torch, no
transformers), and incremental tokenization of streamed text.

Ids must equal what the offline path gets from Transformers' Qwen2TokenizerFast on the same
files (tests/test_gateway_tokenizer.py checks this on varied text), so the pipeline below mirrors
its normalizer, pre-tokenizer regex and added tokens.

Streaming: a delta may end inside a word ("Hel"), and BPE of "Hel" + "lo" differs from "Hello".
The pre-tokenizer cuts text into pieces that BPE never merges across, and a piece only depends
on the text up to its end, so every piece except the last one is final; the last one is held
back until more text, a flush or the end arrives.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers

logger = logging.getLogger(__name__)

# Qwen2's pre-tokenization pattern (the same as in Transformers' Qwen2 tokenizer).
_QWEN2_PATTERN = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"""
                  r""" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")
_ROLE_LEN = 3           # <|im_start|> assistant \n
_TARGET_SUFFIX_LEN = 5  # <|im_end|> \n <|im_start|> assistant \n


def load_tokenizer(model_dir: str | Path) -> Tokenizer:
    model_dir = Path(model_dir)
    for name in ("vocab.json", "merges.txt", "tokenizer_config.json"):
        if not (model_dir / name).is_file():
            raise ValueError(f"missing file: text tokenizer file {model_dir / name}")
    vocab = json.loads((model_dir / "vocab.json").read_text(encoding="utf-8"))
    merges = []
    for line in (model_dir / "merges.txt").read_text(encoding="utf-8").splitlines():
        if line and not line.startswith("#version"):
            left, right = line.split(" ")
            merges.append((left, right))
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token=None, continuing_subword_prefix="",
                                     end_of_word_suffix="", fuse_unk=False, byte_fallback=False))
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(_QWEN2_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tokenizer.decoder = decoders.ByteLevel()
    config = json.loads((model_dir / "tokenizer_config.json").read_text(encoding="utf-8"))
    added = sorted((config.get("added_tokens_decoder") or {}).items(), key=lambda item: int(item[0]))
    for token_id, spec in added:
        token = AddedToken(spec["content"], single_word=spec.get("single_word", False), lstrip=spec.get("lstrip", False),
                           rstrip=spec.get("rstrip", False), normalized=spec.get("normalized", False),
                           special=spec.get("special", False))
        tokenizer.add_special_tokens([token]) if spec.get("special") else tokenizer.add_tokens([token])
        if tokenizer.token_to_id(spec["content"]) != int(token_id):
            raise ValueError(f"{model_dir}/tokenizer_config.json: added token {spec['content']!r} got id "
                             f"{tokenizer.token_to_id(spec['content'])}, the file says {token_id}")
    return tokenizer


class TextTokenizer:
    """Content token ids of target text, instruct segments and streamed deltas."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer

    @classmethod
    def from_dir(cls, model_dir: str | Path) -> "TextTokenizer":
        return cls(load_tokenizer(model_dir))

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def target_ids(self, text: str) -> list[int]:
        """The whole text, tokenized inside its chat wrapper and sliced as the official prompt
        does (a leading newline merges into the role token; the slice keeps parity then too)."""
        ids = self.encode(f"<|im_start|>assistant\n{text}<|im_end|>\n<|im_start|>assistant\n")
        return ids[_ROLE_LEN:-_TARGET_SUFFIX_LEN]

    def instruct_ids(self, instruct: str) -> list[int]:
        """Every id of the wrapped instruction segment; [] for no instruction."""
        return self.encode(f"<|im_start|>user\n{instruct}<|im_end|>\n") if instruct else []

    def normalize(self, text: str) -> str:
        return self.tokenizer.normalizer.normalize_str(text)

    def split_final(self, normalized: str) -> tuple[str, str]:
        """(prefix made of final pieces, trailing piece to hold back) of NFC-normalized text."""
        pieces = self.tokenizer.pre_tokenizer.pre_tokenize_str(normalized)
        if len(pieces) < 2:
            return "", normalized
        cut = pieces[-1][1][0]
        # An added token ("<|im_end|>") may arrive split across deltas; its start must not be
        # committed as plain text.
        opening = normalized.rfind("<", 0, cut)
        if opening >= 0 and ">" not in normalized[opening:cut]:
            cut = opening
        return normalized[:cut], normalized[cut:]


class IncrementalTokenizer:
    """Feeds text deltas; returns the ids that became final with each one."""

    def __init__(self, text_tokenizer: TextTokenizer) -> None:
        self.text_tokenizer = text_tokenizer
        self.pending = ""
        self.num_chars = 0
        self.num_tokens = 0
        self._is_first = True

    def _ids(self, text: str) -> list[int]:
        if not text:
            return []
        # The first piece goes through the same wrapper as offline so a leading newline merges
        # the same way; later pieces start at a pre-tokenizer boundary and encode alone.
        ids = self.text_tokenizer.target_ids(text) if self._is_first else self.text_tokenizer.encode(text)
        self._is_first = False
        self.num_tokens += len(ids)
        return ids

    def feed(self, delta: str) -> list[int]:
        self.num_chars += len(delta)
        # NFC(NFC(a) + b) == NFC(a + b), so keeping the held text normalized is exact.
        normalized = self.text_tokenizer.normalize(self.pending + delta)
        final, self.pending = self.text_tokenizer.split_final(normalized)
        return self._ids(final)

    def flush(self) -> list[int]:
        """Commit everything, the held-back piece included."""
        text, self.pending = self.pending, ""
        return self._ids(text)
