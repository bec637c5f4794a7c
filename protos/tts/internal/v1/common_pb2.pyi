from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class StatusCode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    STATUS_CODE_UNSPECIFIED: _ClassVar[StatusCode]
    STATUS_CODE_CANCELLED: _ClassVar[StatusCode]
    STATUS_CODE_UNKNOWN: _ClassVar[StatusCode]
    STATUS_CODE_INVALID_ARGUMENT: _ClassVar[StatusCode]
    STATUS_CODE_DEADLINE_EXCEEDED: _ClassVar[StatusCode]
    STATUS_CODE_NOT_FOUND: _ClassVar[StatusCode]
    STATUS_CODE_ALREADY_EXISTS: _ClassVar[StatusCode]
    STATUS_CODE_PERMISSION_DENIED: _ClassVar[StatusCode]
    STATUS_CODE_RESOURCE_EXHAUSTED: _ClassVar[StatusCode]
    STATUS_CODE_FAILED_PRECONDITION: _ClassVar[StatusCode]
    STATUS_CODE_ABORTED: _ClassVar[StatusCode]
    STATUS_CODE_OUT_OF_RANGE: _ClassVar[StatusCode]
    STATUS_CODE_UNIMPLEMENTED: _ClassVar[StatusCode]
    STATUS_CODE_INTERNAL: _ClassVar[StatusCode]
    STATUS_CODE_UNAVAILABLE: _ClassVar[StatusCode]
    STATUS_CODE_DATA_LOSS: _ClassVar[StatusCode]
    STATUS_CODE_UNAUTHENTICATED: _ClassVar[StatusCode]

