"""CPU time of the stack's processes while a level ran, from /proc (Linux).

A service whose one event loop or host thread is saturated shows near 100% of a core (threads
outside it, such as gRPC's C core, can add more): then its host work, not the GPU, sets the pace.

    with ProcCpu({"gateway": 123, "talker": 124}) as cpu:
        ...
    cpu.summary()   # {"gateway": {"cpu_pct": 97.1}, ...}; a process that is gone is left out
"""
from __future__ import annotations

import os
import time

_TICKS_PER_S = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def cpu_seconds(pid: int) -> float | None:
    """utime + stime of a process (all its threads) in seconds; None if it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / _TICKS_PER_S   # fields 14 and 15 of proc(5)


class ProcCpu:
    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = dict(pids)
        self._start: dict[str, float] = {}
        self._end: dict[str, float] = {}
        self._wall_s = 0.0

    def __enter__(self) -> "ProcCpu":
        self._t0 = time.monotonic()
        self._start = {name: s for name, pid in self.pids.items() if (s := cpu_seconds(pid)) is not None}
        return self

    def __exit__(self, *exc) -> None:
        self._wall_s = time.monotonic() - self._t0
        self._end = {name: s for name, pid in self.pids.items() if (s := cpu_seconds(pid)) is not None}

    def summary(self) -> dict:
        if self._wall_s <= 0:
            return {}
        return {name: {"cpu_pct": round(100 * (self._end[name] - start) / self._wall_s, 1)}
                for name, start in self._start.items() if name in self._end}
