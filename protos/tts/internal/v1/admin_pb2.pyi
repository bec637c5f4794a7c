from protos.tts.internal.v1 import common_pb2 as _common_pb2
from protos.tts.v1 import config_pb2 as _config_pb2
from protos.tts.internal.v1 import vocoder_pb2 as _vocoder_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class GetStatsRequest(_message.Message):
    __slots__ = ("reset",)
    RESET_FIELD_NUMBER: _ClassVar[int]
    reset: bool
    def __init__(self, reset: _Optional[bool] = ...) -> None: ...

class LatencyStats(_message.Message):
    __slots__ = ("count", "p50_ms", "p90_ms", "p99_ms", "max_ms", "mean_ms")
    COUNT_FIELD_NUMBER: _ClassVar[int]
    P50_MS_FIELD_NUMBER: _ClassVar[int]
    P90_MS_FIELD_NUMBER: _ClassVar[int]
    P99_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_MS_FIELD_NUMBER: _ClassVar[int]
    MEAN_MS_FIELD_NUMBER: _ClassVar[int]
    count: int
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float
    mean_ms: float
    def __init__(self, count: _Optional[int] = ..., p50_ms: _Optional[float] = ..., p90_ms: _Optional[float] = ..., p99_ms: _Optional[float] = ..., max_ms: _Optional[float] = ..., mean_ms: _Optional[float] = ...) -> None: ...

class GraphStats(_message.Message):
    __slots__ = ("num_graphs", "graph_memory_bytes", "num_graph_steps", "num_eager_steps", "hit_rate", "num_prefill_graphs", "num_prefill_graph_steps", "num_prefill_eager_steps", "prefill_hit_rate", "warm_up_s")
    NUM_GRAPHS_FIELD_NUMBER: _ClassVar[int]
    GRAPH_MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    NUM_GRAPH_STEPS_FIELD_NUMBER: _ClassVar[int]
    NUM_EAGER_STEPS_FIELD_NUMBER: _ClassVar[int]
    HIT_RATE_FIELD_NUMBER: _ClassVar[int]
    NUM_PREFILL_GRAPHS_FIELD_NUMBER: _ClassVar[int]
    NUM_PREFILL_GRAPH_STEPS_FIELD_NUMBER: _ClassVar[int]
    NUM_PREFILL_EAGER_STEPS_FIELD_NUMBER: _ClassVar[int]
    PREFILL_HIT_RATE_FIELD_NUMBER: _ClassVar[int]
    WARM_UP_S_FIELD_NUMBER: _ClassVar[int]
    num_graphs: int
    graph_memory_bytes: int
    num_graph_steps: int
    num_eager_steps: int
    hit_rate: float
    num_prefill_graphs: int
    num_prefill_graph_steps: int
    num_prefill_eager_steps: int
    prefill_hit_rate: float
    warm_up_s: float
    def __init__(self, num_graphs: _Optional[int] = ..., graph_memory_bytes: _Optional[int] = ..., num_graph_steps: _Optional[int] = ..., num_eager_steps: _Optional[int] = ..., hit_rate: _Optional[float] = ..., num_prefill_graphs: _Optional[int] = ..., num_prefill_graph_steps: _Optional[int] = ..., num_prefill_eager_steps: _Optional[int] = ..., prefill_hit_rate: _Optional[float] = ..., warm_up_s: _Optional[float] = ...) -> None: ...

class RequestCounters(_message.Message):
    __slots__ = ("num_started", "num_finished", "num_aborted", "num_failed", "num_refused")
    NUM_STARTED_FIELD_NUMBER: _ClassVar[int]
    NUM_FINISHED_FIELD_NUMBER: _ClassVar[int]
    NUM_ABORTED_FIELD_NUMBER: _ClassVar[int]
    NUM_FAILED_FIELD_NUMBER: _ClassVar[int]
    NUM_REFUSED_FIELD_NUMBER: _ClassVar[int]
    num_started: int
    num_finished: int
    num_aborted: int
    num_failed: int
    num_refused: int
    def __init__(self, num_started: _Optional[int] = ..., num_finished: _Optional[int] = ..., num_aborted: _Optional[int] = ..., num_failed: _Optional[int] = ..., num_refused: _Optional[int] = ...) -> None: ...

