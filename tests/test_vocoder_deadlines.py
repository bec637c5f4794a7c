"""The vocoder's deadline scheduling (vocoder_service/engine/deadlines.py) on a fake clock.

Unit rules first (which rows a step takes, how big), then the engine driven by a simulated talker
and a fake decoder whose calls advance the clock by their padded size: the listener's view (a
player that starts at the first chunk) is measured from what each step returns.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from benchmarks.sim_gapless import QueuedOnClock
from service_common.playback import PlaybackClock, stall_report
from vocoder_service.engine.chunk_policy import ChunkPolicy
from vocoder_service.engine.config import VocoderEngineConfig
from vocoder_service.engine.deadlines import DeadlinePolicy, DeadlineScheduler
from vocoder_service.engine.engine import VocoderEngine
from vocoder_service.engine.stream_state import StreamState

FRAME_S = 0.08          # one codec frame of audio (12.5 frames/s)
SPF = 4                 # samples per frame of the fake decoder, at SPF / FRAME_S Hz
SAMPLE_RATE_HZ = int(SPF / FRAME_S)


def running_stream(rid: str, slot: int, now_s: float, slack_s: float, num_pending: int) -> StreamState:
    stream = StreamState(rid, slot, None, None, 0.0, 0.0)
    stream.playback = PlaybackClock(deadline_s=now_s + slack_s)
    stream.pending = [np.zeros((num_pending, 16), np.int64)]
    stream.num_pending = num_pending
    stream.oldest_pending_s = now_s
    stream.num_chunks_emitted = 1
    return stream


def scheduler(**policy) -> DeadlineScheduler:
    # the rules' tests size their budgets for 20 ms steps stretched to 40 (the defaults until 40/120)
    policy = {"target_step_ms": 20.0, "max_step_ms": 40.0, **policy}
    return DeadlineScheduler(ChunkPolicy(2, 25), DeadlinePolicy(**policy), 1 / FRAME_S, launch_cost_row_frames=0.0)


# ---- rules ------------------------------------------------------------------------------------------

def test_playback_clock_counts_a_stall_once_and_resumes_after_it():
    clock = PlaybackClock()
    assert clock.on_chunk(10.0, 0.16) == 0.0 and clock.deadline_s == pytest.approx(10.16)
    assert clock.on_chunk(10.10, 0.32) == pytest.approx(-0.06)   # early: the listener had 60 ms left
    assert clock.on_chunk(10.60, 0.5) == pytest.approx(0.12)     # needed at 10.48: a 120 ms gap
    assert clock.deadline_s == pytest.approx(11.10)              # playback resumed at 10.60
    assert clock.on_chunk(11.105, 0.1) == pytest.approx(0.005)   # 5 ms: below an audible stall
    assert (clock.num_stalls, clock.longest_stall_s) == (1, pytest.approx(0.12))
    report = stall_report([[0.12, 0.005], [], [0.06]])
    assert report == {"streams_stall_over_50ms": 2, "streams_stall_over_100ms": 1,
                      "longest_stall_ms": pytest.approx(120.0), "num_streams": 3}


def test_a_stream_near_its_deadline_is_served_before_one_far_ahead():
    sched = scheduler()
    sched.observe_step(row_frames=100, num_batches=1, elapsed_s=0.01)   # 0.1 ms per row-frame: a 20 ms step is 200
    near = running_stream("near", 0, 5.0, slack_s=0.03, num_pending=1)   # 30 ms of audio left: due
    far = running_stream("far", 1, 5.0, slack_s=3.0, num_pending=25)     # 3 s ahead, a steady chunk ready
    plan = sched.plan([far, near], 5.0)
    assert [r.request_id for r in plan.rows] == ["near", "far"]   # both fit: the due one first
    assert plan.num_due == 1 and plan.rows[0].num_frames == 1      # due: goes with the one frame it has
    # budget for nothing but the due row: the far stream waits, the near one still goes
    sched.s_per_row_frame = 1.0
    plan = sched.plan([far, near], 5.0)
    assert [r.request_id for r in plan.rows] == ["near"] and plan.num_deferred == 1
    # of several streams that are not due, the budget goes earliest deadline first...
    sched.s_per_row_frame = 0.02 / 60   # 60 row-frames: two steady chunks
    rows = [running_stream(f"s{i}", i, 5.0, slack_s=slack, num_pending=25) for i, slack in enumerate([2.5, 0.9, 1.7])]
    waiting = running_stream("w", 9, 5.0, slack_s=0.06, num_pending=1)   # 1 < its 2-frame chunk: not ready
    plan = sched.plan(rows + [waiting], 5.0)
    assert [r.request_id for r in plan.rows] == ["s1", "s2"] and plan.num_deferred == 1
    # ...and stretches (up to max_step_ms) when no stream left out would fall due before the next step
    assert [r.request_id for r in sched.plan(rows, 5.0).rows] == ["s1", "s2", "s0"]


def test_chunk_size_follows_slack_within_the_captured_frame_buckets():
    sched = scheduler(slack_chunk_ratio=2.0)
    # 2 x slack of audio, down to a frame bucket in [first chunk 2, steady 25]
    assert [sched.target_frames(s) for s in (0.0, 0.1, 0.16, 0.33, 0.7, 1.0, 5.0)] == [2, 2, 4, 8, 16, 25, 25]
    far = running_stream("far", 0, 0.0, slack_s=0.7, num_pending=11)
    assert sched.plan([far], 0.0).rows == []                  # 11 < 16 frames and not due: it waits
    far.num_pending = 19
    [row] = sched.plan([far], 0.0).rows
    assert row.num_frames == 16                               # a bucket, not 19 (no padded graph rows)
    plan = sched.plan([running_stream("w", 0, 0.0, slack_s=0.7, num_pending=3)], 0.0)
    assert plan.rows == [] and plan.wake_s == pytest.approx(0.7 - sched.due_horizon_s)


def test_first_chunks_wait_for_running_streams_due_rows_when_the_budget_is_spent():
    # no stretching: the step holds target_step_ms; recent steps of 30 ms: due within 80 ms
    sched = scheduler(max_step_ms=20.0, initial_step_ms=30.0)
    sched.s_per_row_frame = 0.02 / 25   # a 20 ms step holds 25 row-frames
    # 13 running streams 60 ms from their deadlines: each goes with a first-chunk-sized 2 frames
    due = [running_stream(f"run{i}", i, 1.0, slack_s=0.06, num_pending=25) for i in range(13)]
    new = []
    for i in range(4):
        stream = StreamState(f"new{i}", 20 + i, None, None, 0.9, 0.9)
        stream.pending, stream.num_pending, stream.oldest_pending_s = [np.zeros((2, 16), np.int64)], 2, 0.95
        new.append(stream)
    plan = sched.plan(new + due, 1.0)
    # the due rows (26 row-frames) spend the budget: the arrivals' first chunks wait for the next step
    assert [r.request_id for r in plan.rows] == [d.request_id for d in due] and plan.num_deferred == 4
    assert {r.num_frames for r in plan.rows} == {2} and plan.num_due == 13
    sched.s_per_row_frame = 0.02 / 32   # room for three 2-frame first chunks after them, oldest first
    plan = sched.plan(new + due, 1.0)
    assert [r.request_id for r in plan.rows][13:] == ["new0", "new1", "new2"] and plan.num_deferred == 1


# ---- the engine under a simulated talker ----------------------------------------------------------

class ClockedRunner:
    """Decodes nothing useful, but its launches take fake-clock time like a GPU's: queued one after
    another, each a launch cost plus a cost per padded row-frame, read back in order (the engine
    sends each batch's chunks as it reads them back)."""
    codebook_size = 2048

    def __init__(self, clock: list[float], launch_s: float, per_row_frame_s: float) -> None:
        self.clock, self.launch_s, self.per_row_frame_s = clock, launch_s, per_row_frame_s
        self.calls: list[tuple[int, int]] = []
        self._busy_until_s = 0.0

    def reset(self, slots) -> None:
        pass

    def launch(self, codes, slots, lengths) -> QueuedOnClock:
        bs, _, t = codes.shape
        self.calls.append((bs, t))
        self._busy_until_s = max(self.clock[0], self._busy_until_s) + self.launch_s + bs * t * self.per_row_frame_s
        return QueuedOnClock(self.clock, self._busy_until_s, np.zeros((bs, t * SPF), np.float32))


def simulate(arrivals_s: dict[str, float], num_frames: int, frame_interval_s: float | dict[str, float],
             launch_s: float, per_row_frame_s: float, deadline: DeadlinePolicy | None = None, max_slots: int = 128):
    """Each stream opens at its arrival and gets one frame per frame interval (a talker; 0: all its
    frames at once, a stream the talker finished while the vocoder was behind); the engine steps
    whenever it has work. -> ({request id: its listener's PlaybackClock}, first audio time per
    stream, the runner)."""
    intervals = frame_interval_s if isinstance(frame_interval_s, dict) else dict.fromkeys(arrivals_s, frame_interval_s)
    clock = [0.0]
    runner = ClockedRunner(clock, launch_s, per_row_frame_s)
    # the engine's launch cost in row-frames is the simulated device's
    config = VocoderEngineConfig(max_slots=max_slots, samples_per_frame=SPF, sample_rate_hz=SAMPLE_RATE_HZ,
                                 chunk=ChunkPolicy(2, 25, quick_first_max_streams=0),
                                 deadline=deadline or DeadlinePolicy(),
                                 launch_cost_row_frames=launch_s / per_row_frame_s)
    engine = VocoderEngine(runner, config, clock=lambda: clock[0])
    sent = dict.fromkeys(arrivals_s, 0)
    listeners = {rid: PlaybackClock() for rid in arrivals_s}
    first_audio_s: dict[str, float] = {}
    finished: set[str] = set()
    codes = np.ones((1, 16), np.int64)

    def on_outputs(outs) -> None:   # what the listener gets: as its batch is read back (the server sends then)
        for out in outs:
            if len(out.pcm):
                first_audio_s.setdefault(out.request_id, clock[0])
                listeners[out.request_id].on_chunk(clock[0], len(out.pcm) / SAMPLE_RATE_HZ)
            if out.is_final:
                finished.add(out.request_id)

    while len(finished) < len(arrivals_s):
        now = clock[0]
        next_event = []
        for rid, start_s in arrivals_s.items():   # the talker: frames due by now
            if sent[rid] >= num_frames:
                continue
            if now < start_s:
                next_event.append(start_s)
                continue
            if sent[rid] == 0 and rid not in engine.streams:
                engine.open(rid)
            while sent[rid] < num_frames and start_s + (sent[rid] + 1) * intervals[rid] <= now:
                engine.add_frames(rid, sent[rid], codes, is_final=sent[rid] + 1 == num_frames)
                sent[rid] += 1
            if sent[rid] < num_frames:
                next_event.append(start_s + (sent[rid] + 1) * intervals[rid])
        if engine.has_work():
            engine.step(on_outputs=on_outputs)
            continue
        wake = [t for t in next_event + [now + engine.idle_timeout_s(math.inf)] if math.isfinite(t) and t > now]
        clock[0] = min(wake) if wake else now + 0.001
    return listeners, first_audio_s, runner


BURST_LOAD = dict(num_frames=125, frame_interval_s=0.04, launch_s=0.001)   # the talker at 2x real time


def test_a_burst_of_arrivals_never_pushes_a_running_stream_past_its_deadline_when_capacity_allows():
    # 16 streams playing (staggered over 0.3 s), then 96 arrivals at once at t = 1 s; every stream
    # gets a frame each 40 ms; decoding costs 1 ms a launch + 20 us a padded row-frame: the load
    # takes under 10% of the device, so there is capacity to keep every deadline
    running = {f"run{i}": 0.3 * i / 16 for i in range(16)}
    burst = {f"new{i}": 1.0 for i in range(96)}
    listeners, first_audio_s, runner = simulate({**running, **burst}, per_row_frame_s=20e-6, **BURST_LOAD)
    assert sum(bs * t for bs, t in runner.calls) >= 112 * 125   # every frame decoded
    for rid in running:
        assert listeners[rid].longest_stall_s == 0.0, (rid, listeners[rid])
    # the arrivals start right after their 2-frame first chunks (80 ms of talker time)...
    ttfa_ms = sorted((first_audio_s[rid] - 1.0) * 1e3 for rid in burst)
    assert ttfa_ms[-1] < 120, ttfa_ms[-5:]
    # ...and play without a gap themselves
    assert max(listeners[rid].longest_stall_s for rid in burst) == 0.0
    # the check can fail: past the device's capacity (1.5 ms a row-frame, ~4x over) streams stall
    overloaded, _, _ = simulate({**running, **burst}, per_row_frame_s=1.5e-3, **BURST_LOAD)
    assert max(overloaded[rid].longest_stall_s for rid in running) > 0.1


def test_the_step_budget_keeps_a_backlog_from_starving_streams_near_their_deadline():
    """64 streams whose frames all came at once (the talker finished them while the vocoder was
    behind) next to 8 streams near real time: with every ready row in each step (no budget) the
    backlog's steps grow long and the 8 stall; bounded steps serve the due ones in between."""
    backlog = {f"backlog{i}": 0.5 for i in range(64)}
    live = {f"live{i}": 0.05 * i for i in range(8)}
    intervals = {**dict.fromkeys(backlog, 0.0), **dict.fromkeys(live, 0.07)}
    load = dict(num_frames=125, frame_interval_s=intervals, launch_s=0.001, per_row_frame_s=80e-6)
    bounded, _, _ = simulate({**backlog, **live}, **load)
    assert max(bounded[rid].longest_stall_s for rid in live) == 0.0
    unbounded, _, _ = simulate({**backlog, **live}, deadline=DeadlinePolicy(target_step_ms=0.0), **load)
    assert max(unbounded[rid].longest_stall_s for rid in live) > 0.02


def test_the_engine_idles_until_the_next_stream_is_due():
    clock = [0.0]
    config = VocoderEngineConfig(max_slots=4, samples_per_frame=SPF, sample_rate_hz=SAMPLE_RATE_HZ,
                                 chunk=ChunkPolicy(2, 25, quick_first_max_streams=0))
    engine = VocoderEngine(ClockedRunner(clock, 0.0, 0.0), config, clock=lambda: clock[0])
    engine.open("a")
    engine.add_frames("a", 0, np.ones((2, 16), np.int64))
    [first] = engine.step()
    assert first.num_frames == 2                      # 160 ms of audio from t = 0
    engine.add_frames("a", 1, np.ones((1, 16), np.int64))
    horizon_s = engine.scheduler.due_horizon_s
    assert engine.idle_timeout_s(1.0) == pytest.approx(0.16 - horizon_s)   # then the one frame is due
    clock[0] = 0.16 - horizon_s
    [second] = engine.step()
    assert second.num_frames == 1 and engine.deadline_stats["due_rows"] == 1


def test_the_service_flags_set_the_engine_policy_and_bad_values_are_refused():
    from vocoder_service.server.config import VocoderServiceConfig

    config = VocoderServiceConfig(target_step_ms=0.0, max_step_ms=30.0, delivery_margin_ms=35.0, slack_chunk_ratio=1.5)
    policy = config.engine_config(samples_per_frame=1920, sample_rate_hz=24000).deadline
    assert (policy.target_step_ms, policy.max_step_ms, policy.delivery_margin_ms, policy.slack_chunk_ratio) == \
        (0.0, 30.0, 35.0, 1.5)
    with pytest.raises(ValueError, match="slack_chunk_ratio must be > 0"):
        VocoderServiceConfig(slack_chunk_ratio=0.0)
    with pytest.raises(ValueError, match="target_step_ms must be >= 0"):
        VocoderServiceConfig(target_step_ms=-1.0)


def test_getstats_reports_the_deadline_counters_and_a_reset_clears_them():
    from vocoder_service.server.stats import deadline_stats

    clock = [0.0]
    config = VocoderEngineConfig(max_slots=4, samples_per_frame=SPF, sample_rate_hz=SAMPLE_RATE_HZ,
                                 chunk=ChunkPolicy(2, 25, quick_first_max_streams=0))
    engine = VocoderEngine(ClockedRunner(clock, 0.001, 0.0), config, clock=lambda: clock[0])
    engine.open("a")
    engine.add_frames("a", 0, np.ones((2, 16), np.int64))
    engine.step()                                     # 160 ms of audio from t = 1 ms
    engine.add_frames("a", 1, np.ones((1, 16), np.int64))
    clock[0] = 0.5                                    # 339 ms past the deadline: due, and late
    engine.step()
    stats = deadline_stats(engine)
    assert (stats.num_due_rows, stats.num_late_chunks) == (1, 1)
    assert stats.max_lateness_ms == pytest.approx(340, abs=2) and stats.step_estimate_ms > 0
    assert stats.budget_row_frames == 0.0             # no step of two steady chunks measured: no bound yet
    engine.reset_deadline_stats()
    assert (deadline_stats(engine).num_due_rows, deadline_stats(engine).max_lateness_ms) == (0, 0.0)


def test_the_due_horizon_keeps_the_longest_recent_step_cycle_and_a_busy_loops_sending_gap():
    sched = scheduler(step_window=4, delivery_margin_ms=0.0)
    sched.observe_step(row_frames=10, num_batches=1, elapsed_s=0.080)   # one slow step (the talker's load)
    for _ in range(3):
        sched.observe_step(row_frames=10, num_batches=1, elapsed_s=0.010)
    # still within the window: a stream 150 ms from its deadline is due (the next step may take 80)
    assert sched.due_horizon_s == pytest.approx(0.160)
    sched.observe_step(row_frames=10, num_batches=1, elapsed_s=0.010)  # the slow one leaves the window
    assert sched.due_horizon_s == pytest.approx(0.020)
    # the loop went straight back (work was left): the 30 ms it spent sending before this plan count
    sched.observe_step(row_frames=10, num_batches=1, elapsed_s=0.010, ended_s=1.0, work_left=True)
    sched.plan([], now_s=1.030)
    assert sched.step_s == pytest.approx(0.040)
    # after an idle gap (nothing was left) the wait is not part of any step
    sched.observe_step(row_frames=10, num_batches=1, elapsed_s=0.010, ended_s=2.0, work_left=False)
    sched.plan([], now_s=5.0)
    assert sched.step_s == pytest.approx(0.040)
    # one window entry per step: the busy step leaves only after four later ones
    for _ in range(2):
        sched.observe_step(row_frames=10, num_batches=1, elapsed_s=0.010)
    assert sched.step_s == pytest.approx(0.040)
    sched.observe_step(row_frames=10, num_batches=1, elapsed_s=0.010)
    assert sched.step_s == pytest.approx(0.010)


def test_with_a_time_window_the_horizon_keeps_a_long_cycle_for_that_long_whatever_the_step_count():
    sched = scheduler(step_window=4, step_window_s=2.0, delivery_margin_ms=0.0)
    sched.observe_step(row_frames=10, num_batches=1, elapsed_s=0.080, ended_s=10.0)   # a cohort's long step
    for i in range(20):   # twenty short steps within the next second: past the count, not the time
        sched.observe_step(row_frames=10, num_batches=1, elapsed_s=0.010, ended_s=10.05 + 0.05 * i)
    assert sched.step_s == pytest.approx(0.080)
    sched.observe_step(row_frames=10, num_batches=1, elapsed_s=0.010, ended_s=12.1)   # 2.1 s after it
    assert sched.step_s == pytest.approx(0.010)
    with pytest.raises(ValueError, match="step_window_s"):
        DeadlinePolicy(step_window_s=-1.0)


def test_a_due_stream_with_frames_waiting_takes_enough_audio_to_leave_the_due_horizon():
    # steps of ~100 ms (a loaded GPU): the horizon is 220 ms; a stream 10 ms from its deadline with 20
    # frames waiting gets 8 of them (640 ms: clear of two horizons), not a 2-frame sliver that is due
    # again next step
    sched = scheduler(initial_step_ms=100.0, delivery_margin_ms=20.0)
    stream = running_stream("late", 0, now_s=1.0, slack_s=0.010, num_pending=20)
    plan = sched.plan([stream], 1.0)
    [row] = plan.rows
    assert plan.num_due == 1 and row.num_frames == 8
    assert 0.010 + row.num_frames * FRAME_S > 2 * sched.due_horizon_s
    # with fewer frames than that, it takes what it has
    short = running_stream("short", 1, now_s=1.0, slack_s=0.010, num_pending=3)
    assert [r.num_frames for r in sched.plan([short], 1.0).rows] == [3]
