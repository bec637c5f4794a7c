"""TalkerStats (admin GetStats) from the engine's counters, the talker's peers and its voice encoding."""
from __future__ import annotations

from protos.tts.internal.v1 import admin_pb2, common_pb2
from talker_service.engine import TalkerEngine
from talker_service.server.gateways import GatewayPeers
from talker_service.server.vocoders import VocoderLinks
from talker_service.server.voice_jobs import VoiceEncoding

GRAPH_STATS_FIELDS = ("num_graphs", "graph_memory_bytes", "num_graph_steps", "num_eager_steps", "hit_rate",
                      "num_prefill_graphs", "num_prefill_graph_steps", "num_prefill_eager_steps", "prefill_hit_rate",
                      "warm_up_s")


def deadline_holds(engine: TalkerEngine) -> int:
    """Times the server's admission began holding new streams for late chunks (0 without one)."""
    return 0 if engine.admission is None else engine.admission.num_holds


def talker_stats(engine: TalkerEngine, vocoders: VocoderLinks, gateways: GatewayPeers, voices: VoiceEncoding, *,
                 peer_id: str, model: str, uptime_s: float, now_s: float, reset: bool) -> admin_pb2.TalkerStats:
    """A snapshot; `reset` then clears the engine's latency windows (counters keep counting)."""
    s = engine.stats
    graph_summary = engine.runner.graph_stats.summary()
    stats = admin_pb2.TalkerStats(
        peer_id=peer_id, model=model, uptime_s=uptime_s, load=common_pb2.Load(**engine.load()),
        requests=admin_pb2.RequestCounters(num_started=s.num_started, num_finished=s.num_finished,
                                           num_aborted=s.num_aborted, num_failed=s.num_failed,
                                           num_refused=s.num_refused),
        step_time=admin_pb2.LatencyStats(**s.step_time.summary()),
        prefill_time=admin_pb2.LatencyStats(**s.prefill_time.summary()),
        first_frame_time=admin_pb2.LatencyStats(**s.first_frame_time.summary()),
        decode_gap=admin_pb2.LatencyStats(**s.decode_gap.summary()), max_decode_gap_ms=s.max_decode_gap_ms,
        batch_size_histogram=dict(s.batch_size_histogram),
        graphs=admin_pb2.GraphStats(**{name: graph_summary[name] for name in GRAPH_STATS_FIELDS}),
        num_frames_generated=s.num_frames_generated, kv_cache_bytes=engine.runner.kv_cache_bytes,
        max_context_tokens=engine.config.max_seq_len,
        vocoders=vocoders.status(now_s), gateways=gateways.status(now_s), voices=voices.stats_proto(reset),
        host_time=admin_pb2.LatencyStats(**s.host_time.summary()),
        host_time_by_phase={phase: admin_pb2.LatencyStats(**window.summary())
                            for phase, window in s.host_phases.items()},
        host_time_by_batch={batch: admin_pb2.LatencyStats(**window.summary())
                            for batch, window in s.host_by_batch.items()},
        admission_holds=admin_pb2.AdmissionHolds(num_gather_holds=s.num_gather_holds,
                                                 num_cadence_holds=s.num_cadence_holds,
                                                 num_deadline_holds=deadline_holds(engine)))
    if reset:
        s.reset_windows()
    return stats
