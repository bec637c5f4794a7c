"""Every setting of the gateway process in one dataclass (flags map onto it in gateway/main.py)."""
from __future__ import annotations

from dataclasses import dataclass

from protos.limits import MAX_UNARY_AUDIO_BYTES
from service_common.event_loop import CHOICES as EVENT_LOOPS


@dataclass
class GatewayConfig:
    # --- model and peers
    model: str = "tiny"                  # checkpoint dir, embedded tiny name or hub id (JSON + tokenizer files only)
    model_name: str = ""                 # served name; empty: the talkers' reported name, else the --model value
    talkers: tuple[str, ...] = ()        # talker ROUTER endpoints, tcp://host:port; a name may resolve to many
    resolve_interval_s: float = 5.0      # DNS names in `talkers` re-resolved this often (peers join/leave)
    # --- endpoints
    grpc_host: str = "0.0.0.0"
    grpc_port: int = 50051               # 0: any free port (see ready_file)
    audio_bind: str = "tcp://127.0.0.1:*"   # PULL socket vocoders push PCM to
    audio_advertise: str = ""            # reply_to sent to talkers; empty: the bound endpoint
    metrics_port: int = 9090             # Prometheus HTTP; 0: any free port; -1: off
    # OpenAI-compatible HTTP API, WebSocket and browser page (gateway/http); 0: any free port; -1: off
    http_port: int = -1
    http_host: str = "0.0.0.0"
    # unauthenticated: loopback unless asked (containers set 0.0.0.0 for in-cluster scraping)
    metrics_host: str = "127.0.0.1"
    # Gateway processes serving the gRPC and HTTP ports together (gateway/workers.py): one Python
    # event loop is what a burst of word-by-word streams saturates first (H200, 256 streams: calls
    # waited p95 1.2 s for one loop, 18-58 ms with four). The kernel gives each whole connections.
    # Each worker has its own audio endpoint and metrics port: a fixed port p is p + its index.
    workers: int = 1
    worker_index: int = 0               # set by the supervisor for each worker process
    # Bind the gRPC and HTTP ports with SO_REUSEPORT so several gateway processes serve them (the
    # workers set it). The taken-port check is off then: another such process is expected.
    reuse_port: bool = False
    # the asyncio loop (service_common/event_loop.py): auto = uvloop when installed, else asyncio's;
    # uvloop = required; asyncio = the standard loop
    event_loop: str = "auto"
    ready_file: str = ""                 # JSON with the bound ports, written once listening
    voices_dir: str = ""                 # registered voices; empty: ~/.cache/qwen3-tts-serve/voices
    # --- limits
    max_streams: int = 256               # concurrent synthesis calls; beyond: RESOURCE_EXHAUSTED
    max_text_chars: int = 20000          # per request
    max_message_bytes: int = 16 << 20    # one client message; beyond: INVALID_ARGUMENT
    # unary Synthesize: worst-case audio of one reply (from the request's frame budget); beyond:
    # INVALID_ARGUMENT before any work. The default fits gRPC's default 4 MiB receive limit.
    max_unary_audio_bytes: int = MAX_UNARY_AUDIO_BYTES
    max_reference_audio_s: float = 30.0
    min_reference_audio_s: float = 1.0
    # --- timing
    heartbeat_interval_ms: int = 1000
    peer_timeout_ms: int = 3500          # a talker silent this long is lost; its streams fail UNAVAILABLE
    ack_timeout_s: float = 10.0          # Start sent -> Ack; beyond: UNAVAILABLE
    audio_idle_timeout_s: float = 60.0   # no audio and no progress this long -> DEADLINE_EXCEEDED
    drain_grace_s: float = 10.0          # on SIGTERM: live streams get this long to finish
    log_level: str = "INFO"

    def __post_init__(self) -> None:
        if self.max_streams < 1:
            raise ValueError(f"max_streams must be >= 1, got {self.max_streams}")
        if self.max_unary_audio_bytes < 1:
            raise ValueError(f"max_unary_audio_bytes must be >= 1, got {self.max_unary_audio_bytes}")
        if self.resolve_interval_s <= 0:
            raise ValueError(f"resolve_interval_s must be > 0, got {self.resolve_interval_s}")
        if not 0 < self.min_reference_audio_s <= self.max_reference_audio_s:
            raise ValueError("need 0 < min_reference_audio_s <= max_reference_audio_s")
        if self.workers < 1:
            raise ValueError(f"workers must be >= 1, got {self.workers}")
        if self.worker_index < 0:
            raise ValueError(f"worker_index must be >= 0, got {self.worker_index}")
        if self.event_loop not in EVENT_LOOPS:
            raise ValueError(f"event_loop must be one of {', '.join(EVENT_LOOPS)}, got {self.event_loop!r}")
        if isinstance(self.talkers, str):
            self.talkers = tuple(t for t in self.talkers.split(",") if t)
