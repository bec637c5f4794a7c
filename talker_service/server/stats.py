"""TalkerStats (admin GetStats) from the engine's counters and the server's peers."""
from __future__ import annotations

import time
from typing import TYPE_CHECKING

from protos.tts.internal.v1 import admin_pb2, common_pb2

GRAPH_STATS_FIELDS = ("num_graphs", "graph_memory_bytes", "num_graph_steps", "num_eager_steps", "hit_rate")

if TYPE_CHECKING:
    from talker_service.server.loop import TalkerServer


def talker_stats(server: "TalkerServer", reset: bool) -> admin_pb2.TalkerStats:
    engine, now_s = server.engine, time.monotonic()
    s = engine.stats
    graph_summary = engine.runner.graph_stats.summary()
    stats = admin_pb2.TalkerStats(
        peer_id=server.peer_id, model=server.model_name, uptime_s=now_s - server.started_s,
        load=common_pb2.Load(**engine.load()),
        requests=admin_pb2.RequestCounters(num_started=s.num_started, num_finished=s.num_finished,
                                           num_aborted=s.num_aborted, num_failed=s.num_failed,
                                           num_refused=s.num_refused),
        step_time=admin_pb2.LatencyStats(**s.step_time.summary()),
        prefill_time=admin_pb2.LatencyStats(**s.prefill_time.summary()),
        first_frame_time=admin_pb2.LatencyStats(**s.first_frame_time.summary()),
        batch_size_histogram=dict(s.batch_size_histogram),
        graphs=admin_pb2.GraphStats(**{name: graph_summary[name] for name in GRAPH_STATS_FIELDS}),
        num_frames_generated=s.num_frames_generated, kv_cache_bytes=engine.runner.kv_cache_bytes,
        max_context_tokens=engine.config.max_seq_len,
        vocoders=server.vocoders.status(now_s), gateways=server.gateways.status(now_s))
    if reset:
        s.reset_windows()
    return stats