class PeerStatus(_message.Message):
    __slots__ = ("peer_id", "endpoint", "is_healthy", "last_heartbeat_age_ms", "num_streams", "load")
    PEER_ID_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    IS_HEALTHY_FIELD_NUMBER: _ClassVar[int]
    LAST_HEARTBEAT_AGE_MS_FIELD_NUMBER: _ClassVar[int]
    NUM_STREAMS_FIELD_NUMBER: _ClassVar[int]
    LOAD_FIELD_NUMBER: _ClassVar[int]
    peer_id: str
    endpoint: str
    is_healthy: bool
    last_heartbeat_age_ms: float
    num_streams: int
    load: _common_pb2.Load
    def __init__(self, peer_id: _Optional[str] = ..., endpoint: _Optional[str] = ..., is_healthy: _Optional[bool] = ..., last_heartbeat_age_ms: _Optional[float] = ..., num_streams: _Optional[int] = ..., load: _Optional[_Union[_common_pb2.Load, _Mapping]] = ...) -> None: ...

class TalkerStats(_message.Message):
    __slots__ = ("peer_id", "model", "uptime_s", "load", "requests", "step_time", "prefill_time", "first_frame_time", "batch_size_histogram", "graphs", "num_frames_generated", "kv_cache_bytes", "max_context_tokens", "vocoders", "gateways", "decode_gap", "max_decode_gap_ms", "voices", "host_time", "host_time_by_phase", "host_time_by_batch", "admission_holds")
    class BatchSizeHistogramEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: int
        def __init__(self, key: _Optional[int] = ..., value: _Optional[int] = ...) -> None: ...
    class HostTimeByPhaseEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: LatencyStats
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[LatencyStats, _Mapping]] = ...) -> None: ...
    class HostTimeByBatchEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: LatencyStats
        def __init__(self, key: _Optional[int] = ..., value: _Optional[_Union[LatencyStats, _Mapping]] = ...) -> None: ...
    PEER_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    UPTIME_S_FIELD_NUMBER: _ClassVar[int]
    LOAD_FIELD_NUMBER: _ClassVar[int]
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    STEP_TIME_FIELD_NUMBER: _ClassVar[int]
    PREFILL_TIME_FIELD_NUMBER: _ClassVar[int]
    FIRST_FRAME_TIME_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_HISTOGRAM_FIELD_NUMBER: _ClassVar[int]
    GRAPHS_FIELD_NUMBER: _ClassVar[int]
    NUM_FRAMES_GENERATED_FIELD_NUMBER: _ClassVar[int]
    KV_CACHE_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_CONTEXT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    VOCODERS_FIELD_NUMBER: _ClassVar[int]
    GATEWAYS_FIELD_NUMBER: _ClassVar[int]
    DECODE_GAP_FIELD_NUMBER: _ClassVar[int]
    MAX_DECODE_GAP_MS_FIELD_NUMBER: _ClassVar[int]
    VOICES_FIELD_NUMBER: _ClassVar[int]
    HOST_TIME_FIELD_NUMBER: _ClassVar[int]
    HOST_TIME_BY_PHASE_FIELD_NUMBER: _ClassVar[int]
    HOST_TIME_BY_BATCH_FIELD_NUMBER: _ClassVar[int]
    ADMISSION_HOLDS_FIELD_NUMBER: _ClassVar[int]
    peer_id: str
    model: str
    uptime_s: float
    load: _common_pb2.Load
    requests: RequestCounters
    step_time: LatencyStats
    prefill_time: LatencyStats
    first_frame_time: LatencyStats
    batch_size_histogram: _containers.ScalarMap[int, int]
    graphs: GraphStats
    num_frames_generated: int
    kv_cache_bytes: int
    max_context_tokens: int
    vocoders: _containers.RepeatedCompositeFieldContainer[PeerStatus]
    gateways: _containers.RepeatedCompositeFieldContainer[PeerStatus]
    decode_gap: LatencyStats
    max_decode_gap_ms: float
    voices: VoiceEncodingStats
    host_time: LatencyStats
    host_time_by_phase: _containers.MessageMap[str, LatencyStats]
    host_time_by_batch: _containers.MessageMap[int, LatencyStats]
    admission_holds: AdmissionHolds
    def __init__(self, peer_id: _Optional[str] = ..., model: _Optional[str] = ..., uptime_s: _Optional[float] = ..., load: _Optional[_Union[_common_pb2.Load, _Mapping]] = ..., requests: _Optional[_Union[RequestCounters, _Mapping]] = ..., step_time: _Optional[_Union[LatencyStats, _Mapping]] = ..., prefill_time: _Optional[_Union[LatencyStats, _Mapping]] = ..., first_frame_time: _Optional[_Union[LatencyStats, _Mapping]] = ..., batch_size_histogram: _Optional[_Mapping[int, int]] = ..., graphs: _Optional[_Union[GraphStats, _Mapping]] = ..., num_frames_generated: _Optional[int] = ..., kv_cache_bytes: _Optional[int] = ..., max_context_tokens: _Optional[int] = ..., vocoders: _Optional[_Iterable[_Union[PeerStatus, _Mapping]]] = ..., gateways: _Optional[_Iterable[_Union[PeerStatus, _Mapping]]] = ..., decode_gap: _Optional[_Union[LatencyStats, _Mapping]] = ..., max_decode_gap_ms: _Optional[float] = ..., voices: _Optional[_Union[VoiceEncodingStats, _Mapping]] = ..., host_time: _Optional[_Union[LatencyStats, _Mapping]] = ..., host_time_by_phase: _Optional[_Mapping[str, LatencyStats]] = ..., host_time_by_batch: _Optional[_Mapping[int, LatencyStats]] = ..., admission_holds: _Optional[_Union[AdmissionHolds, _Mapping]] = ...) -> None: ...