class PeerRole(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PEER_ROLE_UNSPECIFIED: _ClassVar[PeerRole]
    PEER_ROLE_GATEWAY: _ClassVar[PeerRole]
    PEER_ROLE_TALKER: _ClassVar[PeerRole]
    PEER_ROLE_VOCODER: _ClassVar[PeerRole]

class DType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DTYPE_UNSPECIFIED: _ClassVar[DType]
    DTYPE_INT16: _ClassVar[DType]
    DTYPE_INT32: _ClassVar[DType]
    DTYPE_INT64: _ClassVar[DType]
    DTYPE_FLOAT16: _ClassVar[DType]
    DTYPE_FLOAT32: _ClassVar[DType]
    DTYPE_UINT8: _ClassVar[DType]
    DTYPE_UINT32: _ClassVar[DType]
    DTYPE_UINT64: _ClassVar[DType]
STATUS_CODE_UNSPECIFIED: StatusCode
STATUS_CODE_CANCELLED: StatusCode
STATUS_CODE_UNKNOWN: StatusCode
STATUS_CODE_INVALID_ARGUMENT: StatusCode
STATUS_CODE_DEADLINE_EXCEEDED: StatusCode
STATUS_CODE_NOT_FOUND: StatusCode
STATUS_CODE_ALREADY_EXISTS: StatusCode
STATUS_CODE_PERMISSION_DENIED: StatusCode
STATUS_CODE_RESOURCE_EXHAUSTED: StatusCode
STATUS_CODE_FAILED_PRECONDITION: StatusCode
STATUS_CODE_ABORTED: StatusCode
STATUS_CODE_OUT_OF_RANGE: StatusCode
STATUS_CODE_UNIMPLEMENTED: StatusCode
STATUS_CODE_INTERNAL: StatusCode
STATUS_CODE_UNAVAILABLE: StatusCode
STATUS_CODE_DATA_LOSS: StatusCode
STATUS_CODE_UNAUTHENTICATED: StatusCode
PEER_ROLE_UNSPECIFIED: PeerRole
PEER_ROLE_GATEWAY: PeerRole
PEER_ROLE_TALKER: PeerRole
PEER_ROLE_VOCODER: PeerRole
DTYPE_UNSPECIFIED: DType
DTYPE_INT16: DType
DTYPE_INT32: DType
DTYPE_INT64: DType
DTYPE_FLOAT16: DType
DTYPE_FLOAT32: DType
DTYPE_UINT8: DType
DTYPE_UINT32: DType
DTYPE_UINT64: DType

class Error(_message.Message):
    __slots__ = ("request_id", "code", "message", "origin")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    code: StatusCode
    message: str
    origin: str
    def __init__(self, request_id: _Optional[str] = ..., code: _Optional[_Union[StatusCode, str]] = ..., message: _Optional[str] = ..., origin: _Optional[str] = ...) -> None: ...

class Abort(_message.Message):
    __slots__ = ("request_id", "reason", "message")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    reason: StatusCode
    message: str
    def __init__(self, request_id: _Optional[str] = ..., reason: _Optional[_Union[StatusCode, str]] = ..., message: _Optional[str] = ...) -> None: ...

class Load(_message.Message):
    __slots__ = ("num_slots_total", "num_slots_used", "num_requests_queued", "num_requests_parked", "num_frames_queued", "max_frames_queued", "step_time_ms", "num_late_chunks_recent", "last_open_handle")
    NUM_SLOTS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    NUM_SLOTS_USED_FIELD_NUMBER: _ClassVar[int]
    NUM_REQUESTS_QUEUED_FIELD_NUMBER: _ClassVar[int]
    NUM_REQUESTS_PARKED_FIELD_NUMBER: _ClassVar[int]
    NUM_FRAMES_QUEUED_FIELD_NUMBER: _ClassVar[int]
    MAX_FRAMES_QUEUED_FIELD_NUMBER: _ClassVar[int]
    STEP_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    NUM_LATE_CHUNKS_RECENT_FIELD_NUMBER: _ClassVar[int]
    LAST_OPEN_HANDLE_FIELD_NUMBER: _ClassVar[int]
    num_slots_total: int
    num_slots_used: int
    num_requests_queued: int
    num_requests_parked: int
    num_frames_queued: int
    max_frames_queued: int
    step_time_ms: float
    num_late_chunks_recent: int
    last_open_handle: int
    def __init__(self, num_slots_total: _Optional[int] = ..., num_slots_used: _Optional[int] = ..., num_requests_queued: _Optional[int] = ..., num_requests_parked: _Optional[int] = ..., num_frames_queued: _Optional[int] = ..., max_frames_queued: _Optional[int] = ..., step_time_ms: _Optional[float] = ..., num_late_chunks_recent: _Optional[int] = ..., last_open_handle: _Optional[int] = ...) -> None: ...

class Heartbeat(_message.Message):
    __slots__ = ("peer_id", "role", "incarnation", "sent_unix_ms", "interval_ms", "is_draining", "load", "model", "num_healthy_vocoders")
    PEER_ID_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    SENT_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    INTERVAL_MS_FIELD_NUMBER: _ClassVar[int]
    IS_DRAINING_FIELD_NUMBER: _ClassVar[int]
    LOAD_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    NUM_HEALTHY_VOCODERS_FIELD_NUMBER: _ClassVar[int]
    peer_id: str
    role: PeerRole
    incarnation: int
    sent_unix_ms: int
    interval_ms: int
    is_draining: bool
    load: Load
    model: str
    num_healthy_vocoders: int
    def __init__(self, peer_id: _Optional[str] = ..., role: _Optional[_Union[PeerRole, str]] = ..., incarnation: _Optional[int] = ..., sent_unix_ms: _Optional[int] = ..., interval_ms: _Optional[int] = ..., is_draining: _Optional[bool] = ..., load: _Optional[_Union[Load, _Mapping]] = ..., model: _Optional[str] = ..., num_healthy_vocoders: _Optional[int] = ...) -> None: ...

class ArraySpec(_message.Message):
    __slots__ = ("dtype", "shape")
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    dtype: DType
    shape: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, dtype: _Optional[_Union[DType, str]] = ..., shape: _Optional[_Iterable[int]] = ...) -> None: ...
