"""Counters and latency windows of the decode runner (read by the server's GetStats and by benchmarks).

Percentiles come from a bounded window of recent samples, so memory stays flat over days of traffic
and the numbers describe current behaviour rather than the whole uptime.
"""
from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field

import numpy as np

DEFAULT_WINDOW = 4096


class LatencyWindow:
    """The last `maxlen` durations in ms, with percentile summaries."""

    def __init__(self, maxlen: int = DEFAULT_WINDOW) -> None:
        self._samples: deque[float] = deque(maxlen=maxlen)

    def add(self, value_ms: float) -> None:
        self._samples.append(float(value_ms))

    def clear(self) -> None:
        self._samples.clear()

    def __len__(self) -> int:
        return len(self._samples)

    def recent_mean_ms(self, num_samples: int = 32) -> float:
        """Mean of the newest samples (cheap: for heartbeats sent many times a second); 0 when empty."""
        n = min(num_samples, len(self._samples))
        return sum(self._samples[-i] for i in range(1, n + 1)) / n if n else 0.0

    def summary(self) -> dict[str, float]:
        """count, mean, p50, p90, p99, max in ms; zeros when empty."""
        if not self._samples:
            return {"count": 0, "mean_ms": 0.0, "p50_ms": 0.0, "p90_ms": 0.0, "p99_ms": 0.0, "max_ms": 0.0}
        values = np.fromiter(self._samples, dtype=np.float64)
        p50, p90, p99 = np.percentile(values, [50, 90, 99])
        return {"count": len(values), "mean_ms": float(values.mean()), "p50_ms": float(p50),
                "p90_ms": float(p90), "p99_ms": float(p99), "max_ms": float(values.max())}


class HostTimes:
    """Host wall time per named phase, summed since the last reset (where a step's host time goes).

    Cheap enough for the hot path: one dict update per phase per call. `per_call_ms()` divides by
    the number of calls counted with `count_call()`.
    """

    def __init__(self) -> None:
        self.total_s: dict[str, float] = {}
        self.num_calls = 0

    def add(self, phase: str, elapsed_s: float) -> None:
        self.total_s[phase] = self.total_s.get(phase, 0.0) + elapsed_s

    def count_call(self) -> None:
        self.num_calls += 1

    def clear(self) -> None:
        self.total_s.clear()
        self.num_calls = 0

    def per_call_ms(self) -> dict[str, float]:
        n = max(self.num_calls, 1)
        return {phase: total * 1e3 / n for phase, total in self.total_s.items()}


@dataclass
class RunnerStats:
    num_graphs: int = 0
    graph_memory_bytes: int = 0          # device memory reserved by graph capture (all graphs)
    num_graph_steps: int = 0
    num_eager_steps: int = 0
    batch_size_histogram: Counter = field(default_factory=Counter)   # real rows per step
    chunk_frames_histogram: Counter = field(default_factory=Counter)  # frames bucket per step
    # Steps that needed a shape no graph covers, by (batch size, frames): what to capture next.
    uncaptured_shapes: Counter = field(default_factory=Counter)
    step_time: LatencyWindow = field(default_factory=LatencyWindow)
    # check / stage / launch / wait / copy_out per decode call (wait = blocked on the device).
    host_times: HostTimes = field(default_factory=HostTimes)

    @property
    def hit_rate(self) -> float:
        total = self.num_graph_steps + self.num_eager_steps
        return self.num_graph_steps / total if total else 0.0

    def record(self, batch_size: int, num_frames: int, is_graph: bool, elapsed_ms: float) -> None:
        if is_graph:
            self.num_graph_steps += 1
        else:
            self.num_eager_steps += 1
        self.batch_size_histogram[batch_size] += 1
        self.chunk_frames_histogram[num_frames] += 1
        self.step_time.add(elapsed_ms)

    def reset_windows(self) -> None:
        """Clear the latency window and histograms (GetStats with reset); lifetime counters stay."""
        self.batch_size_histogram.clear()
        self.chunk_frames_histogram.clear()
        self.uncaptured_shapes.clear()
        self.step_time.clear()
        self.host_times.clear()

    def as_dict(self) -> dict:
        return {
            "num_graphs": self.num_graphs,
            "graph_memory_bytes": self.graph_memory_bytes,
            "num_graph_steps": self.num_graph_steps,
            "num_eager_steps": self.num_eager_steps,
            "hit_rate": self.hit_rate,
            "batch_size_histogram": dict(sorted(self.batch_size_histogram.items())),
            "chunk_frames_histogram": dict(sorted(self.chunk_frames_histogram.items())),
            "uncaptured_shapes": {f"{bs}x{t}": n for (bs, t), n in sorted(self.uncaptured_shapes.items())},
            "step_time": self.step_time.summary(),
            "host_ms_per_step": self.host_times.per_call_ms(),
        }
