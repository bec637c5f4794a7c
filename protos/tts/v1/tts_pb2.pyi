from protos.tts.v1 import config_pb2 as _config_pb2
from protos.tts.v1 import voices_pb2 as _voices_pb2
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class VoiceKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    VOICE_KIND_UNSPECIFIED: _ClassVar[VoiceKind]
    VOICE_KIND_SPEAKER: _ClassVar[VoiceKind]
    VOICE_KIND_DESIGN: _ClassVar[VoiceKind]
    VOICE_KIND_CLONE: _ClassVar[VoiceKind]
    VOICE_KIND_REGISTERED: _ClassVar[VoiceKind]

class FinishReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FINISH_REASON_UNSPECIFIED: _ClassVar[FinishReason]
    FINISH_REASON_END_OF_SPEECH: _ClassVar[FinishReason]
    FINISH_REASON_MAX_FRAMES: _ClassVar[FinishReason]
    FINISH_REASON_MAX_CONTEXT: _ClassVar[FinishReason]
    FINISH_REASON_TEXT_BUDGET: _ClassVar[FinishReason]
VOICE_KIND_UNSPECIFIED: VoiceKind
VOICE_KIND_SPEAKER: VoiceKind
VOICE_KIND_DESIGN: VoiceKind
VOICE_KIND_CLONE: VoiceKind
VOICE_KIND_REGISTERED: VoiceKind
FINISH_REASON_UNSPECIFIED: FinishReason
FINISH_REASON_END_OF_SPEECH: FinishReason
FINISH_REASON_MAX_FRAMES: FinishReason
FINISH_REASON_MAX_CONTEXT: FinishReason
FINISH_REASON_TEXT_BUDGET: FinishReason

class Flush(_message.Message):
    __slots__ = ("flush_id",)
    FLUSH_ID_FIELD_NUMBER: _ClassVar[int]
    flush_id: str
    def __init__(self, flush_id: _Optional[str] = ...) -> None: ...

