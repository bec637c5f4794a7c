from protos.tts.v1 import config_pb2 as _config_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ModelType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MODEL_TYPE_UNSPECIFIED: _ClassVar[ModelType]
    MODEL_TYPE_BASE: _ClassVar[ModelType]
    MODEL_TYPE_CUSTOM_VOICE: _ClassVar[ModelType]
    MODEL_TYPE_VOICE_DESIGN: _ClassVar[ModelType]
MODEL_TYPE_UNSPECIFIED: ModelType
MODEL_TYPE_BASE: ModelType
MODEL_TYPE_CUSTOM_VOICE: ModelType
MODEL_TYPE_VOICE_DESIGN: ModelType

class Speaker(_message.Message):
    __slots__ = ("name", "dialect")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DIALECT_FIELD_NUMBER: _ClassVar[int]
    name: str
    dialect: str
    def __init__(self, name: _Optional[str] = ..., dialect: _Optional[str] = ...) -> None: ...

class ModelVoices(_message.Message):
    __slots__ = ("model", "model_type", "model_size", "speakers", "languages", "supports_instruct", "native_sample_rate_hz", "is_default")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    MODEL_TYPE_FIELD_NUMBER: _ClassVar[int]
    MODEL_SIZE_FIELD_NUMBER: _ClassVar[int]
    SPEAKERS_FIELD_NUMBER: _ClassVar[int]
    LANGUAGES_FIELD_NUMBER: _ClassVar[int]
    SUPPORTS_INSTRUCT_FIELD_NUMBER: _ClassVar[int]
    NATIVE_SAMPLE_RATE_HZ_FIELD_NUMBER: _ClassVar[int]
    IS_DEFAULT_FIELD_NUMBER: _ClassVar[int]
    model: str
    model_type: ModelType
    model_size: str
    speakers: _containers.RepeatedCompositeFieldContainer[Speaker]
    languages: _containers.RepeatedScalarFieldContainer[str]
    supports_instruct: bool
    native_sample_rate_hz: int
    is_default: bool
    def __init__(self, model: _Optional[str] = ..., model_type: _Optional[_Union[ModelType, str]] = ..., model_size: _Optional[str] = ..., speakers: _Optional[_Iterable[_Union[Speaker, _Mapping]]] = ..., languages: _Optional[_Iterable[str]] = ..., supports_instruct: _Optional[bool] = ..., native_sample_rate_hz: _Optional[int] = ..., is_default: _Optional[bool] = ...) -> None: ...

class RegisteredVoice(_message.Message):
    __slots__ = ("voice_id", "model", "display_name", "reference_text", "x_vector_only", "reference_audio_s", "created_unix_ms")
    VOICE_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    DISPLAY_NAME_FIELD_NUMBER: _ClassVar[int]
    REFERENCE_TEXT_FIELD_NUMBER: _ClassVar[int]
    X_VECTOR_ONLY_FIELD_NUMBER: _ClassVar[int]
    REFERENCE_AUDIO_S_FIELD_NUMBER: _ClassVar[int]
    CREATED_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    voice_id: str
    model: str
    display_name: str
    reference_text: str
    x_vector_only: bool
    reference_audio_s: float
    created_unix_ms: int
    def __init__(self, voice_id: _Optional[str] = ..., model: _Optional[str] = ..., display_name: _Optional[str] = ..., reference_text: _Optional[str] = ..., x_vector_only: _Optional[bool] = ..., reference_audio_s: _Optional[float] = ..., created_unix_ms: _Optional[int] = ...) -> None: ...

class ListVoicesRequest(_message.Message):
    __slots__ = ("model",)
    MODEL_FIELD_NUMBER: _ClassVar[int]
    model: str
    def __init__(self, model: _Optional[str] = ...) -> None: ...

class ListVoicesResponse(_message.Message):
    __slots__ = ("models", "registered_voices")
    MODELS_FIELD_NUMBER: _ClassVar[int]
    REGISTERED_VOICES_FIELD_NUMBER: _ClassVar[int]
    models: _containers.RepeatedCompositeFieldContainer[ModelVoices]
    registered_voices: _containers.RepeatedCompositeFieldContainer[RegisteredVoice]
    def __init__(self, models: _Optional[_Iterable[_Union[ModelVoices, _Mapping]]] = ..., registered_voices: _Optional[_Iterable[_Union[RegisteredVoice, _Mapping]]] = ...) -> None: ...

class RegisterVoiceRequest(_message.Message):
    __slots__ = ("voice_id", "model", "clone", "display_name", "overwrite")
    VOICE_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    CLONE_FIELD_NUMBER: _ClassVar[int]
    DISPLAY_NAME_FIELD_NUMBER: _ClassVar[int]
    OVERWRITE_FIELD_NUMBER: _ClassVar[int]
    voice_id: str
    model: str
    clone: _config_pb2.CloneVoice
    display_name: str
    overwrite: bool
    def __init__(self, voice_id: _Optional[str] = ..., model: _Optional[str] = ..., clone: _Optional[_Union[_config_pb2.CloneVoice, _Mapping]] = ..., display_name: _Optional[str] = ..., overwrite: _Optional[bool] = ...) -> None: ...

class RegisterVoiceResponse(_message.Message):
    __slots__ = ("voice",)
    VOICE_FIELD_NUMBER: _ClassVar[int]
    voice: RegisteredVoice
    def __init__(self, voice: _Optional[_Union[RegisteredVoice, _Mapping]] = ...) -> None: ...

class DeleteVoiceRequest(_message.Message):
    __slots__ = ("voice_id",)
    VOICE_ID_FIELD_NUMBER: _ClassVar[int]
    voice_id: str
    def __init__(self, voice_id: _Optional[str] = ...) -> None: ...

class DeleteVoiceResponse(_message.Message):
    __slots__ = ("voice",)
    VOICE_FIELD_NUMBER: _ClassVar[int]
    voice: RegisteredVoice
    def __init__(self, voice: _Optional[_Union[RegisteredVoice, _Mapping]] = ...) -> None: ...
