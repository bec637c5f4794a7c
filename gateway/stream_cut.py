"""Where streamed text may be cut so that the ids before the cut are final.

Tokenizing a streamed text must give the ids of the whole text. BPE never merges across the
pre-tokenizer's pieces, so the ids of a piece are final once the piece itself is: once no text that
may still arrive can move its boundaries. A piece is *not* final just because it ends before the
text does; the split regex looks past a piece's end:
  - a whitespace run is split according to what follows it (`\\s+(?!\\S)` gives "\\n\\n  " at the end
    of text as one piece, but "\\n\\n", " ", " " before a digit, "\\n\\n", " ", " x" before a letter);
  - with the case-splitting regex (split_regex.MISTRAL_FIX_PATTERN) a run of letters can split
    before its end and re-join when a lower-case letter arrives ("A中B" -> "A中", "B"; "A中Bc" -> one).
Every alternative of both regexes scans a run of one character class (letters and marks,
whitespace, punctuation then newlines, a lone digit, a contraction of at most three characters)
plus one character after it. So a piece can only change if its scan reached the end of the text,
and that happens only to pieces that start inside the text's trailing run of letters/marks or of
whitespace, or to the last piece. `trailing_run_start` finds that run; the caller holds back the
pieces from the one containing it.

Three more things can change text that has already arrived, and each one holds back more:
  - NFC: a combining mark or a Hangul jamo that arrives later composes with the last starter
    (`last_starter`), which may change its piece;
  - added tokens ("<|im_end|>"): one may be half arrived (`added_token_prefix_start`);
  - the first piece sits after the chat wrapper's "assistant\\n", into which leading whitespace merges
    (handled by the caller, which scans the wrapper together with the text).
The property tests (tests/test_text_stream_real_vocab.py, tests/test_text_stream_cuts.py) check
every cut of every corpus text against whole-text encoding on the real Qwen vocabulary, and every
cut of every short string over an alphabet of the tricky classes.
"""
from __future__ import annotations

import unicodedata

_WORD, _SPACE, _OTHER = 0, 1, 2


def _char_class(ch: str) -> int:
    # str.isspace() is a superset of Unicode White_Space (it adds U+001C..U+001F): a superset only
    # holds back more, never less.
    if ch.isspace():
        return _SPACE
    if unicodedata.category(ch)[0] in "LM":
        return _WORD
    return _OTHER


def trailing_run_start(text: str) -> int:
    """Start of the trailing run of letters/marks or of whitespace; len(text) - 1 for any other
    last character (a digit or punctuation ends its own scan); 0 for empty text."""
    if not text:
        return 0
    last = _char_class(text[-1])
    if last == _OTHER:
        return len(text) - 1
    start = len(text) - 1
    while start > 0 and _char_class(text[start - 1]) == last:
        start -= 1
    return start


def last_starter(text: str) -> int:
    """Index of the last character of canonical combining class 0; 0 if there is none. Text that
    arrives later can recompose only from there on (NFC composes a character with the last starter
    before it, and reorders only runs of non-starters)."""
    for index in range(len(text) - 1, -1, -1):
        if unicodedata.combining(text[index]) == 0:
            return index
    return 0


def proper_prefixes(contents: tuple[str, ...]) -> frozenset[str]:
    """Every proper prefix of every added token's content ("<", "<|", ... "<|im_end|" of "<|im_end|>")."""
    return frozenset(content[:k] for content in contents for k in range(1, len(content)))


def added_token_prefix_start(text: str, prefixes: frozenset[str], max_len: int) -> int:
    """Earliest index from which `text` is a proper prefix of an added token's content (the rest of
    the token may still arrive); len(text) if there is none. `prefixes`: `proper_prefixes` of the
    contents (a set lookup per position: scanning every content at every position took ~17% of the
    gateway's CPU for word-by-word streams, 8.9 -> 7.4 ms a stream against a fake talker)."""
    for start in range(max(0, len(text) - max_len + 1), len(text)):
        if text[start:] in prefixes:
            return start
    return len(text)