class EndOfInput(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class StreamSynthesizeRequest(_message.Message):
    __slots__ = ("config", "text", "flush", "end")
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    FLUSH_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    config: _config_pb2.SynthesisConfig
    text: str
    flush: Flush
    end: EndOfInput
    def __init__(self, config: _Optional[_Union[_config_pb2.SynthesisConfig, _Mapping]] = ..., text: _Optional[str] = ..., flush: _Optional[_Union[Flush, _Mapping]] = ..., end: _Optional[_Union[EndOfInput, _Mapping]] = ...) -> None: ...

class ResolvedVoice(_message.Message):
    __slots__ = ("kind", "name")
    KIND_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    kind: VoiceKind
    name: str
    def __init__(self, kind: _Optional[_Union[VoiceKind, str]] = ..., name: _Optional[str] = ...) -> None: ...

class SynthesisStart(_message.Message):
    __slots__ = ("request_id", "model", "voice", "language", "audio_format", "seed", "text_mode", "speed")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    VOICE_FIELD_NUMBER: _ClassVar[int]
    LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    AUDIO_FORMAT_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    TEXT_MODE_FIELD_NUMBER: _ClassVar[int]
    SPEED_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    model: str
    voice: ResolvedVoice
    language: str
    audio_format: _config_pb2.AudioFormat
    seed: int
    text_mode: _config_pb2.TextMode
    speed: float
    def __init__(self, request_id: _Optional[str] = ..., model: _Optional[str] = ..., voice: _Optional[_Union[ResolvedVoice, _Mapping]] = ..., language: _Optional[str] = ..., audio_format: _Optional[_Union[_config_pb2.AudioFormat, _Mapping]] = ..., seed: _Optional[int] = ..., text_mode: _Optional[_Union[_config_pb2.TextMode, str]] = ..., speed: _Optional[float] = ...) -> None: ...

class AudioChunk(_message.Message):
    __slots__ = ("audio", "sequence_number", "sample_offset", "num_samples", "duration_ms")
    AUDIO_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_NUMBER_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    NUM_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    audio: bytes
    sequence_number: int
    sample_offset: int
    num_samples: int
    duration_ms: float
    def __init__(self, audio: _Optional[bytes] = ..., sequence_number: _Optional[int] = ..., sample_offset: _Optional[int] = ..., num_samples: _Optional[int] = ..., duration_ms: _Optional[float] = ...) -> None: ...

class FlushAck(_message.Message):
    __slots__ = ("flush_id", "num_text_tokens")
    FLUSH_ID_FIELD_NUMBER: _ClassVar[int]
    NUM_TEXT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    flush_id: str
    num_text_tokens: int
    def __init__(self, flush_id: _Optional[str] = ..., num_text_tokens: _Optional[int] = ...) -> None: ...

class ServerTimings(_message.Message):
    __slots__ = ("queue_ms", "prefill_ms", "first_frame_ms", "vocoder_first_chunk_ms", "vocoder_decode_ms", "encode_ms", "voice_encode_ms", "admit_ms", "second_frame_ms")
    QUEUE_MS_FIELD_NUMBER: _ClassVar[int]
    PREFILL_MS_FIELD_NUMBER: _ClassVar[int]
    FIRST_FRAME_MS_FIELD_NUMBER: _ClassVar[int]
    VOCODER_FIRST_CHUNK_MS_FIELD_NUMBER: _ClassVar[int]
    VOCODER_DECODE_MS_FIELD_NUMBER: _ClassVar[int]
    ENCODE_MS_FIELD_NUMBER: _ClassVar[int]
    VOICE_ENCODE_MS_FIELD_NUMBER: _ClassVar[int]
    ADMIT_MS_FIELD_NUMBER: _ClassVar[int]
    SECOND_FRAME_MS_FIELD_NUMBER: _ClassVar[int]
    queue_ms: float
    prefill_ms: float
    first_frame_ms: float
    vocoder_first_chunk_ms: float
    vocoder_decode_ms: float
    encode_ms: float
    voice_encode_ms: float
    admit_ms: float
    second_frame_ms: float
    def __init__(self, queue_ms: _Optional[float] = ..., prefill_ms: _Optional[float] = ..., first_frame_ms: _Optional[float] = ..., vocoder_first_chunk_ms: _Optional[float] = ..., vocoder_decode_ms: _Optional[float] = ..., encode_ms: _Optional[float] = ..., voice_encode_ms: _Optional[float] = ..., admit_ms: _Optional[float] = ..., second_frame_ms: _Optional[float] = ...) -> None: ...

class SynthesisSummary(_message.Message):
    __slots__ = ("audio_s", "time_to_first_audio_ms", "real_time_factor", "num_frames", "num_text_tokens", "finish_reason", "timings", "num_stalls", "longest_stall_ms")
    AUDIO_S_FIELD_NUMBER: _ClassVar[int]
    TIME_TO_FIRST_AUDIO_MS_FIELD_NUMBER: _ClassVar[int]
    REAL_TIME_FACTOR_FIELD_NUMBER: _ClassVar[int]
    NUM_FRAMES_FIELD_NUMBER: _ClassVar[int]
    NUM_TEXT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    TIMINGS_FIELD_NUMBER: _ClassVar[int]
    NUM_STALLS_FIELD_NUMBER: _ClassVar[int]
    LONGEST_STALL_MS_FIELD_NUMBER: _ClassVar[int]
    audio_s: float
    time_to_first_audio_ms: float
    real_time_factor: float
    num_frames: int
    num_text_tokens: int
    finish_reason: FinishReason
    timings: ServerTimings
    num_stalls: int
    longest_stall_ms: float
    def __init__(self, audio_s: _Optional[float] = ..., time_to_first_audio_ms: _Optional[float] = ..., real_time_factor: _Optional[float] = ..., num_frames: _Optional[int] = ..., num_text_tokens: _Optional[int] = ..., finish_reason: _Optional[_Union[FinishReason, str]] = ..., timings: _Optional[_Union[ServerTimings, _Mapping]] = ..., num_stalls: _Optional[int] = ..., longest_stall_ms: _Optional[float] = ...) -> None: ...

class StreamSynthesizeResponse(_message.Message):
    __slots__ = ("start", "audio", "flush_ack", "summary")
    START_FIELD_NUMBER: _ClassVar[int]
    AUDIO_FIELD_NUMBER: _ClassVar[int]
    FLUSH_ACK_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    start: SynthesisStart
    audio: AudioChunk
    flush_ack: FlushAck
    summary: SynthesisSummary
    def __init__(self, start: _Optional[_Union[SynthesisStart, _Mapping]] = ..., audio: _Optional[_Union[AudioChunk, _Mapping]] = ..., flush_ack: _Optional[_Union[FlushAck, _Mapping]] = ..., summary: _Optional[_Union[SynthesisSummary, _Mapping]] = ...) -> None: ...

class SynthesizeRequest(_message.Message):
    __slots__ = ("config", "text")
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    config: _config_pb2.SynthesisConfig
    text: str
    def __init__(self, config: _Optional[_Union[_config_pb2.SynthesisConfig, _Mapping]] = ..., text: _Optional[str] = ...) -> None: ...

class SynthesizeResponse(_message.Message):
    __slots__ = ("start", "audio", "summary")
    START_FIELD_NUMBER: _ClassVar[int]
    AUDIO_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    start: SynthesisStart
    audio: bytes
    summary: SynthesisSummary
    def __init__(self, start: _Optional[_Union[SynthesisStart, _Mapping]] = ..., audio: _Optional[bytes] = ..., summary: _Optional[_Union[SynthesisSummary, _Mapping]] = ...) -> None: ...
