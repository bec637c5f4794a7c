from protos.tts.internal.v1 import common_pb2 as _common_pb2
from protos.tts.v1 import config_pb2 as _config_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Sampling(_message.Message):
    __slots__ = ("seed", "do_sample", "temperature", "top_k", "top_p", "repetition_penalty", "subtalker_do_sample", "subtalker_temperature", "subtalker_top_k", "subtalker_top_p", "max_frames", "min_frames")
    SEED_FIELD_NUMBER: _ClassVar[int]
    DO_SAMPLE_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    TOP_P_FIELD_NUMBER: _ClassVar[int]
    REPETITION_PENALTY_FIELD_NUMBER: _ClassVar[int]
    SUBTALKER_DO_SAMPLE_FIELD_NUMBER: _ClassVar[int]
    SUBTALKER_TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    SUBTALKER_TOP_K_FIELD_NUMBER: _ClassVar[int]
    SUBTALKER_TOP_P_FIELD_NUMBER: _ClassVar[int]
    MAX_FRAMES_FIELD_NUMBER: _ClassVar[int]
    MIN_FRAMES_FIELD_NUMBER: _ClassVar[int]
    seed: int
    do_sample: bool
    temperature: float
    top_k: int
    top_p: float
    repetition_penalty: float
    subtalker_do_sample: bool
    subtalker_temperature: float
    subtalker_top_k: int
    subtalker_top_p: float
    max_frames: int
    min_frames: int
    def __init__(self, seed: _Optional[int] = ..., do_sample: _Optional[bool] = ..., temperature: _Optional[float] = ..., top_k: _Optional[int] = ..., top_p: _Optional[float] = ..., repetition_penalty: _Optional[float] = ..., subtalker_do_sample: _Optional[bool] = ..., subtalker_temperature: _Optional[float] = ..., subtalker_top_k: _Optional[int] = ..., subtalker_top_p: _Optional[float] = ..., max_frames: _Optional[int] = ..., min_frames: _Optional[int] = ...) -> None: ...

class SpeakerVoice(_message.Message):
    __slots__ = ("speaker_codec_id", "speaker_name", "instruct_token_ids")
    SPEAKER_CODEC_ID_FIELD_NUMBER: _ClassVar[int]
    SPEAKER_NAME_FIELD_NUMBER: _ClassVar[int]
    INSTRUCT_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    speaker_codec_id: int
    speaker_name: str
    instruct_token_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, speaker_codec_id: _Optional[int] = ..., speaker_name: _Optional[str] = ..., instruct_token_ids: _Optional[_Iterable[int]] = ...) -> None: ...

class DesignVoice(_message.Message):
    __slots__ = ("instruct_token_ids",)
    INSTRUCT_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    instruct_token_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, instruct_token_ids: _Optional[_Iterable[int]] = ...) -> None: ...

class VoicePrompt(_message.Message):
    __slots__ = ("model", "x_vector_only", "speaker_embedding", "reference_codes", "num_reference_frames", "reference_text_token_ids")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    X_VECTOR_ONLY_FIELD_NUMBER: _ClassVar[int]
    SPEAKER_EMBEDDING_FIELD_NUMBER: _ClassVar[int]
    REFERENCE_CODES_FIELD_NUMBER: _ClassVar[int]
    NUM_REFERENCE_FRAMES_FIELD_NUMBER: _ClassVar[int]
    REFERENCE_TEXT_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    model: str
    x_vector_only: bool
    speaker_embedding: _containers.RepeatedScalarFieldContainer[float]
    reference_codes: _containers.RepeatedScalarFieldContainer[int]
    num_reference_frames: int
    reference_text_token_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, model: _Optional[str] = ..., x_vector_only: _Optional[bool] = ..., speaker_embedding: _Optional[_Iterable[float]] = ..., reference_codes: _Optional[_Iterable[int]] = ..., num_reference_frames: _Optional[int] = ..., reference_text_token_ids: _Optional[_Iterable[int]] = ...) -> None: ...