class AdmissionHolds(_message.Message):
    __slots__ = ("num_gather_holds", "num_cadence_holds", "num_deadline_holds")
    NUM_GATHER_HOLDS_FIELD_NUMBER: _ClassVar[int]
    NUM_CADENCE_HOLDS_FIELD_NUMBER: _ClassVar[int]
    NUM_DEADLINE_HOLDS_FIELD_NUMBER: _ClassVar[int]
    num_gather_holds: int
    num_cadence_holds: int
    num_deadline_holds: int
    def __init__(self, num_gather_holds: _Optional[int] = ..., num_cadence_holds: _Optional[int] = ..., num_deadline_holds: _Optional[int] = ...) -> None: ...

class VoiceEncodingStats(_message.Message):
    __slots__ = ("num_encoded", "num_failed", "num_cache_hits", "num_batches", "batch_size_histogram", "queue_wait", "batch_time", "prepare_time", "mel_time", "speaker_time", "codec_time", "num_forwards", "num_pending")
    class BatchSizeHistogramEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: int
        def __init__(self, key: _Optional[int] = ..., value: _Optional[int] = ...) -> None: ...
    NUM_ENCODED_FIELD_NUMBER: _ClassVar[int]
    NUM_FAILED_FIELD_NUMBER: _ClassVar[int]
    NUM_CACHE_HITS_FIELD_NUMBER: _ClassVar[int]
    NUM_BATCHES_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_HISTOGRAM_FIELD_NUMBER: _ClassVar[int]
    QUEUE_WAIT_FIELD_NUMBER: _ClassVar[int]
    BATCH_TIME_FIELD_NUMBER: _ClassVar[int]
    PREPARE_TIME_FIELD_NUMBER: _ClassVar[int]
    MEL_TIME_FIELD_NUMBER: _ClassVar[int]
    SPEAKER_TIME_FIELD_NUMBER: _ClassVar[int]
    CODEC_TIME_FIELD_NUMBER: _ClassVar[int]
    NUM_FORWARDS_FIELD_NUMBER: _ClassVar[int]
    NUM_PENDING_FIELD_NUMBER: _ClassVar[int]
    num_encoded: int
    num_failed: int
    num_cache_hits: int
    num_batches: int
    batch_size_histogram: _containers.ScalarMap[int, int]
    queue_wait: LatencyStats
    batch_time: LatencyStats
    prepare_time: LatencyStats
    mel_time: LatencyStats
    speaker_time: LatencyStats
    codec_time: LatencyStats
    num_forwards: int
    num_pending: int
    def __init__(self, num_encoded: _Optional[int] = ..., num_failed: _Optional[int] = ..., num_cache_hits: _Optional[int] = ..., num_batches: _Optional[int] = ..., batch_size_histogram: _Optional[_Mapping[int, int]] = ..., queue_wait: _Optional[_Union[LatencyStats, _Mapping]] = ..., batch_time: _Optional[_Union[LatencyStats, _Mapping]] = ..., prepare_time: _Optional[_Union[LatencyStats, _Mapping]] = ..., mel_time: _Optional[_Union[LatencyStats, _Mapping]] = ..., speaker_time: _Optional[_Union[LatencyStats, _Mapping]] = ..., codec_time: _Optional[_Union[LatencyStats, _Mapping]] = ..., num_forwards: _Optional[int] = ..., num_pending: _Optional[int] = ...) -> None: ...

