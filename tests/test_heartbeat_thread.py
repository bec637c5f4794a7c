"""HeartbeatThread: beats on its period whatever the loop is doing, withholds them once the loop stalls."""
from __future__ import annotations

import threading
import time

import pytest

from service_common.heartbeat_thread import HeartbeatThread

pytestmark = pytest.mark.timeout(60)


class FakeClock:
    def __init__(self) -> None:
        self.now_s = 100.0

    def __call__(self) -> float:
        return self.now_s


def make(clock: FakeClock, sent: list, lock: threading.Lock | None = None, max_stall_s: float = 10.0):
    lock = lock if lock is not None else threading.Lock()
    return HeartbeatThread("test", 1.0, lambda: sent.append(clock()), lock, max_stall_s, clock=clock)


def test_beats_once_per_period():
    clock, sent = FakeClock(), []
    beats = make(clock, sent)
    assert beats.tick()                      # the first period is due at once
    assert not beats.tick()
    clock.now_s += 0.99
    assert not beats.tick()
    clock.now_s += 0.02
    assert beats.tick()
    assert sent == pytest.approx([100.0, 101.01])


def test_a_stalled_loop_stops_the_beats_and_progress_resumes_them():
    clock, sent = FakeClock(), []
    beats = make(clock, sent, max_stall_s=5.0)
    beats.mark_progress()
    for _ in range(5):                       # 5 s without progress: still within the limit
        clock.now_s += 1.0
        beats.tick()
    assert len(sent) == 5 and not beats.is_stalled
    clock.now_s += 1.5                       # 6.5 s: over the limit
    assert not beats.tick()
    assert beats.is_stalled and beats.num_withheld == 1 and len(sent) == 5
    beats.mark_progress()
    clock.now_s += 1.0
    assert beats.tick()
    assert not beats.is_stalled and len(sent) == 6


def test_send_runs_under_the_sockets_lock_and_a_held_lock_skips_the_period():
    clock, sent = FakeClock(), []
    lock = threading.Lock()
    held = []
    beats = HeartbeatThread("test", 0.05, lambda: held.append(lock.locked()), lock, 10.0, clock=clock)
    assert beats.tick() and held == [True]
    clock.now_s += 1.0
    with lock:                               # the loop is inside its socket work for a whole period
        assert not beats.tick()
    assert held == [True]
    assert beats.tick()                      # tried again at the next tick, not dropped for a period


def test_a_failing_send_is_logged_and_beats_go_on(caplog):
    clock, calls = FakeClock(), []

    def send():
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("socket gone")

    beats = HeartbeatThread("test", 1.0, send, threading.Lock(), 10.0, clock=clock)
    assert not beats.tick()
    assert "heartbeat send failed" in caplog.text
    assert beats.tick()                      # the failed period is retried, not skipped
    assert len(calls) == 2


def test_the_thread_beats_while_the_loop_is_busy_outside_the_lock():
    """Beats come while the loop is inside one long step (no progress marked, no lock held), never
    two within a period; once stopped, none. Asserted as counts and order, not as lateness: on a
    loaded 2-core machine a thread may be scheduled late, but never early (the period logic itself
    is timed with a fake clock above)."""
    lock, sent = threading.Lock(), []
    beats = HeartbeatThread("test", 0.05, lambda: sent.append(time.monotonic()), lock, 60.0)
    step_started_s = time.monotonic()
    beats.start()
    try:
        deadline_s = step_started_s + 30.0   # a "decode step" that lasts until 6 beats have left
        while len(sent) < 6:
            assert time.monotonic() < deadline_s, sent
            time.sleep(0.01)
        beats.mark_progress()                # the step ends only now
        assert sent[0] >= step_started_s
        gaps_s = [b - a for a, b in zip(sent, sent[1:])]
        assert min(gaps_s) >= 0.05 - 1e-9, gaps_s   # the next period starts when a beat has left
        assert not beats.is_stalled and beats.num_withheld == 0
    finally:
        beats.stop(timeout_s=30.0)
    assert not beats._thread.is_alive()
    num_sent = len(sent)
    time.sleep(0.15)
    assert len(sent) == num_sent == beats.num_sent   # stopped means stopped


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="interval_s"):
        HeartbeatThread("test", 0.0, lambda: None, threading.Lock(), 1.0)
    with pytest.raises(ValueError, match="max_stall_s"):
        HeartbeatThread("test", 1.0, lambda: None, threading.Lock(), 0.0)
