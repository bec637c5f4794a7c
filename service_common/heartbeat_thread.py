"""Periodic heartbeats from a thread of their own, so a busy process is never taken for a dead one.

A service's loop owns its ZeroMQ sockets, and before this its heartbeats left from the loop
between engine steps: one decode or talker step of a few seconds on a loaded CPU silenced the
process for that long, and its peers failed every stream on it as "went silent" (issue #16).

ZeroMQ sockets are not thread-safe, but a socket may be used from several threads when every use
is serialized by one lock (the lock's acquire/release are the full memory barriers ZeroMQ asks
for when a socket migrates between threads). So the loop holds `sockets_lock` for all its socket
work and releases it around the engine step; this thread takes the lock once per period and sends.

Silence still means death, and a wedged process is still found: the loop calls `mark_progress()`
every iteration, and once it has made no progress for `max_stall_s` the thread withholds
heartbeats, so peers see the silence and fail the streams as they would for a frozen process.
A frozen (SIGSTOP) or killed process stops this thread with it.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Callable

logger = logging.getLogger(__name__)


class HeartbeatThread:
    def __init__(self, name: str, interval_s: float, send: Callable[[], None], sockets_lock: threading.Lock,
                 max_stall_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        """`send` runs with `sockets_lock` held and must read only state the loop also touches under it."""
        if interval_s <= 0 or max_stall_s <= 0:
            raise ValueError(f"interval_s and max_stall_s must be > 0, got {interval_s} and {max_stall_s}")
        self.name = name
        self.interval_s = interval_s
        self.send = send
        self.sockets_lock = sockets_lock
        self.max_stall_s = max_stall_s
        self.clock = clock
        self.last_progress_s = clock()
        self.next_beat_s = 0.0          # 0: the first period is due at once
        self.num_sent = 0
        self.num_withheld = 0
        self.is_stalled = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def mark_progress(self) -> None:
        """The loop finished an iteration (a plain float store: atomic under the GIL)."""
        self.last_progress_s = self.clock()

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError(f"{self.name} heartbeat thread already started")
        self._thread = threading.Thread(target=self._run, name=f"{self.name}-heartbeats", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 2.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def tick(self) -> bool:
        """One check: send if a period is due and the loop is alive; True when a heartbeat left."""
        now_s = self.clock()
        if now_s < self.next_beat_s:
            return False
        stalled_s = now_s - self.last_progress_s
        if stalled_s > self.max_stall_s:
            if not self.is_stalled:
                logger.error("%s loop made no progress for %.1f s (limit %.1f s): heartbeats withheld so peers "
                             "fail its streams", self.name, stalled_s, self.max_stall_s)
            self.is_stalled = True
            self.num_withheld += 1
            self.next_beat_s = now_s + self.interval_s
            return False
        if self.is_stalled:
            logger.warning("%s loop progresses again: heartbeats resume", self.name)
            self.is_stalled = False
        # Bounded wait: the loop holds the lock at most one poll period plus its socket work. If it
        # is busier than a whole period, try again at the next tick rather than queue up beats.
        if not self.sockets_lock.acquire(timeout=self.interval_s):
            return False
        try:
            self.send()
        except Exception:   # a failed send must not kill liveness for good
            logger.exception("%s heartbeat send failed", self.name)
            return False
        finally:
            self.sockets_lock.release()
        self.num_sent += 1
        self.next_beat_s = self.clock() + self.interval_s
        return True

    def _run(self) -> None:
        # Ticks several times a period, so a beat leaves at most a quarter period late.
        while not self._stop.wait(self.interval_s / 4):
            self.tick()
