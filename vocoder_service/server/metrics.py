"""The vocoder's Prometheus metrics (`--metrics-port`), read at scrape time from the loop's state.

`qwen3_tts_vocoder_busy_ratio` is what the Helm chart's HPA scales vocoders on: the share of wall
time, over the last `--busy-window-s` (15 s), that the loop spent in `engine.step()` calls that
decoded something (idle steps are not counted). Nothing here runs on the loop thread: the
collector copies the engine's counter dicts and the loop's latest load snapshot when Prometheus
scrapes, on prometheus_client's HTTP thread.
"""
from __future__ import annotations

import threading
from collections.abc import Callable

from service_common.metrics import MetricFamilies, ServerCollector

PREFIX = "qwen3_tts_vocoder_"

# engine.stats key -> (counter name, help); every one only ever grows
ENGINE_COUNTERS = {
    "opened": ("requests_started", "Streams opened (talker requests and admin Decode calls)"),
    "completed": ("requests_completed", "Streams that sent their final chunk"),
    "aborted": ("requests_aborted", "Streams aborted by their talker"),
    "failed": ("requests_failed", "Streams ended with an error (talker silent, send or decode failure, shutdown)"),
    "refused": ("requests_refused", "Streams refused: every slot was in use"),
    "frames_decoded": ("frames_decoded", "Codec frames decoded (12.5 a second of audio)"),
    "chunks_emitted": ("chunks_emitted", "PCM chunks produced"),
    "decode_calls": ("decode_batches", "Decoder batches run"),
    "duplicates_dropped": ("duplicate_frames_dropped", "Frame messages dropped as repeats"),
    "nonfinite_chunks": ("audio_nonfinite_chunks", "Chunks with NaN/inf samples (sent as 0)"),
    "nonfinite_samples": ("audio_nonfinite_samples", "NaN/inf samples (sent as 0)"),
    "clipped_chunks": ("audio_clipped_chunks", "Chunks with samples at or past full scale"),
    "clipped_samples": ("audio_clipped_samples", "Samples at or past full scale (|x| >= 1)"),
}
DEADLINE_SUMS = ("due_rows", "deferred_rows", "late_chunks")


class DeadlineTotals:
    """`engine.deadline_stats` over the process's life. GetStats with reset clears the engine's
    counts (they are its window); `reset()` folds them in here first, under a lock the scrape
    thread also takes, so the exported counters never go back."""

    def __init__(self, live: Callable[[], dict]) -> None:
        self.live = live          # -> engine.deadline_stats (the loop thread updates it in place)
        self.lock = threading.Lock()
        self.before = dict.fromkeys(DEADLINE_SUMS, 0)
        self.max_lateness_ms = 0.0

    def reset(self, reset_engine: Callable[[], None]) -> None:
        """Loop thread: fold the engine's counts in, then let it clear them."""
        with self.lock:
            live = self.live()
            for key in DEADLINE_SUMS:
                self.before[key] += live[key]
            self.max_lateness_ms = max(self.max_lateness_ms, live["max_lateness_ms"])
            reset_engine()

    def snapshot(self) -> dict:
        with self.lock:
            live = dict(self.live())
            totals = {key: self.before[key] + live[key] for key in DEADLINE_SUMS}
            totals["max_lateness_ms"] = max(self.max_lateness_ms, live["max_lateness_ms"])
        return totals


class VocoderMetrics(ServerCollector):
    """Read from the attached VocoderServer (engine, runner, busy,
    latest_load, stats, deadline_totals); only `serving 0` until attached."""

    def collect(self):
        server = self.server
        out = MetricFamilies(PREFIX)
        serving = server is not None and server.draining_since_s is None and not server.stop_requested.is_set()
        out.gauge("serving", "1 once the vocoder serves, 0 while it loads or drains", float(serving))
        if server is None:
            return out.families
        engine, busy, load = server.engine, server.busy, server.latest_load
        counts = dict(engine.stats)   # the loop thread only bumps values: a copy is consistent enough
        out.busy(busy, "decode steps that did work", note=" (HPA signal)")
        out.gauge("open_streams", "Streams open now (each holds a slot)", len(engine.streams))
        out.gauge("slots_used", "Decoder slots in use (at the latest loop turn)", load.num_slots_used)
        out.gauge("max_slots", "Decoder slots in all", load.num_slots_total)
        out.gauge("frames_queued", "Codec frames received and not decoded yet", load.num_frames_queued)
        out.gauge("recent_step_seconds", "Mean decode step time of the latest steps", load.step_time_ms / 1e3)
        for key, (name, documentation) in ENGINE_COUNTERS.items():
            out.counter(name, documentation, counts[key])
        deadlines = server.deadline_totals.snapshot()
        out.counter("late_chunks", "Chunks that reached their stream after its playback deadline", deadlines["late_chunks"])
        out.counter("due_rows", "Stream rows decoded because their playback deadline was near", deadlines["due_rows"])
        out.counter("deferred_rows", "Ready rows left for a later step by the step budget", deadlines["deferred_rows"])
        out.gauge("max_chunk_lateness_seconds", "Largest lateness of a chunk since the process started",
                  deadlines["max_lateness_ms"] / 1e3)
        out.counter("audio_seconds", "Audio sent to gateways, seconds (rate() = audio-s/s)", server.stats.audio_s_emitted)
        out.counter("pcm_send_failures", "PCM messages a gateway did not take (their requests failed)",
                    server.stats.num_pcm_send_failures)
        runner_stats = server.runner.stats
        out.counter("graph_steps", "Decoder batches replayed from a captured graph", runner_stats.num_graph_steps)
        out.counter("eager_steps", "Decoder batches run eagerly (no captured graph fits)", runner_stats.num_eager_steps)
        return out.families