class EncodeVoice(_message.Message):
    __slots__ = ("request_id", "model", "x_vector_only", "reference_text_token_ids", "sample_rate_hz", "array")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    X_VECTOR_ONLY_FIELD_NUMBER: _ClassVar[int]
    REFERENCE_TEXT_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_RATE_HZ_FIELD_NUMBER: _ClassVar[int]
    ARRAY_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    model: str
    x_vector_only: bool
    reference_text_token_ids: _containers.RepeatedScalarFieldContainer[int]
    sample_rate_hz: int
    array: _common_pb2.ArraySpec
    def __init__(self, request_id: _Optional[str] = ..., model: _Optional[str] = ..., x_vector_only: _Optional[bool] = ..., reference_text_token_ids: _Optional[_Iterable[int]] = ..., sample_rate_hz: _Optional[int] = ..., array: _Optional[_Union[_common_pb2.ArraySpec, _Mapping]] = ...) -> None: ...

class VoiceEncoded(_message.Message):
    __slots__ = ("request_id", "prompt", "encode_ms")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    ENCODE_MS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    prompt: VoicePrompt
    encode_ms: float
    def __init__(self, request_id: _Optional[str] = ..., prompt: _Optional[_Union[VoicePrompt, _Mapping]] = ..., encode_ms: _Optional[float] = ...) -> None: ...

class Start(_message.Message):
    __slots__ = ("request_id", "reply_to", "model", "speaker", "design", "clone", "language_codec_id", "sampling", "text_mode", "text_token_ids", "is_text_complete", "deadline_unix_ms")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    REPLY_TO_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    SPEAKER_FIELD_NUMBER: _ClassVar[int]
    DESIGN_FIELD_NUMBER: _ClassVar[int]
    CLONE_FIELD_NUMBER: _ClassVar[int]
    LANGUAGE_CODEC_ID_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_FIELD_NUMBER: _ClassVar[int]
    TEXT_MODE_FIELD_NUMBER: _ClassVar[int]
    TEXT_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    IS_TEXT_COMPLETE_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    reply_to: str
    model: str
    speaker: SpeakerVoice
    design: DesignVoice
    clone: VoicePrompt
    language_codec_id: int
    sampling: Sampling
    text_mode: _config_pb2.TextMode
    text_token_ids: _containers.RepeatedScalarFieldContainer[int]
    is_text_complete: bool
    deadline_unix_ms: int
    def __init__(self, request_id: _Optional[str] = ..., reply_to: _Optional[str] = ..., model: _Optional[str] = ..., speaker: _Optional[_Union[SpeakerVoice, _Mapping]] = ..., design: _Optional[_Union[DesignVoice, _Mapping]] = ..., clone: _Optional[_Union[VoicePrompt, _Mapping]] = ..., language_codec_id: _Optional[int] = ..., sampling: _Optional[_Union[Sampling, _Mapping]] = ..., text_mode: _Optional[_Union[_config_pb2.TextMode, str]] = ..., text_token_ids: _Optional[_Iterable[int]] = ..., is_text_complete: _Optional[bool] = ..., deadline_unix_ms: _Optional[int] = ...) -> None: ...

class Text(_message.Message):
    __slots__ = ("request_id", "seq", "token_ids")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    seq: int
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, request_id: _Optional[str] = ..., seq: _Optional[int] = ..., token_ids: _Optional[_Iterable[int]] = ...) -> None: ...

class End(_message.Message):
    __slots__ = ("request_id", "num_text_messages")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    NUM_TEXT_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    num_text_messages: int
    def __init__(self, request_id: _Optional[str] = ..., num_text_messages: _Optional[int] = ...) -> None: ...

class Ack(_message.Message):
    __slots__ = ("request_id", "talker_id", "vocoder_id", "num_prompt_tokens", "num_requests_ahead")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TALKER_ID_FIELD_NUMBER: _ClassVar[int]
    VOCODER_ID_FIELD_NUMBER: _ClassVar[int]
    NUM_PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    NUM_REQUESTS_AHEAD_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    talker_id: str
    vocoder_id: str
    num_prompt_tokens: int
    num_requests_ahead: int
    def __init__(self, request_id: _Optional[str] = ..., talker_id: _Optional[str] = ..., vocoder_id: _Optional[str] = ..., num_prompt_tokens: _Optional[int] = ..., num_requests_ahead: _Optional[int] = ...) -> None: ...
