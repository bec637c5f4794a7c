from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TextMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TEXT_MODE_UNSPECIFIED: _ClassVar[TextMode]
    TEXT_MODE_STREAMING: _ClassVar[TextMode]
    TEXT_MODE_NON_STREAMING: _ClassVar[TextMode]

class AudioEncoding(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    AUDIO_ENCODING_UNSPECIFIED: _ClassVar[AudioEncoding]
    AUDIO_ENCODING_PCM16: _ClassVar[AudioEncoding]
    AUDIO_ENCODING_FLOAT32: _ClassVar[AudioEncoding]
    AUDIO_ENCODING_WAV: _ClassVar[AudioEncoding]
    AUDIO_ENCODING_OGG_OPUS: _ClassVar[AudioEncoding]
    AUDIO_ENCODING_MULAW: _ClassVar[AudioEncoding]

class ReferenceAudioEncoding(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    REFERENCE_AUDIO_ENCODING_UNSPECIFIED: _ClassVar[ReferenceAudioEncoding]
    REFERENCE_AUDIO_ENCODING_WAV: _ClassVar[ReferenceAudioEncoding]
    REFERENCE_AUDIO_ENCODING_FLAC: _ClassVar[ReferenceAudioEncoding]
    REFERENCE_AUDIO_ENCODING_OGG: _ClassVar[ReferenceAudioEncoding]
    REFERENCE_AUDIO_ENCODING_MP3: _ClassVar[ReferenceAudioEncoding]
    REFERENCE_AUDIO_ENCODING_PCM16: _ClassVar[ReferenceAudioEncoding]
    REFERENCE_AUDIO_ENCODING_FLOAT32: _ClassVar[ReferenceAudioEncoding]
TEXT_MODE_UNSPECIFIED: TextMode
TEXT_MODE_STREAMING: TextMode
TEXT_MODE_NON_STREAMING: TextMode
AUDIO_ENCODING_UNSPECIFIED: AudioEncoding
AUDIO_ENCODING_PCM16: AudioEncoding
AUDIO_ENCODING_FLOAT32: AudioEncoding
AUDIO_ENCODING_WAV: AudioEncoding
AUDIO_ENCODING_OGG_OPUS: AudioEncoding
AUDIO_ENCODING_MULAW: AudioEncoding
REFERENCE_AUDIO_ENCODING_UNSPECIFIED: ReferenceAudioEncoding
REFERENCE_AUDIO_ENCODING_WAV: ReferenceAudioEncoding
REFERENCE_AUDIO_ENCODING_FLAC: ReferenceAudioEncoding
REFERENCE_AUDIO_ENCODING_OGG: ReferenceAudioEncoding
REFERENCE_AUDIO_ENCODING_MP3: ReferenceAudioEncoding
REFERENCE_AUDIO_ENCODING_PCM16: ReferenceAudioEncoding
REFERENCE_AUDIO_ENCODING_FLOAT32: ReferenceAudioEncoding

class AudioFormat(_message.Message):
    __slots__ = ("encoding", "sample_rate_hz")
    ENCODING_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_RATE_HZ_FIELD_NUMBER: _ClassVar[int]
    encoding: AudioEncoding
    sample_rate_hz: int
    def __init__(self, encoding: _Optional[_Union[AudioEncoding, str]] = ..., sample_rate_hz: _Optional[int] = ...) -> None: ...

class SpeakerVoice(_message.Message):
    __slots__ = ("name", "instruct")
    NAME_FIELD_NUMBER: _ClassVar[int]
    INSTRUCT_FIELD_NUMBER: _ClassVar[int]
    name: str
    instruct: str
    def __init__(self, name: _Optional[str] = ..., instruct: _Optional[str] = ...) -> None: ...

class DesignVoice(_message.Message):
    __slots__ = ("instruct",)
    INSTRUCT_FIELD_NUMBER: _ClassVar[int]
    instruct: str
    def __init__(self, instruct: _Optional[str] = ...) -> None: ...

class ReferenceAudio(_message.Message):
    __slots__ = ("data", "encoding", "sample_rate_hz")
    DATA_FIELD_NUMBER: _ClassVar[int]
    ENCODING_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_RATE_HZ_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    encoding: ReferenceAudioEncoding
    sample_rate_hz: int
    def __init__(self, data: _Optional[bytes] = ..., encoding: _Optional[_Union[ReferenceAudioEncoding, str]] = ..., sample_rate_hz: _Optional[int] = ...) -> None: ...

class CloneVoice(_message.Message):
    __slots__ = ("reference_audio", "reference_text", "x_vector_only")
    REFERENCE_AUDIO_FIELD_NUMBER: _ClassVar[int]
    REFERENCE_TEXT_FIELD_NUMBER: _ClassVar[int]
    X_VECTOR_ONLY_FIELD_NUMBER: _ClassVar[int]
    reference_audio: ReferenceAudio
    reference_text: str
    x_vector_only: bool
    def __init__(self, reference_audio: _Optional[_Union[ReferenceAudio, _Mapping]] = ..., reference_text: _Optional[str] = ..., x_vector_only: _Optional[bool] = ...) -> None: ...

class SamplingParams(_message.Message):
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

class SynthesisConfig(_message.Message):
    __slots__ = ("model", "speaker", "design", "clone", "registered_voice_id", "language", "audio_format", "speed", "sampling", "text_mode")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    SPEAKER_FIELD_NUMBER: _ClassVar[int]
    DESIGN_FIELD_NUMBER: _ClassVar[int]
    CLONE_FIELD_NUMBER: _ClassVar[int]
    REGISTERED_VOICE_ID_FIELD_NUMBER: _ClassVar[int]
    LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    AUDIO_FORMAT_FIELD_NUMBER: _ClassVar[int]
    SPEED_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_FIELD_NUMBER: _ClassVar[int]
    TEXT_MODE_FIELD_NUMBER: _ClassVar[int]
    model: str
    speaker: SpeakerVoice
    design: DesignVoice
    clone: CloneVoice
    registered_voice_id: str
    language: str
    audio_format: AudioFormat
    speed: float
    sampling: SamplingParams
    text_mode: TextMode
    def __init__(self, model: _Optional[str] = ..., speaker: _Optional[_Union[SpeakerVoice, _Mapping]] = ..., design: _Optional[_Union[DesignVoice, _Mapping]] = ..., clone: _Optional[_Union[CloneVoice, _Mapping]] = ..., registered_voice_id: _Optional[str] = ..., language: _Optional[str] = ..., audio_format: _Optional[_Union[AudioFormat, _Mapping]] = ..., speed: _Optional[float] = ..., sampling: _Optional[_Union[SamplingParams, _Mapping]] = ..., text_mode: _Optional[_Union[TextMode, str]] = ...) -> None: ...
