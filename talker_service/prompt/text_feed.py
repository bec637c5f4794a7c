"""Per-request text track that accepts tokens while the request is already generating.

The talker's text track is one stream of text ids S = [ref ids..., t1..tN, tts_eos] followed by
tts_pad forever. The prefill consumes a fixed number of positions of S, and every later decode
step consumes exactly one more. Official non-streaming mode puts all of S in the prefill;
"streaming text" (dual-track) mode puts only t1 there (or, for in-context cloning, as many
positions as the reference codec track is long). Because what a step consumes depends only on S
and never on when tokens arrived, feeding tokens one by one yields exactly the inputs of feeding
the whole text at once. When the next element of S is not known yet (more text may come) the feed
reports "not ready" and the scheduler parks the request instead of padding its text track.
"""
from __future__ import annotations

from collections.abc import Iterable

ALL_TEXT = -1   # num_prefill_positions value for non-streaming mode: wait for end of input


class TextFeed:
    def __init__(self, tts_eos_id: int, tts_pad_id: int, num_prefill_positions: int,
                 ref_ids: Iterable[int] = (), max_text_tokens: int | None = None):
        if num_prefill_positions == 0 or num_prefill_positions < ALL_TEXT:
            raise ValueError(f"num_prefill_positions must be >= 1 or ALL_TEXT, got {num_prefill_positions}")
        self.tts_eos_id = tts_eos_id
        self.tts_pad_id = tts_pad_id
        self.num_prefill_positions = num_prefill_positions
        self.max_text_tokens = max_text_tokens
        self._stream: list[int] = [int(i) for i in ref_ids]   # S without its final eos
        self._num_ref = len(self._stream)
        self._is_closed = False
        self._next = 0                  # index into S of the next element to consume
        self._is_prefilled = False

    # --- input side -------------------------------------------------------------------------
    @property
    def num_text_tokens(self) -> int:
        return len(self._stream) - self._num_ref

    @property
    def is_closed(self) -> bool:
        return self._is_closed

    def push(self, token_ids: Iterable[int]) -> None:
        if self._is_closed:
            raise ValueError("text arrived after end of input")
        ids = [int(i) for i in token_ids]
        if self.max_text_tokens is not None and self.num_text_tokens + len(ids) > self.max_text_tokens:
            raise ValueError(f"text is longer than the limit of {self.max_text_tokens} tokens")
        self._stream.extend(ids)

    def close(self) -> None:
        """End of input; the text track gets its tts_eos and then pads."""
        if self.num_text_tokens == 0:
            raise ValueError("text is empty: nothing to synthesize")
        self._is_closed = True

    # --- consumption side -------------------------------------------------------------------
    def _length(self) -> int | None:
        """Length of S including its eos, or None while more text may come."""
        return len(self._stream) + 1 if self._is_closed else None

    def _known(self, index: int) -> bool:
        return index < len(self._stream) or self._is_closed

    def _element(self, index: int) -> int:
        if index < len(self._stream):
            return self._stream[index]
        return self.tts_eos_id if index == len(self._stream) else self.tts_pad_id

    @property
    def is_prefill_ready(self) -> bool:
        if self.num_prefill_positions == ALL_TEXT:
            return self._is_closed
        # dual-track needs a real text token (t1) in the prefill, not just reference ids
        return (self.num_text_tokens > 0 or self._is_closed) and self._known(self.num_prefill_positions - 1)

    def take_prefill(self) -> list[int]:
        """The text ids of the prefill positions: all of S (non-streaming) or its first
        num_prefill_positions elements, tts_pad-filled past S's end (in-context cloning with a
        short text pads the text track up to the reference codec track)."""
        if self._is_prefilled:
            raise RuntimeError("prefill text already taken")
        if not self.is_prefill_ready:
            raise RuntimeError("prefill is not ready: more text is needed")
        count = self._length() if self.num_prefill_positions == ALL_TEXT else self.num_prefill_positions
        ids = [self._element(i) for i in range(count)]
        self._next = count
        self._is_prefilled = True
        return ids

    @property
    def is_step_ready(self) -> bool:
        return self._is_prefilled and self._known(self._next)

    def take_step(self) -> int | None:
        """The text id added to the next decode step, or None (park the request) when it has not
        arrived yet. Never consumes anything on None. (is_step_ready and _element inlined: called for
        every running stream every step.)"""
        if not self._is_prefilled:
            return None
        index, stream = self._next, self._stream
        if index < len(stream):
            token = stream[index]
        elif self._is_closed:
            token = self.tts_eos_id if index == len(stream) else self.tts_pad_id
        else:
            return None
        self._next = index + 1
        return token
