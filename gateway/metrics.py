"""Prometheus metrics of the gateway, served over HTTP by prometheus_client.

Gateway workers (`--workers N`, gateway/workers.py) share one view: their supervisor gives them a
PROMETHEUS_MULTIPROC_DIR, prometheus_client keeps each worker's values in files there, and every
worker's /metrics serves the sum over all of them (gauges: streams in progress summed over the live
workers; the talkers' queue from heartbeats, the most recent value; healthy talkers, the fewest
any live worker sees).
"""
from __future__ import annotations

import logging
import os

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.multiprocess import MultiProcessCollector

from service_common.audio_samples import FaultLog, SampleFaults
from service_common.metrics import MetricsServer

logger = logging.getLogger(__name__)

_TTFA_BUCKETS_S = (0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1, 2, 5)
# per-stage server time: queue and vocoder chunks are a few ms, prefill tens, summed decode seconds
_STAGE_BUCKETS_S = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.03, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30)
# a chunk's lateness: 0 (in time), jitter of ms, then gaps a listener hears
_LATENESS_BUCKETS_S = (0.0, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2)
_RTF_BUCKETS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1, 1.5, 2, 5)


class GatewayMetrics:
    """One registry per gateway (tests run several in one process)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("tts_requests", "Synthesis calls started", ["method"], registry=r)
        self.errors = Counter("tts_errors", "Calls ended with an error, by gRPC code", ["code"], registry=r)
        self.ttfa_s = Histogram("tts_time_to_first_audio_seconds", "First text to first audio chunk",
                                buckets=_TTFA_BUCKETS_S, registry=r)
        # Each streamed chunk after the first against its playback deadline (service_common/playback.py):
        # 0 when it came in time (the le="0" bucket counts those), else how long the listener waited
        self.chunk_lateness_s = Histogram("tts_chunk_lateness_seconds",
                                          "Streamed audio chunk arrival past its playback deadline (0: in time)",
                                          buckets=_LATENESS_BUCKETS_S, registry=r)
        self.rtf = Histogram("tts_real_time_factor", "Wall time / audio time per request", buckets=_RTF_BUCKETS,
                             registry=r)
        # ServerTimings of each finished request, by stage (queue, prefill, first_frame,
        # vocoder_first_chunk, vocoder_decode, encode): where a slow TTFA went, without a benchmark
        self.stage_s = Histogram("tts_stage_seconds", "Server time per request by pipeline stage", ["stage"],
                                 buckets=_STAGE_BUCKETS_S, registry=r)
        self.audio_s = Counter("tts_audio_seconds", "Audio produced, seconds (rate() = audio-s/s)", registry=r)
        self.active_streams = Gauge("tts_active_streams", "Synthesis calls in progress", registry=r,
                                    multiprocess_mode="livesum")
        self.queue_depth = Gauge("tts_talker_queue_depth", "Requests queued in the talkers (heartbeat load)",
                                 registry=r, multiprocess_mode="mostrecent")
        # with workers, the fewest any live worker sees: a talker back counts once every worker uses it
        self.healthy_talkers = Gauge("tts_healthy_talkers", "Talkers with a vocoder, reachable", registry=r,
                                     multiprocess_mode="livemin")
        # Audio that is not audio (service_common/audio_samples.py): chunks with NaN/inf samples, found by
        # the vocoder or here, sent as 0; chunks with samples at or past full scale (clamped unless FLOAT32)
        self.nonfinite_chunks = Counter("tts_audio_nonfinite_chunks", "Audio chunks with NaN/inf samples (sent as 0)",
                                        registry=r)
        self.nonfinite_samples = Counter("tts_audio_nonfinite_samples", "NaN/inf audio samples (sent as 0)",
                                         registry=r)
        self.clipped_chunks = Counter("tts_audio_clipped_chunks", "Audio chunks with samples at or past full scale",
                                      registry=r)
        self.clipped_samples = Counter("tts_audio_clipped_samples", "Audio samples at or past full scale (|x| >= 1)",
                                       registry=r)
        self.fault_log = FaultLog(logger, "audio")

    def count_audio_faults(self, request_id: str, seq: int, faults: SampleFaults, num_samples: int) -> None:
        """One faulty chunk of a request: counted, and logged (at most one line per 10 s)."""
        if faults.num_nonfinite:
            self.nonfinite_chunks.inc()
            self.nonfinite_samples.inc(faults.num_nonfinite)
        if faults.num_clipped:
            self.clipped_chunks.inc()
            self.clipped_samples.inc(faults.num_clipped)
        self.fault_log.chunk(request_id, seq, faults, num_samples)

    def serve(self, port: int, host: str = "127.0.0.1") -> int:
        """Starts the HTTP endpoint (a daemon thread, for the process's life); returns the bound port
        (port 0 picks a free one). StartupError when it cannot be bound. A gateway worker serves all
        workers' values together (the module's docstring)."""
        registry = self.registry
        if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            registry = CollectorRegistry()
            MultiProcessCollector(registry)
        return MetricsServer(registry, host, port).port