class VocoderStats(_message.Message):
    __slots__ = ("peer_id", "model", "uptime_s", "load", "requests", "step_time", "first_chunk_time", "chunk_latency", "batch_size_histogram", "chunk_frames_histogram", "graphs", "num_frames_decoded", "audio_s_emitted", "talkers", "num_nonfinite_chunks", "num_nonfinite_samples", "num_clipped_chunks", "num_clipped_samples", "deadlines", "tail_time")
    class BatchSizeHistogramEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: int
        def __init__(self, key: _Optional[int] = ..., value: _Optional[int] = ...) -> None: ...
    class ChunkFramesHistogramEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: int
        def __init__(self, key: _Optional[int] = ..., value: _Optional[int] = ...) -> None: ...
    PEER_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    UPTIME_S_FIELD_NUMBER: _ClassVar[int]
    LOAD_FIELD_NUMBER: _ClassVar[int]
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    STEP_TIME_FIELD_NUMBER: _ClassVar[int]
    FIRST_CHUNK_TIME_FIELD_NUMBER: _ClassVar[int]
    CHUNK_LATENCY_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_HISTOGRAM_FIELD_NUMBER: _ClassVar[int]
    CHUNK_FRAMES_HISTOGRAM_FIELD_NUMBER: _ClassVar[int]
    GRAPHS_FIELD_NUMBER: _ClassVar[int]
    NUM_FRAMES_DECODED_FIELD_NUMBER: _ClassVar[int]
    AUDIO_S_EMITTED_FIELD_NUMBER: _ClassVar[int]
    TALKERS_FIELD_NUMBER: _ClassVar[int]
    NUM_NONFINITE_CHUNKS_FIELD_NUMBER: _ClassVar[int]
    NUM_NONFINITE_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    NUM_CLIPPED_CHUNKS_FIELD_NUMBER: _ClassVar[int]
    NUM_CLIPPED_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    DEADLINES_FIELD_NUMBER: _ClassVar[int]
    TAIL_TIME_FIELD_NUMBER: _ClassVar[int]
    peer_id: str
    model: str
    uptime_s: float
    load: _common_pb2.Load
    requests: RequestCounters
    step_time: LatencyStats
    first_chunk_time: LatencyStats
    chunk_latency: LatencyStats
    batch_size_histogram: _containers.ScalarMap[int, int]
    chunk_frames_histogram: _containers.ScalarMap[int, int]
    graphs: GraphStats
    num_frames_decoded: int
    audio_s_emitted: float
    talkers: _containers.RepeatedCompositeFieldContainer[PeerStatus]
    num_nonfinite_chunks: int
    num_nonfinite_samples: int
    num_clipped_chunks: int
    num_clipped_samples: int
    deadlines: DeadlineStats
    tail_time: LatencyStats
    def __init__(self, peer_id: _Optional[str] = ..., model: _Optional[str] = ..., uptime_s: _Optional[float] = ..., load: _Optional[_Union[_common_pb2.Load, _Mapping]] = ..., requests: _Optional[_Union[RequestCounters, _Mapping]] = ..., step_time: _Optional[_Union[LatencyStats, _Mapping]] = ..., first_chunk_time: _Optional[_Union[LatencyStats, _Mapping]] = ..., chunk_latency: _Optional[_Union[LatencyStats, _Mapping]] = ..., batch_size_histogram: _Optional[_Mapping[int, int]] = ..., chunk_frames_histogram: _Optional[_Mapping[int, int]] = ..., graphs: _Optional[_Union[GraphStats, _Mapping]] = ..., num_frames_decoded: _Optional[int] = ..., audio_s_emitted: _Optional[float] = ..., talkers: _Optional[_Iterable[_Union[PeerStatus, _Mapping]]] = ..., num_nonfinite_chunks: _Optional[int] = ..., num_nonfinite_samples: _Optional[int] = ..., num_clipped_chunks: _Optional[int] = ..., num_clipped_samples: _Optional[int] = ..., deadlines: _Optional[_Union[DeadlineStats, _Mapping]] = ..., tail_time: _Optional[_Union[LatencyStats, _Mapping]] = ...) -> None: ...

