"""A request as the engine tracks it, and what the engine emits for it."""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Hashable

import numpy as np

from service_common.frame_budget import frame_budget
from talker_service.model import SamplingParams
from talker_service.prompt import PromptRequest, TextFeed


class RequestState(enum.Enum):
    QUEUED = "queued"       # waiting for a slot, or for the text its prefill needs
    RUNNING = "running"     # holds a slot; stepped whenever its next text token is known
    DONE = "done"           # finished, aborted or failed; its slot is free


# Why a request stopped generating (values map onto tts.v1.FinishReason in the server).
FINISH_EOS = "eos"          # the model emitted the codec EOS
FINISH_LENGTH = "length"    # SamplingParams.max_new_tokens reached
FINISH_CONTEXT = "context"  # the slot's max_seq_len reached
FINISH_BUDGET = "budget"    # the frame budget of the text's length reached (service_common/frame_budget.py)


@dataclass
class EngineRequest:
    request_id: Hashable
    prompt: PromptRequest
    feed: TextFeed
    sampling: SamplingParams
    arrival_s: float
    state: RequestState = RequestState.QUEUED
    slot: int = -1
    prompt_len: int = 0
    max_frames_by_length: int = 0     # from SamplingParams.max_new_tokens, set at prefill
    max_frames_by_context: int = 0    # what the slot's max_seq_len leaves after the prompt, set at prefill
    num_frames: int = 0               # frames generated so far (read back and accepted)
    frames_in_flight: int = 0         # frames launched on the device, not read back yet (async decode)
    max_frames: int = 0               # frame_limit() as of the last accepted frame: launches stop there
    next_seq: int = 0                 # sequence number of the next FramesOut
    last_decode_step: int = -1        # number of the last decode step that launched a frame of it
    prefill_start_s: float = 0.0
    prefill_ms: float = 0.0
    first_frame_s: float = 0.0
    second_frame_s: float = 0.0
    finish_reason: str = ""        # FINISH_* once it stopped generating
    pending: list = field(default_factory=list)   # this step's frames, each np [16] int64
    # frame_limit()'s answer once the text has ended, with the two limits it was formed from
    _final_limit: tuple | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def num_launched(self) -> int:
        """Index of the next frame to launch: frames accepted plus those still on the device."""
        return self.num_frames + self.frames_in_flight

    @property
    def position(self) -> int:
        """Talker position of the next decode step: frame g >= 1 is decoded at prompt_len + g - 1."""
        return self.prompt_len + self.num_launched - 1

    def frame_limit(self) -> tuple[int, str]:
        """(most frames this request may have now, the FINISH_* reason when it reaches them).

        The text budget counts only once the text has ended: until then more text may raise it
        (and a streamed request cannot outrun its text anyway: each step consumes one text
        element, so it parks rather than generate far past the text it has). Ties go to the
        request's own max_new_tokens (LENGTH), then to the context.

        Asked after every accepted frame; once the text has ended the answer can only change with
        the two prefill-time limits, so it is kept (with them) instead of recomputed 256 times a
        step (the talker loop's host time at 256 streams, issue #11)."""
        kept = self._final_limit
        if kept is not None and kept[0] == self.max_frames_by_length and kept[1] == self.max_frames_by_context:
            return kept[2], kept[3]
        limit, reason = self.max_frames_by_length, FINISH_LENGTH
        closed = self.feed.is_closed
        if closed:
            budget = frame_budget(self.feed.num_text_tokens, limit, self.sampling.min_new_tokens)
            if budget < limit:
                limit, reason = budget, FINISH_BUDGET
        if self.max_frames_by_context < limit:
            limit, reason = self.max_frames_by_context, FINISH_CONTEXT
        if closed:
            self._final_limit = (self.max_frames_by_length, self.max_frames_by_context, limit, reason)
        return limit, reason


@dataclass(slots=True)   # one per running stream per step: slots make it cheaper to build
class FramesOut:
    """New frames of one request from one step (possibly none on a final output)."""
    request_id: Hashable
    seq: int                    # 0, 1, 2, ... per request
    codes: np.ndarray           # [n, 16] int64
    first_frame_index: int      # index of codes[0] among the request's generated frames
    is_final: bool = False
    finish_reason: str = ""     # FINISH_* on a final output
    num_prompt_tokens: int = 0
    num_text_tokens: int = 0
    queue_ms: float = 0.0
    prefill_ms: float = 0.0
    first_frame_ms: float = 0.0
    second_frame_ms: float = 0.0
    total_ms: float = 0.0


@dataclass
class ErrorOut:
    """The request failed and is gone; `code` is a tts.internal.v1.StatusCode name without prefix."""
    request_id: Hashable
    code: str
    message: str


class EngineError(Exception):
    """A call on the engine was refused; nothing changed. `code` as in ErrorOut."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
