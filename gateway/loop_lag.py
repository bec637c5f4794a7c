"""How far behind its timers a process's event loop runs: a tick every `interval_s` notes how late it
came. A gateway loop that runs behind is one that a wave of calls fills (every client message and
audio chunk of every call is a callback in it); streamed text is batched then (gateway/session.py),
and only then, so a lone stream never waits for a window."""
from __future__ import annotations

import asyncio
import time


class LoopLag:
    def __init__(self, interval_s: float = 0.005, clock=time.monotonic) -> None:
        self.interval_s = interval_s
        self.clock = clock
        self.lag_s = 0.0           # lateness of the latest tick
        self._due_s = 0.0
        self._handle: asyncio.TimerHandle | None = None

    def start(self) -> None:
        self._due_s = self.clock() + self.interval_s
        self._handle = asyncio.get_running_loop().call_later(self.interval_s, self._tick)

    def _tick(self) -> None:
        now_s = self.clock()
        self.lag_s = max(0.0, now_s - self._due_s)
        self._due_s = now_s + self.interval_s
        self._handle = asyncio.get_running_loop().call_later(self.interval_s, self._tick)

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