class DeadlineStats(_message.Message):
    __slots__ = ("num_due_rows", "num_deferred_rows", "num_late_chunks", "max_lateness_ms", "step_estimate_ms", "budget_row_frames", "num_late_talker", "num_late_queued", "num_late_decode", "filled_row_frames")
    NUM_DUE_ROWS_FIELD_NUMBER: _ClassVar[int]
    NUM_DEFERRED_ROWS_FIELD_NUMBER: _ClassVar[int]
    NUM_LATE_CHUNKS_FIELD_NUMBER: _ClassVar[int]
    MAX_LATENESS_MS_FIELD_NUMBER: _ClassVar[int]
    STEP_ESTIMATE_MS_FIELD_NUMBER: _ClassVar[int]
    BUDGET_ROW_FRAMES_FIELD_NUMBER: _ClassVar[int]
    NUM_LATE_TALKER_FIELD_NUMBER: _ClassVar[int]
    NUM_LATE_QUEUED_FIELD_NUMBER: _ClassVar[int]
    NUM_LATE_DECODE_FIELD_NUMBER: _ClassVar[int]
    FILLED_ROW_FRAMES_FIELD_NUMBER: _ClassVar[int]
    num_due_rows: int
    num_deferred_rows: int
    num_late_chunks: int
    max_lateness_ms: float
    step_estimate_ms: float
    budget_row_frames: float
    num_late_talker: int
    num_late_queued: int
    num_late_decode: int
    filled_row_frames: int
    def __init__(self, num_due_rows: _Optional[int] = ..., num_deferred_rows: _Optional[int] = ..., num_late_chunks: _Optional[int] = ..., max_lateness_ms: _Optional[float] = ..., step_estimate_ms: _Optional[float] = ..., budget_row_frames: _Optional[float] = ..., num_late_talker: _Optional[int] = ..., num_late_queued: _Optional[int] = ..., num_late_decode: _Optional[int] = ..., filled_row_frames: _Optional[int] = ...) -> None: ...

class GenerateCodesRequest(_message.Message):
    __slots__ = ("text", "config")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    text: str
    config: _config_pb2.SynthesisConfig
    def __init__(self, text: _Optional[str] = ..., config: _Optional[_Union[_config_pb2.SynthesisConfig, _Mapping]] = ...) -> None: ...

class GenerateCodesResponse(_message.Message):
    __slots__ = ("codes", "num_frames", "first_frame_index", "is_final", "generation", "seed")
    CODES_FIELD_NUMBER: _ClassVar[int]
    NUM_FRAMES_FIELD_NUMBER: _ClassVar[int]
    FIRST_FRAME_INDEX_FIELD_NUMBER: _ClassVar[int]
    IS_FINAL_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    codes: _containers.RepeatedScalarFieldContainer[int]
    num_frames: int
    first_frame_index: int
    is_final: bool
    generation: _vocoder_pb2.GenerationSummary
    seed: int
    def __init__(self, codes: _Optional[_Iterable[int]] = ..., num_frames: _Optional[int] = ..., first_frame_index: _Optional[int] = ..., is_final: _Optional[bool] = ..., generation: _Optional[_Union[_vocoder_pb2.GenerationSummary, _Mapping]] = ..., seed: _Optional[int] = ...) -> None: ...

class DecodeRequest(_message.Message):
    __slots__ = ("codes", "num_frames", "num_context_frames", "chunk_frames")
    CODES_FIELD_NUMBER: _ClassVar[int]
    NUM_FRAMES_FIELD_NUMBER: _ClassVar[int]
    NUM_CONTEXT_FRAMES_FIELD_NUMBER: _ClassVar[int]
    CHUNK_FRAMES_FIELD_NUMBER: _ClassVar[int]
    codes: _containers.RepeatedScalarFieldContainer[int]
    num_frames: int
    num_context_frames: int
    chunk_frames: int
    def __init__(self, codes: _Optional[_Iterable[int]] = ..., num_frames: _Optional[int] = ..., num_context_frames: _Optional[int] = ..., chunk_frames: _Optional[int] = ...) -> None: ...

class DecodeResponse(_message.Message):
    __slots__ = ("pcm", "num_samples", "sample_rate_hz", "decode_ms")
    PCM_FIELD_NUMBER: _ClassVar[int]
    NUM_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_RATE_HZ_FIELD_NUMBER: _ClassVar[int]
    DECODE_MS_FIELD_NUMBER: _ClassVar[int]
    pcm: bytes
    num_samples: int
    sample_rate_hz: int
    decode_ms: float
    def __init__(self, pcm: _Optional[bytes] = ..., num_samples: _Optional[int] = ..., sample_rate_hz: _Optional[int] = ..., decode_ms: _Optional[float] = ...) -> None: ...
