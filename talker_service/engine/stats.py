"""Counters and recent-latency windows of the talker engine (read by the admin GetStats)."""
from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field
from itertools import islice

import numpy as np

WINDOW = 1024   # latest samples kept per latency window
# the talker loop's phases in the order it runs them (server/loop.py; admin.proto host_time_by_phase);
# "intake_in_wait" (last): gateway messages read while a phase waited for the device
# (receive_while_waiting), overlapping the device's work
HOST_PHASES = ("intake", "admit", "prefill", "decode", "emit", "intake_in_wait")


@dataclass
class LatencyWindow:
    samples_ms: deque = field(default_factory=lambda: deque(maxlen=WINDOW))

    def add(self, value_ms: float) -> None:
        self.samples_ms.append(value_ms)

    def summary(self) -> dict[str, float]:
        """count, p50/p90/p99/max/mean in ms (zeros when empty)."""
        if not self.samples_ms:
            return dict(count=0, p50_ms=0.0, p90_ms=0.0, p99_ms=0.0, max_ms=0.0, mean_ms=0.0)
        values = np.asarray(self.samples_ms, dtype=np.float64)
        p50, p90, p99 = np.percentile(values, [50, 90, 99])
        return dict(count=len(values), p50_ms=float(p50), p90_ms=float(p90), p99_ms=float(p99),
                    max_ms=float(values.max()), mean_ms=float(values.mean()))

    def mean_ms(self, last: int = 32) -> float:
        """Mean of the latest `last` samples. Read every loop turn (the talker's load report), so it
        walks only those samples instead of copying the whole window."""
        recent = list(islice(reversed(self.samples_ms), last))
        return sum(recent) / len(recent) if recent else 0.0


@dataclass
class EngineStats:
    num_started: int = 0
    num_finished: int = 0
    num_aborted: int = 0
    num_failed: int = 0
    num_refused: int = 0
    num_frames_generated: int = 0
    num_decode_steps: int = 0
    num_prefill_chunks: int = 0
    # why ready arrivals did not start at once (counts since start; a stats reset keeps them):
    num_gather_holds: int = 0    # admission rounds that let them wait to be prefilled together (gather)
    num_cadence_holds: int = 0   # steps with prompts to prefill that ran none: running streams' cadence
    step_time: LatencyWindow = field(default_factory=LatencyWindow)
    prefill_time: LatencyWindow = field(default_factory=LatencyWindow)
    first_frame_time: LatencyWindow = field(default_factory=LatencyWindow)
    batch_size_histogram: Counter = field(default_factory=Counter)
    # time between two decode steps that share a running stream (prefill work included)
    decode_gap: LatencyWindow = field(default_factory=LatencyWindow)
    # a server loop iteration that ran a step, minus its device waits (talker_service/server/loop.py)
    host_time: LatencyWindow = field(default_factory=LatencyWindow)
    # host_time by loop phase (HOST_PHASES), each less its own device waits
    host_phases: dict = field(default_factory=lambda: {phase: LatencyWindow() for phase in HOST_PHASES})
    # host_time by the decode batch bucket of the iteration's launched step (0: none launched)
    host_by_batch: dict = field(default_factory=dict)
    max_decode_gap_ms: float = 0.0

    def add_host_time(self, total_ms: float, laps_ms: dict[str, float], batch_bucket: int) -> None:
        """One loop iteration's host time: in total, by phase, and under its decode batch bucket."""
        self.host_time.add(total_ms)
        for phase, host_ms in laps_ms.items():
            self.host_phases[phase].add(host_ms)
        window = self.host_by_batch.get(batch_bucket)
        if window is None:
            window = self.host_by_batch[batch_bucket] = LatencyWindow()
        window.add(total_ms)

    def reset_windows(self) -> None:
        self.step_time = LatencyWindow()
        self.prefill_time = LatencyWindow()
        self.first_frame_time = LatencyWindow()
        self.batch_size_histogram = Counter()
        self.decode_gap = LatencyWindow()
        self.max_decode_gap_ms = 0.0
        self.host_time = LatencyWindow()
        self.host_phases = {phase: LatencyWindow() for phase in HOST_PHASES}
        self.host_by_batch = {}
