"""Server-side latency windows and the VocoderStats snapshot served by GetStats."""
from __future__ import annotations

from dataclasses import dataclass, field

from protos.tts.internal.v1 import admin_pb2, common_pb2
from vocoder_service.engine.engine import PcmOut, VocoderEngine
from vocoder_service.runtime.stats import LatencyWindow, RunnerStats


def latency_proto(window: LatencyWindow) -> admin_pb2.LatencyStats:
    s = window.summary()
    return admin_pb2.LatencyStats(count=s["count"], p50_ms=s["p50_ms"], p90_ms=s["p90_ms"], p99_ms=s["p99_ms"],
                                  max_ms=s["max_ms"], mean_ms=s["mean_ms"])


@dataclass
class ServerStats:
    first_chunk_time: LatencyWindow = field(default_factory=LatencyWindow)  # first frame in -> first PCM out
    chunk_latency: LatencyWindow = field(default_factory=LatencyWindow)     # oldest frame in -> its PCM out
    tail_time: LatencyWindow = field(default_factory=LatencyWindow)         # talker's final frames in -> last PCM out
    audio_s_emitted: float = 0.0
    num_pcm_send_failures: int = 0

    def record_sent(self, out: PcmOut, sent_s: float, sample_rate_hz: int) -> None:
        self.audio_s_emitted += len(out.pcm) / sample_rate_hz
        if out.is_final and out.talker_done_s is not None:
            self.tail_time.add(max(0.0, (sent_s - out.talker_done_s) * 1e3))
        if out.timing is None:
            return
        latency_ms = max(0.0, (sent_s - out.timing.oldest_frame_s) * 1e3)
        self.chunk_latency.add(latency_ms)
        if out.seq == 0:
            self.first_chunk_time.add(latency_ms)

    def reset_windows(self) -> None:
        self.first_chunk_time.clear()
        self.chunk_latency.clear()
        self.tail_time.clear()


def engine_load(engine: VocoderEngine, runner_stats: RunnerStats) -> common_pb2.Load:
    """Slots (credits = total - used), frames waiting, and the recent step time."""
    num_queued = sum(s.num_pending + s.num_context_pending for s in engine.streams.values())
    return common_pb2.Load(
        num_slots_total=engine.config.max_slots, num_slots_used=engine.slots.num_used,
        num_frames_queued=num_queued,
        max_frames_queued=engine.config.max_slots * engine.config.max_pending_frames,
        step_time_ms=runner_stats.step_time.recent_mean_ms(), num_late_chunks_recent=engine.num_late_recent(),
    )


def deadline_stats(engine: VocoderEngine) -> admin_pb2.DeadlineStats:
    counts, scheduler = engine.deadline_stats, engine.scheduler
    budget = scheduler.budget_row_frames()
    return admin_pb2.DeadlineStats(
        num_due_rows=counts["due_rows"], num_deferred_rows=counts["deferred_rows"],
        num_late_chunks=counts["late_chunks"], max_lateness_ms=counts["max_lateness_ms"],
        step_estimate_ms=scheduler.step_s * 1e3, budget_row_frames=0.0 if budget == float("inf") else budget,
        num_late_talker=counts["late_talker"], num_late_queued=counts["late_queued"],
        num_late_decode=counts["late_decode"], filled_row_frames=counts["filled_row_frames"],
    )


def vocoder_stats(*, peer_id: str, model: str, uptime_s: float, engine: VocoderEngine, runner_stats: RunnerStats,
                  server_stats: ServerStats, talkers: list[admin_pb2.PeerStatus]) -> admin_pb2.VocoderStats:
    counters = engine.stats
    graphs = admin_pb2.GraphStats(
        num_graphs=runner_stats.num_graphs, graph_memory_bytes=runner_stats.graph_memory_bytes,
        num_graph_steps=runner_stats.num_graph_steps, num_eager_steps=runner_stats.num_eager_steps,
        hit_rate=runner_stats.hit_rate,
    )
    return admin_pb2.VocoderStats(
        peer_id=peer_id, model=model, uptime_s=uptime_s, load=engine_load(engine, runner_stats),
        requests=admin_pb2.RequestCounters(
            num_started=counters["opened"], num_finished=counters["completed"], num_aborted=counters["aborted"],
            num_failed=counters["failed"], num_refused=counters["refused"],
        ),
        step_time=latency_proto(runner_stats.step_time),
        first_chunk_time=latency_proto(server_stats.first_chunk_time),
        chunk_latency=latency_proto(server_stats.chunk_latency),
        tail_time=latency_proto(server_stats.tail_time),
        batch_size_histogram=dict(runner_stats.batch_size_histogram),
        chunk_frames_histogram=dict(runner_stats.chunk_frames_histogram),
        graphs=graphs, num_frames_decoded=counters["frames_decoded"],
        audio_s_emitted=server_stats.audio_s_emitted, talkers=talkers,
        num_nonfinite_chunks=counters["nonfinite_chunks"], num_nonfinite_samples=counters["nonfinite_samples"],
        num_clipped_chunks=counters["clipped_chunks"], num_clipped_samples=counters["clipped_samples"],
        deadlines=deadline_stats(engine),
    )
