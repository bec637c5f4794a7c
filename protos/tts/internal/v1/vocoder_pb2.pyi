from protos.tts.internal.v1 import common_pb2 as _common_pb2
from protos.tts.v1 import tts_pb2 as _tts_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class GenerationSummary(_message.Message):
    __slots__ = ("finish_reason", "num_frames", "num_prompt_tokens", "num_text_tokens", "queue_ms", "prefill_ms", "first_frame_ms", "total_ms")
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    NUM_FRAMES_FIELD_NUMBER: _ClassVar[int]
    NUM_PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    NUM_TEXT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    QUEUE_MS_FIELD_NUMBER: _ClassVar[int]
    PREFILL_MS_FIELD_NUMBER: _ClassVar[int]
    FIRST_FRAME_MS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_MS_FIELD_NUMBER: _ClassVar[int]
    finish_reason: _tts_pb2.FinishReason
    num_frames: int
    num_prompt_tokens: int
    num_text_tokens: int
    queue_ms: float
    prefill_ms: float
    first_frame_ms: float
    total_ms: float
    def __init__(self, finish_reason: _Optional[_Union[_tts_pb2.FinishReason, str]] = ..., num_frames: _Optional[int] = ..., num_prompt_tokens: _Optional[int] = ..., num_text_tokens: _Optional[int] = ..., queue_ms: _Optional[float] = ..., prefill_ms: _Optional[float] = ..., first_frame_ms: _Optional[float] = ..., total_ms: _Optional[float] = ...) -> None: ...

class FramesEntry(_message.Message):
    __slots__ = ("request_id", "seq", "row_offset", "num_frames", "num_context_frames", "is_final", "reply_to", "summary")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    ROW_OFFSET_FIELD_NUMBER: _ClassVar[int]
    NUM_FRAMES_FIELD_NUMBER: _ClassVar[int]
    NUM_CONTEXT_FRAMES_FIELD_NUMBER: _ClassVar[int]
    IS_FINAL_FIELD_NUMBER: _ClassVar[int]
    REPLY_TO_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    seq: int
    row_offset: int
    num_frames: int
    num_context_frames: int
    is_final: bool
    reply_to: str
    summary: GenerationSummary
    def __init__(self, request_id: _Optional[str] = ..., seq: _Optional[int] = ..., row_offset: _Optional[int] = ..., num_frames: _Optional[int] = ..., num_context_frames: _Optional[int] = ..., is_final: _Optional[bool] = ..., reply_to: _Optional[str] = ..., summary: _Optional[_Union[GenerationSummary, _Mapping]] = ...) -> None: ...

class FramesChunk(_message.Message):
    __slots__ = ("talker_id", "entries", "array")
    TALKER_ID_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    ARRAY_FIELD_NUMBER: _ClassVar[int]
    talker_id: str
    entries: _containers.RepeatedCompositeFieldContainer[FramesEntry]
    array: _common_pb2.ArraySpec
    def __init__(self, talker_id: _Optional[str] = ..., entries: _Optional[_Iterable[_Union[FramesEntry, _Mapping]]] = ..., array: _Optional[_Union[_common_pb2.ArraySpec, _Mapping]] = ...) -> None: ...

class ChunkTimings(_message.Message):
    __slots__ = ("queue_ms", "decode_ms", "batch_size", "is_graph")
    QUEUE_MS_FIELD_NUMBER: _ClassVar[int]
    DECODE_MS_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    IS_GRAPH_FIELD_NUMBER: _ClassVar[int]
    queue_ms: float
    decode_ms: float
    batch_size: int
    is_graph: bool
    def __init__(self, queue_ms: _Optional[float] = ..., decode_ms: _Optional[float] = ..., batch_size: _Optional[int] = ..., is_graph: _Optional[bool] = ...) -> None: ...

class PcmChunk(_message.Message):
    __slots__ = ("request_id", "seq", "sample_offset", "num_samples", "sample_rate_hz", "num_frames", "is_final", "timings", "generation", "array")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    NUM_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_RATE_HZ_FIELD_NUMBER: _ClassVar[int]
    NUM_FRAMES_FIELD_NUMBER: _ClassVar[int]
    IS_FINAL_FIELD_NUMBER: _ClassVar[int]
    TIMINGS_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    ARRAY_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    seq: int
    sample_offset: int
    num_samples: int
    sample_rate_hz: int
    num_frames: int
    is_final: bool
    timings: ChunkTimings
    generation: GenerationSummary
    array: _common_pb2.ArraySpec
    def __init__(self, request_id: _Optional[str] = ..., seq: _Optional[int] = ..., sample_offset: _Optional[int] = ..., num_samples: _Optional[int] = ..., sample_rate_hz: _Optional[int] = ..., num_frames: _Optional[int] = ..., is_final: _Optional[bool] = ..., timings: _Optional[_Union[ChunkTimings, _Mapping]] = ..., generation: _Optional[_Union[GenerationSummary, _Mapping]] = ..., array: _Optional[_Union[_common_pb2.ArraySpec, _Mapping]] = ...) -> None: ...
