from protos.tts.internal.v1 import common_pb2 as _common_pb2
from protos.tts.v1 import tts_pb2 as _tts_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class GenerationSummary(_message.Message):
    __slots__ = ("finish_reason", "num_frames", "num_prompt_tokens", "num_text_tokens", "queue_ms", "prefill_ms", "first_frame_ms", "total_ms", "second_frame_ms")
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    NUM_FRAMES_FIELD_NUMBER: _ClassVar[int]
    NUM_PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    NUM_TEXT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    QUEUE_MS_FIELD_NUMBER: _ClassVar[int]
    PREFILL_MS_FIELD_NUMBER: _ClassVar[int]
    FIRST_FRAME_MS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_MS_FIELD_NUMBER: _ClassVar[int]
    SECOND_FRAME_MS_FIELD_NUMBER: _ClassVar[int]
    finish_reason: _tts_pb2.FinishReason
    num_frames: int
    num_prompt_tokens: int
    num_text_tokens: int
    queue_ms: float
    prefill_ms: float
    first_frame_ms: float
    total_ms: float
    second_frame_ms: float
    def __init__(self, finish_reason: _Optional[_Union[_tts_pb2.FinishReason, str]] = ..., num_frames: _Optional[int] = ..., num_prompt_tokens: _Optional[int] = ..., num_text_tokens: _Optional[int] = ..., queue_ms: _Optional[float] = ..., prefill_ms: _Optional[float] = ..., first_frame_ms: _Optional[float] = ..., total_ms: _Optional[float] = ..., second_frame_ms: _Optional[float] = ...) -> None: ...

class FramesOpen(_message.Message):
    __slots__ = ("handle", "request_id", "reply_to", "num_context_frames")
    HANDLE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    REPLY_TO_FIELD_NUMBER: _ClassVar[int]
    NUM_CONTEXT_FRAMES_FIELD_NUMBER: _ClassVar[int]
    handle: int
    request_id: str
    reply_to: str
    num_context_frames: int
    def __init__(self, handle: _Optional[int] = ..., request_id: _Optional[str] = ..., reply_to: _Optional[str] = ..., num_context_frames: _Optional[int] = ...) -> None: ...

class FramesClose(_message.Message):
    __slots__ = ("handle", "summary")
    HANDLE_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    handle: int
    summary: GenerationSummary
    def __init__(self, handle: _Optional[int] = ..., summary: _Optional[_Union[GenerationSummary, _Mapping]] = ...) -> None: ...

class FramesChunk(_message.Message):
    __slots__ = ("talker_id", "opens", "closes", "arrays")
    TALKER_ID_FIELD_NUMBER: _ClassVar[int]
    OPENS_FIELD_NUMBER: _ClassVar[int]
    CLOSES_FIELD_NUMBER: _ClassVar[int]
    ARRAYS_FIELD_NUMBER: _ClassVar[int]
    talker_id: str
    opens: _containers.RepeatedCompositeFieldContainer[FramesOpen]
    closes: _containers.RepeatedCompositeFieldContainer[FramesClose]
    arrays: _containers.RepeatedCompositeFieldContainer[_common_pb2.ArraySpec]
    def __init__(self, talker_id: _Optional[str] = ..., opens: _Optional[_Iterable[_Union[FramesOpen, _Mapping]]] = ..., closes: _Optional[_Iterable[_Union[FramesClose, _Mapping]]] = ..., arrays: _Optional[_Iterable[_Union[_common_pb2.ArraySpec, _Mapping]]] = ...) -> None: ...

class PcmFinal(_message.Message):
    __slots__ = ("chunk_index", "generation")
    CHUNK_INDEX_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    chunk_index: int
    generation: GenerationSummary
    def __init__(self, chunk_index: _Optional[int] = ..., generation: _Optional[_Union[GenerationSummary, _Mapping]] = ...) -> None: ...

class PcmSampleFaults(_message.Message):
    __slots__ = ("chunk_index", "num_nonfinite_samples", "num_clipped_samples")
    CHUNK_INDEX_FIELD_NUMBER: _ClassVar[int]
    NUM_NONFINITE_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    NUM_CLIPPED_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    chunk_index: int
    num_nonfinite_samples: int
    num_clipped_samples: int
    def __init__(self, chunk_index: _Optional[int] = ..., num_nonfinite_samples: _Optional[int] = ..., num_clipped_samples: _Optional[int] = ...) -> None: ...

class PcmBatch(_message.Message):
    __slots__ = ("sample_rate_hz", "request_ids", "finals", "arrays", "sample_faults")
    SAMPLE_RATE_HZ_FIELD_NUMBER: _ClassVar[int]
    REQUEST_IDS_FIELD_NUMBER: _ClassVar[int]
    FINALS_FIELD_NUMBER: _ClassVar[int]
    ARRAYS_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_FAULTS_FIELD_NUMBER: _ClassVar[int]
    sample_rate_hz: int
    request_ids: _containers.RepeatedScalarFieldContainer[str]
    finals: _containers.RepeatedCompositeFieldContainer[PcmFinal]
    arrays: _containers.RepeatedCompositeFieldContainer[_common_pb2.ArraySpec]
    sample_faults: _containers.RepeatedCompositeFieldContainer[PcmSampleFaults]
    def __init__(self, sample_rate_hz: _Optional[int] = ..., request_ids: _Optional[_Iterable[str]] = ..., finals: _Optional[_Iterable[_Union[PcmFinal, _Mapping]]] = ..., arrays: _Optional[_Iterable[_Union[_common_pb2.ArraySpec, _Mapping]]] = ..., sample_faults: _Optional[_Iterable[_Union[PcmSampleFaults, _Mapping]]] = ...) -> None: ...
