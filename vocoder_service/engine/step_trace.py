"""A JSON line per vocoder step, for finding where a chunk's time goes on a loaded GPU.

The service's stats give distributions (step time, first-chunk time); they cannot say what a long
step held, or how long frames sat in the socket while one ran. The trace can: per step, the gap
since the last one ended and what the loop received in it, the plan (rows, due rows, first chunks,
deferred rows), each batch's shape and when it was read back, and for each first chunk how long its
stream had waited. Off unless the vocoder is started with `--step-trace PATH`; summarised by
`benchmarks/step_trace_report.py`. Times are milliseconds on the engine clock, relative to the
step's start.
"""
from __future__ import annotations

import json
from typing import TextIO


class StepTrace:
    def __init__(self, path: str) -> None:
        # line-buffered: a killed vocoder keeps every step it wrote (a write per step is ~us)
        self._file: TextIO = open(path, "a", buffering=1)
        self._num_received = 0
        self._waited_ms = 0.0
        self._last_end_s: float | None = None

    def note_receive(self, num_messages: int, waited_ms: float) -> None:
        """The loop's receive before the next step: messages read, time spent waiting in poll."""
        self._num_received += num_messages
        self._waited_ms += waited_ms

    def step(self, start_s: float, end_s: float, record: dict) -> None:
        record["t"] = round(start_s, 4)
        record["gap_ms"] = None if self._last_end_s is None else round((start_s - self._last_end_s) * 1e3, 2)
        record["recv"] = self._num_received
        record["poll_ms"] = round(self._waited_ms, 2)
        record["end_ms"] = round((end_s - start_s) * 1e3, 2)
        self._num_received, self._waited_ms, self._last_end_s = 0, 0.0, end_s
        self._file.write(json.dumps(record, separators=(",", ":")) + "\n")

    def close(self) -> None:
        self._file.close()
