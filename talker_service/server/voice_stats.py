"""Counters and per-phase latency windows of clone-reference encoding (admin GetStats `voices`).

Written by the encoder thread, read (and reset) by the loop thread's stats job: one lock, held
only to copy or add numbers.
"""
from __future__ import annotations

import threading
from collections import Counter

from protos.tts.internal.v1 import admin_pb2
from talker_service.engine.stats import LatencyWindow
from talker_service.voice.batch_encode import BatchTimes

WINDOWS = ("queue_wait", "batch_time", "prepare_time", "mel_time", "speaker_time", "codec_time")


class VoiceStats:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.num_encoded = 0
        self.num_failed = 0
        self.num_batches = 0
        self.num_forwards = 0
        self._reset_windows()

    def _reset_windows(self) -> None:
        self.windows = {name: LatencyWindow() for name in WINDOWS}
        self.batch_size_histogram: Counter = Counter()

    def add_queue_waits(self, waits_ms: list[float]) -> None:
        with self._lock:
            for wait_ms in waits_ms:
                self.windows["queue_wait"].add(wait_ms)

    def add_failed(self, count: int = 1) -> None:
        with self._lock:
            self.num_failed += count

    def add_batch(self, num_encoded: int, batch_ms: float, times: BatchTimes, batch_size: int) -> None:
        """One batch of `batch_size` distinct references, `num_encoded` of them successfully."""
        with self._lock:
            self.num_encoded += num_encoded
            self.num_batches += 1
            self.num_forwards += times.num_forwards
            self.batch_size_histogram[batch_size] += 1
            for name, value_ms in (("batch_time", batch_ms), ("prepare_time", times.prepare_ms),
                                   ("mel_time", times.mel_ms), ("speaker_time", times.speaker_ms),
                                   ("codec_time", times.codec_ms)):
                self.windows[name].add(value_ms)

    def to_proto(self, num_cache_hits: int, num_pending: int, reset: bool) -> admin_pb2.VoiceEncodingStats:
        with self._lock:
            stats = admin_pb2.VoiceEncodingStats(
                num_encoded=self.num_encoded, num_failed=self.num_failed, num_cache_hits=num_cache_hits,
                num_batches=self.num_batches, num_forwards=self.num_forwards, num_pending=num_pending,
                batch_size_histogram=dict(self.batch_size_histogram),
                **{name: admin_pb2.LatencyStats(**window.summary()) for name, window in self.windows.items()})
            if reset:
                self._reset_windows()
        return stats
