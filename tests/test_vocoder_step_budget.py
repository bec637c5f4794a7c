"""How long a vocoder step may be (DeadlineScheduler.budget_row_frames and plan), on a fake clock:
the budget stretches for efficiency only while nobody pays for it, and shrinks below
target_step_ms when a playing stream would otherwise get its chunk late (issue #36)."""
from __future__ import annotations

import numpy as np
import pytest

from service_common.playback import PlaybackClock
from vocoder_service.engine.chunk_policy import ChunkPolicy
from vocoder_service.engine.deadlines import DeadlinePolicy, DeadlineScheduler
from vocoder_service.engine.stream_state import StreamState

FRAME_S = 0.08
MS = 1e-3


def scheduler(**policy) -> DeadlineScheduler:
    # steps of 40 ms stretched to 120, 20 ms from send to listener; the last steps took 10 ms
    policy = {"target_step_ms": 40.0, "max_step_ms": 120.0, "delivery_margin_ms": 20.0, "initial_step_ms": 10.0,
              **policy}
    sched = DeadlineScheduler(ChunkPolicy(2, 25), DeadlinePolicy(**policy), 1 / FRAME_S, launch_cost_row_frames=0.0)
    sched.s_per_row_frame = 1 * MS   # one row-frame: 1 ms of decode
    return sched


def playing(rid: str, slot: int, now_s: float, slack_s: float, num_pending: int) -> StreamState:
    stream = StreamState(rid, slot, None, None, 0.0, 0.0)
    stream.playback = PlaybackClock(deadline_s=now_s + slack_s)
    stream.pending = [np.zeros((num_pending, 16), np.int64)] if num_pending else []
    stream.num_pending = num_pending
    stream.oldest_pending_s = now_s if num_pending else None
    stream.num_chunks_emitted = 1
    return stream


def arrival(rid: str, slot: int, oldest_frame_s: float, num_pending: int = 2) -> StreamState:
    stream = StreamState(rid, slot, None, None, oldest_frame_s, oldest_frame_s)
    stream.pending, stream.num_pending = [np.zeros((num_pending, 16), np.int64)], num_pending
    stream.oldest_pending_s = oldest_frame_s
    return stream


def backlog(n: int, now_s: float, slack_s: float = 5.0) -> list[StreamState]:
    """Streams far ahead with a steady chunk each ready: 25 ms of decode a row."""
    return [playing(f"far{i}", 100 + i, now_s, slack_s + i * MS, 25) for i in range(n)]


def test_the_budget_stretches_to_max_step_only_while_nobody_waits_on_it():
    sched = scheduler()
    assert sched.budget_row_frames(left_out_in_s=10.0) == pytest.approx(120)   # stretched all the way
    assert sched.budget_row_frames(left_out_in_s=0.1) == pytest.approx(40)     # target: 100 ms - 40 - 20 < 40
    assert sched.budget_row_frames(left_out_in_s=0.13) == pytest.approx(70)    # 130 - (40 + 20)


def test_a_backlog_far_ahead_stretches_the_step():
    now = 1.0
    sched = scheduler()
    # seconds ahead, nobody near a deadline: 4 rows of 25 ms fit the 120 ms stretch, a 5th does not
    plan = sched.plan(backlog(5, now), now)
    assert sum(row.num_frames for row in plan.rows) == 100 and plan.num_deferred == 1


def test_a_playing_stream_left_out_shrinks_the_step_below_target():
    now = 1.0
    sched = scheduler()
    sched.s_per_row_frame = 0.5 * MS   # backlog rows of 12.5 ms: three fill the 40 ms target
    assert len(sched.plan(backlog(3, now), now).rows) == 3
    # not due (75 ms > 40 ms horizon) and waiting for a bigger chunk than the 1 frame it has; it needs
    # the next step to start within 75 - (40 + 20) = 15 ms: one backlog row fits that
    waiting = playing("waiting", 0, now, 0.075, 1)
    plan = sched.plan([waiting] + backlog(3, now), now)
    assert [r.request_id for r in plan.rows] == ["far0"] and plan.num_deferred == 2
    # a playing stream that has sent every frame it had counts the same way (its talker is slow)
    starved = playing("starved", 1, now, 0.075, 0)
    assert len(sched.plan([starved] + backlog(3, now), now).rows) == 1
    # once its talker has ended it needs nothing more: the backlog fills the target again
    starved.ended_at_s = now
    assert len(sched.plan([starved] + backlog(3, now), now).rows) == 3


def test_first_chunks_left_out_do_not_shrink_a_step():
    now = 1.0
    sched = scheduler(target_step_ms=40.0, max_step_ms=40.0)
    # twenty arrivals whose oldest frame came 50 ms ago: their key (the arrival) is in the past, but
    # shrinking for them would cut a burst's steps to one chunk each; the 40 ms budget holds 20 x 2
    burst = [arrival(f"new{i}", i, now - 0.05 + i * 0.1 * MS) for i in range(30)]
    plan = sched.plan(burst, now)
    assert [r.request_id for r in plan.rows] == [f"new{i}" for i in range(20)] and plan.num_deferred == 10
