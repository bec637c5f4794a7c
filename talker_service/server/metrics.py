"""The talker's Prometheus metrics (`--metrics-port`), read at scrape time from the loop's state.

`qwen3_tts_talker_busy_ratio` is the share of wall time, over the last `--busy-window-s` (15 s),
the loop spent in engine steps (prefill and decode phases; a turn with nothing runnable is idle).
Nothing here runs on the loop thread: the collector reads the engine's integer counters and the
load snapshot the loop makes each turn (the one heartbeats advertise) when Prometheus scrapes, on
prometheus_client's HTTP thread.
"""
from __future__ import annotations

from service_common.metrics import MetricFamilies, ServerCollector
from talker_service.server.stats import deadline_holds

PREFIX = "qwen3_tts_talker_"

# EngineStats field -> (counter name, help); every one only ever grows (a stats reset clears windows only)
ENGINE_COUNTERS = {
    "num_started": ("requests_started", "Requests admitted to the engine (streams and admin GenerateCodes)"),
    "num_finished": ("requests_finished", "Requests that generated their last frame"),
    "num_aborted": ("requests_aborted", "Requests aborted (by the gateway, or a peer lost)"),
    "num_failed": ("requests_failed", "Requests ended with an error"),
    "num_refused": ("requests_refused", "Requests refused: every slot busy and the queue full"),
    "num_frames_generated": ("frames_generated", "Codec frames generated (12.5 a second of audio)"),
    "num_decode_steps": ("decode_steps", "Decode steps run"),
    "num_prefill_chunks": ("prefill_chunks", "Prompt chunks prefilled"),
    "num_gather_holds": ("gather_holds", "Admission rounds that left ready arrivals to be prefilled together"),
    "num_cadence_holds": ("cadence_holds", "Steps that held every prompt back to keep running streams' cadence"),
}


class TalkerMetrics(ServerCollector):
    """Read from the attached TalkerServer (engine, busy, latest_load,
    stop_requested); only `serving 0` until attached."""

    def collect(self):
        server = self.server
        out = MetricFamilies(PREFIX)
        serving = server is not None and not server.stop_requested.is_set()
        out.gauge("serving", "1 once the talker serves, 0 while it loads or stops", float(serving))
        if server is None:
            return out.families
        engine, busy, load = server.engine, server.busy, server.latest_load
        stats = engine.stats
        out.busy(busy, "engine steps (prefill + decode)")
        running, queued = load["num_slots_used"], load["num_requests_queued"]
        out.gauge("requests_active", "Requests live in the engine: running (in a slot) + queued", running + queued)
        out.gauge("requests_queued", "Requests admitted and waiting for a slot", queued)
        out.gauge("requests_parked", "Running requests waiting for more text", load["num_requests_parked"])
        out.gauge("slots_used", "Slots (KV cache rows) held by running requests", running)
        out.gauge("max_slots", "Slots in all", load["num_slots_total"])
        out.gauge("max_queued", "Requests that may wait for a slot beyond the free ones", engine.config.max_queued)
        out.gauge("recent_step_seconds", "Mean decode step time of the latest steps (0 when none runs)",
                  load["step_time_ms"] / 1e3)
        for field, (name, documentation) in ENGINE_COUNTERS.items():
            out.counter(name, documentation, getattr(stats, field))
        out.counter("deadline_holds", "Times new streams were held back because a vocoder reported late chunks",
                    deadline_holds(engine))
        return out.families
