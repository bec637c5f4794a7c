"""Which streams a vocoder step decodes, and how many frames each: by the listener's deadline.

Pure Python on an injectable clock (the engine's), no torch: every rule is testable with a fake
clock. Each open stream has a playback deadline (`service_common.playback.PlaybackClock`: first
chunk + audio sent so far); its slack is that deadline minus now.

- **Due.** A running stream whose slack would run out before the step after this one could
  deliver (slack <= 2 x the step-time estimate + delivery margin) is due: it is decoded this step
  with whatever frames it has, up to a chunk that takes its slack past two horizons (a slack-sized
  sliver would leave it due again next step: at 256 streams on the H200 whole bursts stayed due,
  in small chunks, step after step), whatever else waits.
- **First chunks** (and voice-clone priming rows before them) start the listener's clock: their
  key is the arrival of their oldest frame, so they sort before running streams that still have
  audio, but they take only the step's budget that due rows leave: a burst of arrivals cannot
  lengthen the step that carries a running stream's due chunk (issue #36).
- **Ahead.** A stream with slack s waits until it has a chunk of `slack_chunk_ratio` x s of audio
  (the largest frame bucket within [first chunk, steady chunk]): far ahead, it takes big efficient
  chunks; close to its deadline, small ones. Such a row is decoded when the step's budget has room
  (earliest deadline first), otherwise later: it is not due.
- **Budget.** Rows that are not due fill a step, in deadline order, up to `target_step_ms` of decode
  work from the measured time per row-frame (an EWMA of whole steps): short steps keep the wait of
  an urgent chunk short (a stream's chunk leaves at the end of the step that decodes it). While the
  earliest stream left out would still be served in time by the next step, the step stretches up
  to `max_step_ms`: fewer, fuller launches (a toy model of 256 streams on a contended GPU: +7% of
  the old decode time at 40 ms, +30% at 20 ms, first chunks waiting ~40 ms more). Due rows ignore
  the budget.

Chunk sizes are frame buckets of the chunk policy wherever a row is not cut short by its due time
or its end, so batches replay the captured (batch, frames) graphs.
"""
from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from vocoder_service.engine.batcher import ReadyRow
from vocoder_service.engine.chunk_policy import ChunkPolicy, smallest_bucket_at_least
from vocoder_service.engine.stream_state import StreamState


