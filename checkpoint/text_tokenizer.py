"""The text tokenizer: the tiny checkpoint's Qwen2-layout BPE files, and loading any checkpoint's.

The official repos ship `vocab.json`, `merges.txt` and `tokenizer_config.json` (no
`tokenizer.json`), loaded as `Qwen2TokenizerFast`. The tiny tokenizer keeps every id that
prompt building relies on at its official value: the 256 byte tokens at 0..255 in GPT-2 order
("\\n" = 198), "user" = 872, "assistant" = 77091, and the 33 added tokens at 151643..151675.
Everything else is a small vocabulary learnt from `tiny_corpus.SAMPLE_TEXT`.
"""
from __future__ import annotations

import functools
import json
import logging
from pathlib import Path

from checkpoint.bpe_learn import byte_alphabet, learn_merges, pin_word, split_words
from checkpoint.errors import CheckpointError
from checkpoint.layout import TEXT_TOKENIZER_FILES
from checkpoint.tiny_corpus import SAMPLE_TEXT

logger = logging.getLogger(__name__)

NUM_LEARNT_MERGES = 400
# Words the prompt templates tokenize, with their ids in the official vocabulary.
PINNED_WORD_IDS = {"user": 872, "assistant": 77091}
# Official vocabulary: 151643 BPE entries (0..151642), then the added tokens below.
NUM_BPE_IDS = 151643

# (id, content, special) of the Qwen3-TTS added tokens, in id order. The Qwen3 tool/FIM/think
# markers are not "special" (they survive skip_special_tokens), as in the Qwen3 tokenizers.
ADDED_TOKENS: tuple[tuple[int, str, bool], ...] = tuple(
    (NUM_BPE_IDS + i, content, not (14 <= i <= 25))
    for i, content in enumerate(
        [
            "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
            "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
            "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>",
            "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
            "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>", "<think>",
            "</think>", "<|audio_start|>", "<|audio_end|>", "<tts_pad>", "<tts_text_bos>",
            "<tts_text_eod>", "<tts_text_bos_single>", "<|audio_pad|>",
        ]
    )
)


def build_tiny_bpe() -> tuple[dict[str, int], list[tuple[str, str]]]:
    """(vocab: byte-level token -> id, merges in rank order), deterministic."""
    merges = learn_merges(SAMPLE_TEXT, NUM_LEARNT_MERGES)
    for word in PINNED_WORD_IDS:
        (byte_word,) = split_words(word)
        merges = pin_word(merges, byte_word)
    vocab = {symbol: i for i, symbol in enumerate(byte_alphabet())}
    for word, token_id in PINNED_WORD_IDS.items():
        vocab[split_words(word)[0]] = token_id
    reserved = set(PINNED_WORD_IDS.values())
    next_id = len(vocab) - len(PINNED_WORD_IDS)
    for left, right in merges:
        token = left + right
        if token in vocab:
            continue
        while next_id in reserved:
            next_id += 1
        vocab[token] = next_id
        next_id += 1
    if next_id >= min(reserved):
        raise AssertionError("tiny vocabulary grew into the pinned ids; lower NUM_LEARNT_MERGES")
    # Fill the unused ids so the vocabulary is dense like the official one: the added tokens'
    # ids are assigned after the BPE vocabulary, so a gap would shift <|im_start|> and friends.
    # No merge produces a filler, so they never appear in an encoding.
    used = set(vocab.values())
    for token_id in range(NUM_BPE_IDS):
        if token_id not in used:
            vocab[f"<|tiny_unused_{token_id}|>"] = token_id
    return vocab, merges


def tokenizer_config() -> dict:
    """`tokenizer_config.json` in the Qwen2 layout."""
    return {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": {
            str(token_id): {
                "content": content, "lstrip": False, "normalized": False, "rstrip": False,
                "single_word": False, "special": special,
            }
            for token_id, content, special in ADDED_TOKENS
        },
        "additional_special_tokens": [c for _, c, special in ADDED_TOKENS if special and c != "<|endoftext|>"],
        "bos_token": None,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        "model_max_length": 131072,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }


@functools.lru_cache(maxsize=1)
def tiny_tokenizer_files() -> dict[str, str]:
    """file name -> text of the tiny tokenizer files (computed once per process: ~1 s)."""
    vocab, merges = build_tiny_bpe()
    ordered = dict(sorted(vocab.items(), key=lambda item: item[1]))
    merge_lines = ["#version: 0.2"] + [f"{left} {right}" for left, right in merges]
    return {
        "vocab.json": json.dumps(ordered, ensure_ascii=False),
        "merges.txt": "\n".join(merge_lines) + "\n",
        "tokenizer_config.json": json.dumps(tokenizer_config(), ensure_ascii=False, indent=2) + "\n",
    }


def write_text_tokenizer(out_dir: str | Path) -> None:
    """Write vocab.json, merges.txt and tokenizer_config.json of the tiny tokenizer."""
    for name, text in tiny_tokenizer_files().items():
        (Path(out_dir) / name).write_text(text, encoding="utf-8")


def load_text_tokenizer(model_dir: str | Path):
    """The checkpoint's text tokenizer as a Transformers fast tokenizer (Qwen2TokenizerFast)."""
    from transformers import AutoTokenizer

    model_dir = Path(model_dir)
    for name in TEXT_TOKENIZER_FILES:
        if not (model_dir / name).is_file():
            raise CheckpointError(f"missing file: text tokenizer file {model_dir / name}")
    # As the official processor loads it: with fix_mistral_regex=True, Transformers 5 keeps the
    # Qwen2 split regex for the official config.json (transformers_version 4.57.3) and swaps in its
    # case-splitting regex for a config.json without a version (gateway/split_regex.py).
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir), fix_mistral_regex=True)
    if not tokenizer.is_fast:
        raise CheckpointError(f"text tokenizer in {model_dir} did not load as a fast tokenizer")
    logger.debug("loaded text tokenizer from %s (%d tokens)", model_dir, len(tokenizer))
    return tokenizer
