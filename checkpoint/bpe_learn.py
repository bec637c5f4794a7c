"""Deterministic byte-level BPE learning for the tiny checkpoint's text tokenizer.

Written in plain Python instead of `tokenizers.trainers.BpeTrainer` because that trainer's tie
breaking follows hash-map iteration order, and the tiny checkpoint must be byte-identical for a
given seed on every machine. The input is pre-tokenized by the very pipeline Transformers'
`Qwen2Tokenizer` builds (NFC, the Qwen2 split regex, GPT-2 byte-to-unicode mapping), so the
learnt merges apply exactly as they will at encode time.
"""
from __future__ import annotations

from collections import Counter

from tokenizers import Regex, normalizers, pre_tokenizers

# Transformers' Qwen2 pre-tokenization regex (models/qwen2/tokenization_qwen2.py), the same
# one the official tokenizer.json uses.
QWEN2_SPLIT_REGEX = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)


def byte_alphabet() -> list[str]:
    """The 256 byte symbols in GPT-2 vocabulary order: entry i is the symbol of token id i.

    Printable bytes map to themselves and come first (so "!" is id 0); the others map to
    U+0100.. in byte order and follow (so "\\n" = byte 10 -> "Ċ" is id 188 + 10 = 198).
    """
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    symbol_of = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in symbol_of:
            symbol_of[b] = chr(256 + extra)
            extra += 1
    ordered = printable + [b for b in range(256) if b not in printable]
    return [symbol_of[b] for b in ordered]


def split_words(text: str) -> list[str]:
    """Pre-tokenize `text` into byte-level words exactly as Qwen2Tokenizer does."""
    normalized = normalizers.NFC().normalize_str(text)
    pipeline = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_SPLIT_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    return [piece for piece, _ in pipeline.pre_tokenize_str(normalized)]


def learn_merges(text: str, num_merges: int) -> list[tuple[str, str]]:
    """Greedy BPE: repeatedly merge the most frequent adjacent pair (ties: smallest pair)."""
    words: Counter[tuple[str, ...]] = Counter(tuple(word) for word in split_words(text))
    merges: list[tuple[str, str]] = []
    while len(merges) < num_merges:
        pair_counts: Counter[tuple[str, str]] = Counter()
        for symbols, count in words.items():
            for pair in zip(symbols, symbols[1:]):
                pair_counts[pair] += count
        if not pair_counts:
            break
        best = min(pair_counts, key=lambda pair: (-pair_counts[pair], pair))
        if pair_counts[best] < 2:  # a pair seen once teaches nothing general
            break
        merges.append(best)
        merged: Counter[tuple[str, ...]] = Counter()
        for symbols, count in words.items():
            merged[_merge_pair(symbols, best) if best[0] in symbols else symbols] += count
        words = merged
    return merges


def apply_merges(word: str, merges: list[tuple[str, str]]) -> list[str]:
    """Encode one byte-level word with ranked merges (lowest rank first), as BPE does."""
    rank = {pair: i for i, pair in enumerate(merges)}
    symbols = tuple(word)
    while len(symbols) > 1:
        candidates = [(rank[pair], pair) for pair in zip(symbols, symbols[1:]) if pair in rank]
        if not candidates:
            break
        _, pair = min(candidates)
        symbols = _merge_pair(symbols, pair)
    return list(symbols)


def pin_word(merges: list[tuple[str, str]], word: str) -> list[tuple[str, str]]:
    """Append the merges that make `word` (byte-level form) a single token.

    The new merges have the lowest priority, so they only join the pieces the existing merges
    already produce for this word and leave every other word's segmentation unchanged unless
    it contains exactly those pieces.
    """
    pieces = apply_merges(word, merges)
    merges = list(merges)
    while len(pieces) > 1:
        pair = (pieces[0], pieces[1])
        if pair not in merges:
            merges.append(pair)
        pieces = [pieces[0] + pieces[1]] + pieces[2:]
    return merges


def _merge_pair(symbols: tuple[str, ...], pair: tuple[str, str]) -> tuple[str, ...]:
    out: list[str] = []
    i = 0
    while i < len(symbols):
        if i + 1 < len(symbols) and symbols[i] == pair[0] and symbols[i + 1] == pair[1]:
            out.append(pair[0] + pair[1])
            i += 2
        else:
            out.append(symbols[i])
            i += 1
    return tuple(out)