@dataclass(frozen=True)
class DeadlinePolicy:
    # Not-due rows fill a step up to this much measured decode time; 0: no bound (every ready row).
    # 40 (was 20, with max 40): at 256 open-loop Poisson streams on an H200 TTFA p95 1130 -> 428 ms,
    # +6% audio-s/s, closed and burst unchanged, no stall at 16/64/256 (results 2026-11-28-gapless6):
    # short steps spent the shared GPU on launches while finished streams held vocoder slots.
    target_step_ms: float = 40.0
    # ... and up to this much while every stream left out keeps enough slack for the next step (the
    # longer the step, the fewer launches; slack is seconds at 256 streams, so a due chunk rarely waits)
    max_step_ms: float = 120.0
    # From the vocoder's send to the listener: gateway encode, gRPC, the client (a due stream's chunk
    # must leave this much before its deadline).
    delivery_margin_ms: float = 20.0
    # A stream with s seconds of audio left waits for a chunk of ratio x s of audio: 2 reproduces the
    # old doubling ramp (2, 4, 8, 16 frames) for a stream that keeps up, and shrinks chunks for one
    # that falls behind.
    slack_chunk_ratio: float = 2.0
    # Step-time estimate before the first measured step, and the weight of each new measurement
    # (the time per row-frame; the step-time estimate follows a longer step at once).
    initial_step_ms: float = 10.0
    step_time_alpha: float = 0.2
    # The due horizon's step time: the longest of the last this-many step cycles (a step's decode
    # and the loop's sending after it, while work was waiting). A decaying average let the horizon
    # shrink to ~30 ms between bursts, when a step under the talker's load could take 100 ms or more:
    # most late chunks on the H200 were ready streams that were not yet due.
    step_window: int = 16
    # ... and every cycle that ended within the last this-many seconds (0: the count alone). At 256
    # streams on an H200 the streams that stalled started together (a closed loop's cohorts); the
    # short steps between cohorts had pushed the long ones out of the 16-cycle window (estimate 12.6
    # ms at a level's end). Not measured yet: off until an A/B says otherwise.
    step_window_s: float = 0.0

    def __post_init__(self) -> None:
        for name in ("target_step_ms", "max_step_ms", "delivery_margin_ms", "initial_step_ms", "step_window_s"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.slack_chunk_ratio <= 0:
            raise ValueError(f"slack_chunk_ratio must be > 0, got {self.slack_chunk_ratio}")
        if not 0 < self.step_time_alpha <= 1:
            raise ValueError(f"step_time_alpha must be in (0, 1], got {self.step_time_alpha}")
        if self.step_window < 1:
            raise ValueError(f"step_window must be >= 1, got {self.step_window}")


def urgency_key_s(stream: StreamState, now_s: float) -> float:
    """When a stream's listener needs its next audio: a running stream's playback deadline, or the
    arrival of a first chunk's oldest frame (its listener has waited since; now if none is there).
    Steps take rows, free padded rows and batch order all by this key, earliest first."""
    if stream.playback.is_started:
        return stream.playback.deadline_s
    return now_s if stream.oldest_pending_s is None else stream.oldest_pending_s


@dataclass
class Candidate:
    row: ReadyRow
    key_s: float        # earliest deadline first: the playback deadline, or a first chunk's oldest frame
    is_due: bool        # a running stream that stalls unless decoded this step
    cost: int           # padded frames (the row's frame bucket)
    is_playing: bool = False   # its listener's clock runs (key_s is a playback deadline)


@dataclass
class StepPlan:
    rows: list[ReadyRow]
    num_due: int                 # rows of running streams that had to go this step
    num_deferred: int            # ready rows left for a later step (budget spent)
    wake_s: float | None         # earliest time a waiting stream becomes ready (None: no such stream)


class DeadlineScheduler:
    def __init__(self, chunk: ChunkPolicy, policy: DeadlinePolicy, frames_per_s: float,
                 launch_cost_row_frames: float) -> None:
        self.chunk, self.policy, self.frames_per_s = chunk, policy, frames_per_s
        self.launch_cost_row_frames = launch_cost_row_frames
        self.step_s = policy.initial_step_ms / 1e3          # the longest recent step cycle
        self.s_per_row_frame: float | None = None           # EWMA; None until a step was measured
        self._buckets = chunk.frame_buckets()
        self._cycles_s: deque[float] = deque(maxlen=policy.step_window)
        self._timed_cycles: deque[tuple[float, float]] = deque()   # (ended at, cycle) within step_window_s
        self._last_step: tuple[float, float] | None = None  # (its elapsed, when it ended) while work waited

    # ---- learning ---------------------------------------------------------------------------
    def observe_step(self, row_frames: int, num_batches: int, elapsed_s: float, ended_s: float | None = None,
                     work_left: bool = False) -> None:
        """A step decoded `row_frames` padded frames in `num_batches` launches in `elapsed_s` (plan
        to last chunk out), ending at `ended_s`. It is one step cycle of the due horizon's window;
        with `work_left` (rows it deferred wait) the loop comes straight back, and the gap to the
        next plan (sending, receiving) joins the cycle there (`note_plan`). The time per row-frame
        is learned from steps of at least two steady chunks only: smaller ones are launch-bound,
        and their rate would promise a budget (and a step) several times too large."""
        a = self.policy.step_time_alpha
        if work_left and ended_s is not None:
            self._last_step = (elapsed_s, ended_s)
        else:
            self._record_cycle(elapsed_s, ended_s)
        if row_frames < 2 * self.chunk.steady_chunk_frames:
            return
        rate = elapsed_s / (row_frames + num_batches * self.launch_cost_row_frames)
        self.s_per_row_frame = rate if self.s_per_row_frame is None else self.s_per_row_frame + a * (rate - self.s_per_row_frame)

    def _record_cycle(self, cycle_s: float, at_s: float | None) -> None:
        self._cycles_s.append(cycle_s)
        longest = max(self._cycles_s)
        window_s = self.policy.step_window_s
        if window_s > 0 and at_s is not None:
            timed = self._timed_cycles
            timed.append((at_s, cycle_s))
            while timed[0][0] < at_s - window_s:
                timed.popleft()
            longest = max(longest, max(cycle for _, cycle in timed))
        self.step_s = longest

    def note_plan(self, now_s: float) -> None:
        """A plan begins: a busy loop's last step, with its gap since it ended, is one cycle."""
        if self._last_step is not None:
            elapsed_s, ended_s = self._last_step
            self._last_step = None
            self._record_cycle(elapsed_s + max(0.0, now_s - ended_s), now_s)

    @property
    def due_horizon_s(self) -> float:
        """Slack under which a running stream is due: this step and the next, then delivery."""
        return 2 * self.step_s + self.policy.delivery_margin_ms / 1e3

    def budget_row_frames(self, left_out_in_s: float = 0.0, playing_left_out_in_s: float = math.inf) -> float:
        """Padded row-frames a step may hold: target_step_ms of measured decode work, stretched up to
        max_step_ms while the earliest stream left out of the step (its deadline or wake-up
        `left_out_in_s` from now) could still be served by the step after it: a long step costs
        nobody then, and fewer, fuller launches decode more audio per second of device time. It
        shrinks below target_step_ms (to one steady chunk at least) when a playing stream left out
        (its deadline `playing_left_out_in_s` from now) could not otherwise be served by the next
        step: the due horizon counts on recent steps, so after a run of short ones a full-budget step
        let such a stream fall due too late (a 64-stream backlog joining 8 near-real-time streams,
        steps of 40 ms: 15 ms stalls; stretched to 120: 24 ms)."""
        if self.policy.target_step_ms <= 0 or self.s_per_row_frame is None or self.s_per_row_frame <= 0:
            return math.inf
        target_s = self.policy.target_step_ms / 1e3
        after_s = max(self.step_s, target_s) + self.policy.delivery_margin_ms / 1e3   # the next step, delivery
        step_s = min(max(target_s, self.policy.max_step_ms / 1e3), max(target_s, left_out_in_s - after_s),
                     playing_left_out_in_s - after_s)
        return max(step_s / self.s_per_row_frame, float(self.chunk.steady_chunk_frames))

    # ---- sizing -----------------------------------------------------------------------------
    def target_frames(self, slack_s: float) -> int:
        """Chunk a stream with `slack_s` of audio left waits for: the largest frame bucket within
        [first, steady] that holds at most slack_chunk_ratio x slack of audio."""
        want = self.policy.slack_chunk_ratio * max(slack_s, 0.0) * self.frames_per_s
        best = self.chunk.first_chunk_frames
        for size in self._buckets:
            if self.chunk.first_chunk_frames <= size <= min(want, self.chunk.steady_chunk_frames):
                best = size
        return best

    def _bucket(self, num_frames: int) -> int:
        # the cached list: ChunkPolicy.bucket_for rebuilds it on every call (45% of a plan's time at
        # 256 streams on CPU)
        return smallest_bucket_at_least(self._buckets, num_frames)

    # ---- the plan ---------------------------------------------------------------------------
    def candidate(self, stream: StreamState, now_s: float, num_open: int) -> tuple[Candidate | None, float | None]:
        """-> (this stream's row if it is ready, else None; when it becomes ready if it waits)."""
        steady = self.chunk.steady_chunk_frames
        if stream.num_context_pending:   # priming a clone's voice: needed before its first audio
            n = min(stream.num_context_pending, steady)
            row = ReadyRow(stream.request_id, stream.slot, n, False, False)
            return Candidate(row, stream.opened_at_s, False, self._bucket(n)), None
        pending = stream.num_pending
        if pending == 0:
            return None, None
        playback = stream.playback
        if not playback.is_started:
            target = self.chunk.chunk_frames(0, num_open)
            oldest = urgency_key_s(stream, now_s)
            expires_s = oldest + self.chunk.max_wait_ms / 1e3
            if pending < target and not stream.ended and now_s < expires_s:
                return None, expires_s
            n = min(pending, target)
            row = ReadyRow(stream.request_id, stream.slot, n, True, stream.ended and n == pending)
            return Candidate(row, oldest, False, self._bucket(n)), None
        slack_s = playback.slack_s(now_s)
        horizon_s = self.due_horizon_s
        # the slack-sized chunk, no bigger: a backlog (every frame already here) would otherwise take
        # steady chunks for the first streams in deadline order and leave the rest of the budget-less
        # streams to fall due together
        target = self.target_frames(slack_s)
        is_due = slack_s <= horizon_s
        if is_due:   # enough audio to be clear of the horizon for two more cycles, not a sliver that is due again
            target = max(target, self._bucket(min(steady, math.ceil((2 * horizon_s - slack_s) * self.frames_per_s))))
        if not is_due and pending < target and not stream.ended:
            return None, playback.deadline_s - horizon_s
        # a stream's last frames go as one final chunk when they fit one (its slot frees a step sooner)
        n = pending if stream.ended and pending <= steady else min(pending, target)
        row = ReadyRow(stream.request_id, stream.slot, n, True, stream.ended and n == pending)
        return Candidate(row, playback.deadline_s, is_due, self._bucket(n), is_playing=True), None

    def next_ready(self, streams: list[StreamState], now_s: float) -> tuple[bool, float | None]:
        """(whether some stream has a row ready now, else when the first waiting one becomes ready
        or None). The idle check before receiving: no sort and no budget, and it stops at the first
        ready row (step() plans in full after the receive)."""
        wake_s = None
        for stream in streams:
            cand, wake = self.candidate(stream, now_s, len(streams))
            if cand is not None:
                return True, None
            if wake is not None:
                wake_s = wake if wake_s is None else min(wake_s, wake)
        return False, wake_s

    def plan(self, streams: list[StreamState], now_s: float) -> StepPlan:
        """This step's rows: every due row, then the others earliest deadline first within the budget."""
        self.note_plan(now_s)
        candidates, wake_s, idle_s = [], None, math.inf
        for stream in streams:
            cand, wake = self.candidate(stream, now_s, len(streams))
            if cand is not None:
                candidates.append(cand)
                continue
            if wake is not None:
                wake_s = wake if wake_s is None else min(wake_s, wake)
            if stream.playback.is_started and (wake is not None or not stream.ended):
                # playing without a row now (waiting for a bigger chunk, or every frame sent): the step
                # after this one must still reach it
                idle_s = min(idle_s, stream.playback.deadline_s)
        candidates.sort(key=lambda c: c.key_s)
        due = [c for c in candidates if c.is_due]
        rest = [c for c in candidates if not c.is_due]
        spent = sum(c.cost for c in due)
        chosen, num_deferred = [c.row for c in due], 0
        # a long step also delays what comes after it for the playing streams it leaves out or serves
        # in part: the due rows (next due at their deadline plus this chunk) and those without a row
        # (tests/test_vocoder_deadlines.py: 8 near-real-time streams beside a 64-stream backlog stalled
        # 24 ms at 40/120 ms steps without this)
        after_due_s = min((c.key_s + c.row.num_frames / self.frames_per_s for c in due), default=math.inf)
        floor_s = min(idle_s, after_due_s)
        # the earliest playing stream among rest[i:] (first chunks sort first but do not shrink a step:
        # their key is an arrival, already past, and a burst's would cut every step to one chunk)
        playing_from = [math.inf] * (len(rest) + 1)
        for i in range(len(rest) - 1, -1, -1):
            playing_from[i] = min(playing_from[i + 1], rest[i].key_s if rest[i].is_playing else math.inf)
        for i, cand in enumerate(rest):
            # what a stream left out of this step would still allow: the earliest of those (the next in
            # deadline order, or a waiting one's wake-up) must be servable by the step after this one
            left_out_s = min(rest[i + 1].key_s if i + 1 < len(rest) else math.inf, floor_s,
                             math.inf if wake_s is None else wake_s + self.step_s + self.policy.delivery_margin_ms / 1e3)
            playing_s = min(playing_from[i + 1], floor_s)
            budget = self.budget_row_frames(left_out_s - now_s, playing_s - now_s)
            # one row always goes when nothing is due: a step makes progress whatever the budget
            if spent + cand.cost <= budget or not chosen:
                chosen.append(cand.row)
                spent += cand.cost
            else:   # the rest wait too: rows go in deadline order, none jumps an earlier one
                num_deferred = len(rest) - i
                break
        return StepPlan(chosen, len(due), num_deferred, wake_s)
