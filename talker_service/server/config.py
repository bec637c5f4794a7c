"""Every setting of the talker process in one dataclass; flags and QWEN3_TTS_TALKER_* env map onto it."""
from __future__ import annotations

import os
import socket
from dataclasses import dataclass

from service_common.endpoints import check_endpoint
from service_common.metrics import DEFAULT_BUSY_WINDOW_S
from talker_service.engine import EngineConfig


CPU_DEFAULT_SLOTS = 8
ON_OFF_AUTO = {"auto": None, "on": True, "off": False}   # a tri-state flag -> EngineConfig


@dataclass
class TalkerServiceConfig:
    # --- model and device
    model: str = "tiny"                  # local dir, embedded tiny name, or hub id
    device: str = "cpu"                  # "cpu", "cuda", "cuda:1"
    dtype: str = "auto"                  # auto: bfloat16 on CUDA, float32 on CPU
    cpu_threads: int = 0                 # torch intra-op threads; 0 = torch's default
    # --- endpoints
    bind: str = "tcp://127.0.0.1:5601"   # ROUTER for gateways; "tcp://host:*" picks a free port
    vocoders: str = ""                   # comma-separated vocoder ROUTER endpoints; a name may resolve to many
    resolve_interval_s: float = 5.0      # DNS names in `vocoders` re-resolved this often (peers join/leave)
    # admin side port (health, reflection, unauthenticated admin calls): loopback unless asked;
    # containers set 0.0.0.0 for probes and in-cluster access
    grpc_host: str = "127.0.0.1"
    grpc_port: int = 5611                # 0: any free port (see ready_file)
    peer_id: str = ""                    # empty: talker@<host>:<pid>
    # Prometheus /metrics over HTTP (server/metrics.py): -1 off, 0 any free port (see ready_file);
    # loopback unless asked, as the side port
    metrics_port: int = -1
    metrics_host: str = "127.0.0.1"
    busy_window_s: float = DEFAULT_BUSY_WINDOW_S   # the busy ratio's sliding window (one scrape interval)
    ready_file: str = ""                 # written (JSON endpoints) once SERVING
    # --- engine
    max_slots: int = 0                   # streams generating at once; 0: from GPU memory on CUDA (up to 256), 8 on CPU
    max_seq_len: int = 2048
    max_prefill_batch: int = 32          # prompts prefilled together in one forward (a burst of arrivals)
    prefill_chunk_tokens: int = 256      # a longer prompt is prefilled in chunks of this many positions
    prefill_token_budget: int = 1024     # padded prompt positions prefilled per step, so decode steps keep coming
    prefill_token_buckets: tuple[int, ...] = ()  # captured prompt-length buckets; empty: 16, 32, ... to the chunk
    warm_up: str = "auto"                # every serving shape run once before SERVING: auto (CUDA), on, off
    async_decode: str = "auto"           # queue decode step N+1 before reading step N back: auto (CUDA), on, off
    max_queued: int = 0                  # admitted, waiting for a slot; 0: max(64, max_slots)
    cadence_margin_ms: float = 0.0       # > 0: prefill arrivals only within the running streams' slack less
    cadence_max_hold_ms: float = 500.0   # this margin, each held at most this long (engine/cadence.py); 0: off
    # > 0: while >= prefill_gather_min_decoding streams decode, ready arrivals wait until
    # prefill_gather_batch are ready or the oldest waited this long, to be prefilled together
    # (engine/prefill_gather.py); 0 ms: off. The engine's defaults, not a second copy of them.
    prefill_gather_ms: float = EngineConfig.prefill_gather_ms
    prefill_gather_batch: int = EngineConfig.prefill_gather_batch
    prefill_gather_min_decoding: int = EngineConfig.prefill_gather_min_decoding
    # > 0: while a vocoder reports late chunks, queued requests wait up to this long before their
    # prefill (server/admission.py); 0: off. Free vocoder slots gate admission either way, and on an
    # H200 past capacity (256 streams, arrivals at 1.3 x) they alone kept every stream gapless; 500
    # held four times and changed nothing measurable (results 2026-11-29-gapless-final-h200.md).
    deadline_hold_ms: float = 0.0
    gpu_memory_fraction: float = 0.0     # share of the GPU this process may hold; 0: 0.9 alone (the launcher
                                         # passes 0.6 when the vocoder shares the GPU)
    max_text_tokens: int = 4096
    max_voice_encodings: int = 64        # clone references queued or encoding; beyond: RESOURCE_EXHAUSTED
    max_cached_voices: int = 256         # encoded references kept by content hash (0: none)
    max_voice_batch: int = 16            # clone references queued together and encoded as one batch
    voice_warm_up_timeout_s: float = 120.0  # Base on CUDA: wait this long for the encoders' warm-up before SERVING
    max_voice_batch_audio_s: float = 80.0  # per encoder forward: clips x the longest, s of 24 kHz audio; bounds
                                         # the codec encoder's activations (64 channels per sample at full size:
                                         # estimated < 1 GiB in bf16 at 80 s, not measured), 16 clips of 5 s fit
    batch_buckets: tuple[int, ...] = ()  # empty: powers of two to 128, then quarter steps (160, 192, 224, 256)
    decode_graphs: str = "auto"          # auto: one CUDA graph per decode bucket on CUDA, eager on CPU; or off
    context_buckets: tuple[int, ...] = ()  # attention context per decode graph; empty: max_seq_len only
    graph_max_batch: int = 0             # graphs for batch buckets <= this only (0: all)
    kv_memory_fraction: float = 0.0      # > 0 (CUDA): fewer slots if the KV cache exceeds this share of free memory
    # --- liveness
    heartbeat_interval_ms: int = 1000    # sent from a thread of their own, whatever a step costs
    max_step_stall_s: float = 60.0       # a loop stuck this long (one step, a deadlock) stops heartbeating,
                                         # so peers fail its streams as for a dead talker
    debug_step_delay_s: float = 0.0      # test hook: sleep this long after each engine step (a slow CPU)
    vocoder_timeout_s: float = 3.0       # a vocoder silent this long is lost: its requests fail UNAVAILABLE
    gateway_timeout_s: float = 10.0      # a gateway silent this long is gone: its requests are aborted
    # --- transport and loop
    poll_ms: int = 20                    # longest idle wait; bounds admin-call and timer latency
    max_messages_per_poll: int = 512
    # read queued gateway messages while the loop waits for the device's read-back too (a wave of
    # streamed words otherwise held STARTs and first TEXTs in the socket for up to a step each,
    # issue #36: server/loop.py receive_while_waiting); off: only between steps
    intake_in_device_wait: bool = True
    router_rcv_hwm: int = 10000
    router_snd_hwm: int = 1000
    vocoder_snd_hwm: int = 1000          # FRAMES messages queued per vocoder before its requests fail
    admin_timeout_s: float = 60.0
    log_level: str = "INFO"

    def __post_init__(self) -> None:
        problems = []
        for name in ("max_seq_len", "heartbeat_interval_ms", "max_voice_encodings", "max_voice_batch", "poll_ms",
                     "max_messages_per_poll", "router_rcv_hwm", "router_snd_hwm", "vocoder_snd_hwm"):
            if getattr(self, name) < 1:
                problems.append(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("vocoder_timeout_s", "gateway_timeout_s", "admin_timeout_s", "resolve_interval_s",
                     "max_step_stall_s", "max_voice_batch_audio_s", "voice_warm_up_timeout_s", "busy_window_s"):
            if getattr(self, name) <= 0:
                problems.append(f"{name} must be > 0, got {getattr(self, name)}")
        for name in ("debug_step_delay_s", "deadline_hold_ms"):
            if getattr(self, name) < 0:
                problems.append(f"{name} must be >= 0, got {getattr(self, name)}")
        for name in ("max_slots", "max_queued", "max_cached_voices"):
            if getattr(self, name) < 0:
                problems.append(f"{name} must be >= 0 (0: auto), got {getattr(self, name)}")
        if not 0.0 <= self.gpu_memory_fraction < 1.0:
            problems.append(f"gpu_memory_fraction must be in [0, 1) (0: auto), got {self.gpu_memory_fraction}")
        for name in ("warm_up", "async_decode"):
            if getattr(self, name) not in ("auto", "on", "off"):
                problems.append(f"{name} must be auto, on or off, got {getattr(self, name)!r}")
        if not 0 <= self.grpc_port <= 65535:
            problems.append(f"grpc_port must be in [0, 65535], got {self.grpc_port}")
        if not -1 <= self.metrics_port <= 65535:
            problems.append(f"metrics_port must be in [0, 65535] (-1: off), got {self.metrics_port}")
        if not self.vocoder_endpoints():
            problems.append("vocoders is empty: give at least one vocoder endpoint (--vocoders tcp://host:port,...)")
        try:
            for endpoint in self.vocoder_endpoints():
                check_endpoint(endpoint, "vocoder endpoint")
            check_endpoint(self.bind, "bind endpoint")
        except ValueError as exc:
            problems.append(str(exc))
        if problems:
            raise ValueError("invalid talker config: " + "; ".join(problems))
        self.engine_config()

    def vocoder_endpoints(self) -> list[str]:
        return [part.strip() for part in self.vocoders.split(",") if part.strip()]

    def engine_config(self) -> EngineConfig:
        # auto sizes are resolved before the engine starts (server/sizing.py); the CPU figures stand
        # in for them when this config is only being validated
        return EngineConfig(max_slots=self.max_slots or CPU_DEFAULT_SLOTS, max_seq_len=self.max_seq_len,
                            max_prefill_batch=self.max_prefill_batch, prefill_chunk_tokens=self.prefill_chunk_tokens,
                            prefill_token_budget=self.prefill_token_budget,
                            prefill_token_buckets=self.prefill_token_buckets,
                            warm_up=ON_OFF_AUTO[self.warm_up], async_decode=ON_OFF_AUTO[self.async_decode],
                            max_queued=self.max_queued or 64, cadence_margin_ms=self.cadence_margin_ms,
                            cadence_max_hold_ms=self.cadence_max_hold_ms,
                            prefill_gather_ms=self.prefill_gather_ms, prefill_gather_batch=self.prefill_gather_batch,
                            prefill_gather_min_decoding=self.prefill_gather_min_decoding,
                            batch_buckets=self.batch_buckets, max_text_tokens=self.max_text_tokens,
                            decode_graphs=self.decode_graphs, context_buckets=self.context_buckets,
                            graph_max_batch=self.graph_max_batch, kv_memory_fraction=self.kv_memory_fraction)

    def resolved_dtype(self) -> str:
        if self.dtype != "auto":
            return self.dtype
        return "bfloat16" if self.device.startswith("cuda") else "float32"

    def resolved_peer_id(self) -> str:
        return self.peer_id or f"talker@{socket.gethostname()}:{os.getpid()}"
