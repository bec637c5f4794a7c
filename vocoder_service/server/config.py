"""Every setting of the vocoder process in one dataclass; flags and QWEN3_TTS_VOCODER_* env map onto it.

The engine's own settings (`VocoderEngineConfig`, `ChunkPolicy`) are derived from these fields
so there is exactly one place a value is set.
"""
from __future__ import annotations

import os
import socket
from dataclasses import dataclass

from service_common.memory_sizing import MAX_AUTO_SLOTS
from service_common.metrics import DEFAULT_BUSY_WINDOW_S
from vocoder_service.engine.chunk_policy import ChunkPolicy, batch_buckets
from vocoder_service.engine.config import VocoderEngineConfig
from vocoder_service.engine.deadlines import DeadlinePolicy


CPU_DEFAULT_SLOTS = 64


@dataclass
class VocoderServiceConfig:
    # --- model and device
    model: str = "tiny"                  # local dir, embedded tiny name, or hub id
    device: str = "cpu"                  # "cpu", "cuda", "cuda:1"
    dtype: str = "auto"                  # auto: float16 on CUDA, float32 on CPU (resolved_dtype says why)
    cpu_threads: int = 0                 # torch intra-op threads; 0 = torch's default. 1 avoids OpenMP
                                         # spin contention on a shared CPU (measured 23 ms vs 1.3 s per tiny step)
    # --- endpoints
    bind: str = "tcp://127.0.0.1:5701"   # ROUTER for talkers' frames; "tcp://host:*" picks a free port
    # admin side port (health, reflection, unauthenticated admin calls): loopback unless asked;
    # containers set 0.0.0.0 for probes and in-cluster access
    grpc_host: str = "127.0.0.1"
    grpc_port: int = 5711                # 0: any free port (see ready_file)
    peer_id: str = ""                    # empty: vocoder@<host>:<pid>
    # Prometheus /metrics over HTTP (server/metrics.py; the chart's HPA reads qwen3_tts_vocoder_busy_ratio):
    # -1 off, 0 any free port (see ready_file); loopback unless asked, as the side port
    metrics_port: int = -1
    metrics_host: str = "127.0.0.1"
    busy_window_s: float = DEFAULT_BUSY_WINDOW_S   # the busy ratio's sliding window (one scrape interval)
    ready_file: str = ""                 # written (JSON endpoints) once SERVING
    # --- engine
    max_slots: int = 0                   # streams decoded at once; 0: 256 on CUDA (a few MB of state each), 64 on CPU
    gpu_memory_fraction: float = 0.0     # share of the GPU this process may hold; 0: 0.9 alone (the launcher
                                         # passes 0.3 when the talker shares the GPU)
    first_chunk_frames: int = 2
    quick_first_chunk_frames: int = 1    # a stream's first chunk while at most quick_first_max_streams are open
    quick_first_max_streams: int = 2     # (light load: audio starts one talker step sooner); 0: never
    steady_chunk_frames: int = 25
    max_wait_ms: float = 200.0           # a first chunk short of frames goes after this long anyway
    # playback deadlines (engine/deadlines.py, issue #36): rows not yet due fill a step up to this much
    # measured decode time (0: every ready row each step); a stream is due when its listener's audio
    # would run out within two steps + delivery_margin_ms; one ahead by s waits for a chunk of
    # slack_chunk_ratio x s of audio
    target_step_ms: float = 40.0         # (was 20/40: engine/deadlines.py says what 40/120 gave)
    max_step_ms: float = 120.0           # ... stretched to this while no stream left out would fall due
    delivery_margin_ms: float = 20.0
    slack_chunk_ratio: float = 2.0
    # the due horizon's step time also covers every step cycle of the last this-many seconds (0: only
    # the last 16 cycles); off until measured (engine/deadlines.py)
    step_window_s: float = 0.0
    launch_cost_row_frames: float = 64.0
    talker_timeout_s: float = 10.0       # an open request fails UNAVAILABLE once its talker sent nothing (frames
                                         # or heartbeats) this long; a request parked on text is not judged alone
    max_pending_frames: int = 2048
    max_context_frames: int = 750
    # --- CUDA graphs
    use_graphs: bool = True
    capture_batch_sizes: tuple[int, ...] = ()   # empty: powers of two up to max_slots
    capture_frame_sizes: tuple[int, ...] = ()   # empty: the chunk policy's frame buckets
    graph_memory_budget_mb: float = 0.0  # 0: what gpu_memory_fraction leaves after weights and state
    # torch.compile per captured shape (runtime/compile_plan.py): shapes of at most this many
    # rows x frames get a static compile each; -1 auto: 0 everywhere. The compiled 1-frame graph
    # once took a lone stream's first chunk from 2.97 to 1.68 ms (H200); since the decoder's plain
    # graph lost ~30% of its launches it is 1.74 ms either way (2026-11-26), while the compile added
    # 86 s to a cold start (120 s in all, 22 s without it).
    compile_max_row_frames: int = -1
    # steady chunk sizes whose graphs of >= 2 rows share one compile, batch dimension symbolic (25: +21%
    # per graph at batch 64 on the H200; ~3 min of cold start-up measured while it compiled twice,
    # ~35 s warm); empty: none
    compile_dynamic_frames: tuple[int, ...] = ()
    # where Inductor and Triton keep compiled kernels (mount it to keep them across restarts);
    # empty: their defaults (/tmp/torchinductor_<user>, ~/.triton/cache)
    compile_cache_dir: str = ""
    # cuDNN times its conv algorithms (cudnn.benchmark) while capturing graphs of at least this many
    # rows x frames; smaller shapes take its heuristic picks (launch-bound there, and timing every
    # shape slows start-up). 0: heuristics everywhere.
    cudnn_benchmark_min_row_frames: int = 0
    # --- transport and loop
    heartbeat_interval_ms: int = 1000    # sent from a thread of their own, whatever the decode step costs
    max_step_stall_s: float = 60.0       # a loop stuck this long (one step, a deadlock) stops heartbeating,
                                         # so talkers fail its streams as for a dead vocoder
    debug_step_delay_s: float = 0.0      # test hook: sleep this long after each decode step (a slow CPU)
    step_trace: str = ""                 # a JSON line per decode step to this file (engine/step_trace.py); empty: off
    poll_ms: int = 20                    # longest idle wait; bounds shutdown and timer latency
    max_messages_per_poll: int = 512     # receive drain cap, so frames cannot starve decode
    router_rcv_hwm: int = 10000          # messages queued from all talkers before ZeroMQ pushes back
    router_snd_hwm: int = 1000
    pcm_snd_hwm: int = 2000              # PCM messages queued per gateway before its requests fail
    max_push_sockets: int = 256          # cached gateway connections; idle ones are closed beyond this
    admin_queue_size: int = 64
    admin_timeout_s: float = 60.0
    drain_timeout_s: float = 5.0         # on SIGTERM: live streams get this long to finish
    log_level: str = "INFO"

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        problems = []
        for name in ("first_chunk_frames", "steady_chunk_frames", "max_pending_frames",
                     "heartbeat_interval_ms", "poll_ms", "max_messages_per_poll", "router_rcv_hwm",
                     "router_snd_hwm", "pcm_snd_hwm", "max_push_sockets", "admin_queue_size"):
            if getattr(self, name) < 1:
                problems.append(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("talker_timeout_s", "admin_timeout_s", "max_step_stall_s", "busy_window_s"):
            if getattr(self, name) <= 0:
                problems.append(f"{name} must be > 0, got {getattr(self, name)}")
        if self.compile_max_row_frames < -1:
            problems.append(f"compile_max_row_frames must be >= 0 (-1: auto), got {self.compile_max_row_frames}")
        if any(t < 1 for t in self.compile_dynamic_frames):
            problems.append(f"compile_dynamic_frames must be positive frame counts, got {self.compile_dynamic_frames}")
        if self.cudnn_benchmark_min_row_frames < 0:
            problems.append(f"cudnn_benchmark_min_row_frames must be >= 0 (0: off), got "
                            f"{self.cudnn_benchmark_min_row_frames}")
        if self.max_slots < 0 or self.graph_memory_budget_mb < 0:
            problems.append(f"max_slots and graph_memory_budget_mb must be >= 0 (0: auto), got {self.max_slots} "
                            f"and {self.graph_memory_budget_mb}")
        if not 0.0 <= self.gpu_memory_fraction < 1.0:
            problems.append(f"gpu_memory_fraction must be in [0, 1) (0: auto), got {self.gpu_memory_fraction}")
        if self.debug_step_delay_s < 0:
            problems.append(f"debug_step_delay_s must be >= 0, got {self.debug_step_delay_s}")
        if self.cpu_threads < 0:
            problems.append(f"cpu_threads must be >= 0, got {self.cpu_threads}")
        if not 0 <= self.grpc_port <= 65535:
            problems.append(f"grpc_port must be in [0, 65535], got {self.grpc_port}")
        if not -1 <= self.metrics_port <= 65535:
            problems.append(f"metrics_port must be in [0, 65535] (-1: off), got {self.metrics_port}")
        if self.dtype not in ("auto", "float32", "fp32", "bfloat16", "bf16", "float16", "fp16"):
            problems.append(f"dtype must be auto, float32, bfloat16 or float16, got {self.dtype!r}")
        if any(s < 1 for s in (*self.capture_batch_sizes, *self.capture_frame_sizes)):
            problems.append("capture sizes must be positive")
        if problems:
            raise ValueError("invalid vocoder config: " + "; ".join(problems))
        self.chunk_policy()  # raises on an inconsistent chunk ramp
        self.deadline_policy()

    def resolved_max_slots(self) -> int:
        if self.max_slots:
            return self.max_slots
        return MAX_AUTO_SLOTS if self.device.startswith("cuda") else CPU_DEFAULT_SLOTS

    def chunk_policy(self) -> ChunkPolicy:
        return ChunkPolicy(self.first_chunk_frames, self.steady_chunk_frames, self.max_wait_ms,
                           self.quick_first_chunk_frames, self.quick_first_max_streams)

    def deadline_policy(self) -> DeadlinePolicy:
        return DeadlinePolicy(target_step_ms=self.target_step_ms, max_step_ms=self.max_step_ms,
                              delivery_margin_ms=self.delivery_margin_ms, slack_chunk_ratio=self.slack_chunk_ratio,
                              step_window_s=self.step_window_s)

    def engine_config(self, samples_per_frame: int, sample_rate_hz: int) -> VocoderEngineConfig:
        return VocoderEngineConfig(
            max_slots=self.resolved_max_slots(), chunk=self.chunk_policy(), deadline=self.deadline_policy(),
            launch_cost_row_frames=self.launch_cost_row_frames, talker_timeout_s=self.talker_timeout_s,
            max_pending_frames=self.max_pending_frames, max_context_frames=self.max_context_frames,
            sample_rate_hz=sample_rate_hz, samples_per_frame=samples_per_frame,
        )

    def resolved_dtype(self) -> str:
        """The most exact dtype that costs under 3% of throughput (64, 256 streams) and first-chunk time
        (issue #39). H200, random 1.7B decoder, two runs pooled (benchmarks/results/
        2026-11-28-vocoder-dtype-h200.md): SNR against float32 without TF32 bf16 29.0 dB, float16
        46.0 dB, float32 52.2 dB; float16 within 1% of bf16 on audio-s/s and 1.6% on first chunk, float32
        55% fewer audio-s/s. float16's overflow (past 65504) would show as NaN/inf chunks: counted,
        logged and sent as silence (service_common/audio_samples.py)."""
        if self.dtype != "auto":
            return self.dtype
        return "float16" if self.device.startswith("cuda") else "float32"

    def resolved_peer_id(self) -> str:
        return self.peer_id or f"vocoder@{socket.gethostname()}:{os.getpid()}"

    def resolved_compile_max_row_frames(self) -> int:
        if self.compile_max_row_frames >= 0:
            return self.compile_max_row_frames
        return 0

    def graph_batch_sizes(self) -> list[int]:
        return sorted(set(self.capture_batch_sizes)) or batch_buckets(self.resolved_max_slots())

    def graph_frame_sizes(self) -> list[int]:
        return sorted(set(self.capture_frame_sizes)) or self.chunk_policy().frame_buckets()
