"""The checkpoint's Qwen2 byte-level BPE tokenizer built with `tokenizers` (no torch, no
transformers), and exact incremental tokenization of streamed text.

Ids must equal what the official processor gets from Transformers' Qwen2TokenizerFast on the same
files (tests/test_gateway_units.py on the tiny vocabulary, tests/test_text_stream_real_vocab.py on
the real Qwen vocabulary), so the pipeline below mirrors its normalizer, pre-tokenizer regex (the
one the official loader picks for this checkpoint: gateway/split_regex.py) and added tokens.

Streaming: a delta may end inside a word ("Hel"), and BPE of "Hel" + "lo" differs from "Hello".
A pre-tokenizer piece is not final just because more text follows it: the split regex looks past
a piece's end (gateway/stream_cut.py says how far). So each delta re-encodes the text held back so
far together with the delta, commits the ids of the pieces that no later text can change, and keeps
the rest. The ids of committed pieces come from the same encoding (never from re-encoding the
committed text alone, which would see the end of text where more text follows).
"""
from __future__ import annotations

import json
import logging
import re
import unicodedata
from pathlib import Path

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers

from gateway.split_regex import split_pattern_for
from gateway.stream_cut import added_token_prefix_start, last_starter, proper_prefixes, trailing_run_start

logger = logging.getLogger(__name__)

_ROLE_PREFIX = "<|im_start|>assistant\n"
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
    pattern, why = split_pattern_for(model_dir)
    logger.info("text tokenizer %s: split regex: %s", model_dir, why)
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tokenizer.decoder = decoders.ByteLevel()
    config = json.loads((model_dir / "tokenizer_config.json").read_text(encoding="utf-8"))
    added = sorted((config.get("added_tokens_decoder") or {}).items(), key=lambda item: int(item[0]))
    for token_id, spec in added:
        if spec.get("lstrip") or spec.get("rstrip") or spec.get("single_word") or spec.get("normalized"):
            # Every Qwen checkpoint has all four off; streaming cuts assume it (text around such a
            # token would depend on whitespace that may still arrive).
            logger.warning("%s: added token %r has lstrip/rstrip/single_word/normalized set; streamed text "
                           "next to it may tokenize differently from the whole text", model_dir, spec["content"])
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
        contents = tuple(sorted({t.content for t in tokenizer.get_added_tokens_decoder().values()}, key=len,
                                reverse=True))
        self._added_prefixes = proper_prefixes(contents)
        self._added_max_len = max((len(c) for c in contents), default=0)
        # Longest first: at one position the longest token wins, as in tokenizers' added vocabulary.
        self._added_re = re.compile("|".join(map(re.escape, contents))) if contents else None

    @classmethod
    def from_dir(cls, model_dir: str | Path) -> "TextTokenizer":
        return cls(load_tokenizer(model_dir))

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def target_ids(self, text: str) -> list[int]:
        """The whole text, tokenized inside its chat wrapper and sliced as the official prompt
        does (a leading newline merges into the role token; the slice keeps parity then too)."""
        ids = self.encode(f"{_ROLE_PREFIX}{text}<|im_end|>\n<|im_start|>assistant\n")
        return ids[_ROLE_LEN:-_TARGET_SUFFIX_LEN]

    def instruct_ids(self, instruct: str) -> list[int]:
        """Every id of the wrapped instruction segment; [] for no instruction."""
        return self.encode(f"<|im_start|>user\n{instruct}<|im_end|>\n") if instruct else []

    # ---- streaming ------------------------------------------------------------------------------
    def _added_spans(self, text: str) -> list[tuple[int, int]]:
        return [m.span() for m in self._added_re.finditer(text)] if self._added_re else []

    def normalize(self, text: str) -> str:
        """NFC of each stretch between added tokens, as the tokenizer applies it (added tokens are
        matched on the raw text first, then the text between them is normalized)."""
        parts, start = [], 0
        for begin, end in self._added_spans(text):
            parts += [unicodedata.normalize("NFC", text[start:begin]), text[begin:end]]
            start = end
        parts.append(unicodedata.normalize("NFC", text[start:]))
        return "".join(parts)

    def final_ids(self, text: str) -> tuple[int, list[int]]:
        """(cut, ids): the length of the longest prefix of `text` (already `normalize`d) whose
        pieces no text appended later can change (a boundary of the tokenizer's pieces), and the
        ids of the tokens that end at or before it.

        One encoding of `text` gives both: its word ids mark the pre-tokenizer's pieces (added tokens
        are pieces of their own). The piece starts up to `bound` are the same in every text that
        begins with `text` (gateway/stream_cut.py), so the whole text's pieces serve as the
        segment's. (Pre-tokenizing the segment and then encoding, two calls into the tokenizer, made
        a streamed word cost ~35 us of a loaded gateway's CPU, about a tenth of a call's.)"""
        hold = added_token_prefix_start(text, self._added_prefixes, self._added_max_len)
        segment_start = max((end for _, end in self._added_spans(text[:hold])), default=0)
        encoding = self.tokenizer.encode(text, add_special_tokens=False)
        offsets = encoding.offsets
        cut = segment_start
        if hold > segment_start:
            segment = text[segment_start:hold]
            bound = segment_start + min(trailing_run_start(segment), last_starter(segment))
            previous = None
            for word, (start, _) in zip(encoding.word_ids, offsets):
                if word == previous:
                    continue
                previous = word
                if start > bound:
                    break
                if start >= segment_start:
                    cut = start
        ids = encoding.ids
        num_final = 0
        while num_final < len(ids) and offsets[num_final][1] <= cut:
            num_final += 1
        return cut, ids[:num_final]


class IncrementalTokenizer:
    """Feeds text deltas; returns the ids that became final with each one. Concatenated with
    `flush()` at the end, they equal `TextTokenizer.target_ids` of the whole text, however the text
    was cut into deltas."""

    def __init__(self, text_tokenizer: TextTokenizer) -> None:
        self.text_tokenizer = text_tokenizer
        self.pending = ""  # normalized text not yet committed
        self.num_chars = 0
        self.num_tokens = 0
        # Until the first commit the text is scanned behind the wrapper's role prefix, whose "\n"
        # takes in leading whitespace; the first ids then drop the three role tokens as the
        # official slice does.
        self._context = _ROLE_PREFIX

    def _commit(self, text: str, cut: int, ids: list[int]) -> list[int]:
        if self._context:
            ids = ids[_ROLE_LEN:]
        self.pending = text[cut:]
        self._context = ""
        self.num_tokens += len(ids)
        return ids

    def feed(self, delta: str) -> list[int]:
        self.num_chars += len(delta)
        # Each stretch of `pending` is already NFC, and NFC(NFC(a) + b) == NFC(a + b).
        text = self._context + self.text_tokenizer.normalize(self.pending + delta)
        cut, ids = self.text_tokenizer.final_ids(text)
        if cut <= len(self._context):
            self.pending = text[len(self._context):]
            return []
        return self._commit(text, cut, ids)

    def flush(self) -> list[int]:
        """Commit everything, the held-back piece included (the end of input, or a client's flush:
        text sent after a flush is tokenized as if the text had ended there)."""
        if not self.pending:
            return []
        text = self._context + self.pending
        return self._commit(text, len(text), self.text_tokenizer.encode(text))
