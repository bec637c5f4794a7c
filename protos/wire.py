"""Multipart ZeroMQ message codec for the internal data plane.

A message is 2 or 3 frames: frame 0 = the `MessageType` tag, frame 1 = the protobuf header of
the class the tag names, optional frame 2 = a raw little-endian C-order array whose dtype and
shape travel in the header's `array` field (`tts.internal.v1.ArraySpec`). No pickle: a peer can
only make us parse protobuf and reinterpret bytes as one of a few numeric dtypes.

Frames are passed after any ROUTER routing envelope has been split off by the caller. Encoding
hands the array's own buffer to ZeroMQ (send with copy=False), so the caller must not modify the
array until the send completes; decoding returns a read-only view on the received frame.
"""
from __future__ import annotations

import enum
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from google.protobuf.message import DecodeError, Message

from protos.tts.internal.v1 import common_pb2, talker_pb2, vocoder_pb2

logger = logging.getLogger(__name__)


class MessageType(bytes, enum.Enum):
    """Frame 0 of every internal message; short ASCII so captures stay readable."""

    # gateway -> talker
    START = b"START"
    TEXT = b"TEXT"
    END = b"END"
    ENCODE_VOICE = b"ENCODE_VOICE"
    # gateway -> talker and talker -> vocoder
    ABORT = b"ABORT"
    # talker -> gateway
    ACK = b"ACK"
    VOICE_ENCODED = b"VOICE_ENCODED"
    # talker -> vocoder
    FRAMES = b"FRAMES"
    # vocoder -> gateway
    PCM = b"PCM"
    # any direction
    ERROR = b"ERROR"
    HEARTBEAT = b"HEARTBEAT"


@dataclass(frozen=True)
class ArrayRule:
    """Whether a message type carries frame 2, and what it may hold."""

    is_required: bool
    dtypes: frozenset[np.dtype]
    ndim: int


_CODES = ArrayRule(is_required=True, dtypes=frozenset({np.dtype("<i2"), np.dtype("<i4")}), ndim=2)
_AUDIO = ArrayRule(is_required=True, dtypes=frozenset({np.dtype("<f4")}), ndim=1)
_PCM = ArrayRule(is_required=False, dtypes=frozenset({np.dtype("<f4")}), ndim=1)


@dataclass(frozen=True)
class Schema:
    header_class: type[Message]
    array: ArrayRule | None  # None: frame 2 is never sent


SCHEMAS: dict[MessageType, Schema] = {
    MessageType.START: Schema(talker_pb2.Start, None),
    MessageType.TEXT: Schema(talker_pb2.Text, None),
    MessageType.END: Schema(talker_pb2.End, None),
    MessageType.ENCODE_VOICE: Schema(talker_pb2.EncodeVoice, _AUDIO),  # [num_samples] float32
    MessageType.ABORT: Schema(common_pb2.Abort, None),
    MessageType.ACK: Schema(talker_pb2.Ack, None),
    MessageType.VOICE_ENCODED: Schema(talker_pb2.VoiceEncoded, None),
    MessageType.FRAMES: Schema(vocoder_pb2.FramesChunk, _CODES),  # [total_frames, 16] int16/int32
    MessageType.PCM: Schema(vocoder_pb2.PcmChunk, _PCM),  # [num_samples] float32, absent if empty
    MessageType.ERROR: Schema(common_pb2.Error, None),
    MessageType.HEARTBEAT: Schema(common_pb2.Heartbeat, None),
}

_DTYPE_TO_WIRE = {
    np.dtype("<i2"): common_pb2.DTYPE_INT16,
    np.dtype("<i4"): common_pb2.DTYPE_INT32,
    np.dtype("<i8"): common_pb2.DTYPE_INT64,
    np.dtype("<f2"): common_pb2.DTYPE_FLOAT16,
    np.dtype("<f4"): common_pb2.DTYPE_FLOAT32,
}
_WIRE_TO_DTYPE = {wire: dtype for dtype, wire in _DTYPE_TO_WIRE.items()}
_TYPES_BY_TAG = {t.value: t for t in MessageType}


def _check_array(msg_type: MessageType, rule: ArrayRule, dtype: np.dtype, shape: Sequence[int]) -> None:
    if dtype not in rule.dtypes:
        allowed = ", ".join(sorted(d.name for d in rule.dtypes))
        raise ValueError(f"{msg_type.name} array has dtype {dtype.name}; expected one of: {allowed}")
    if len(shape) != rule.ndim:
        raise ValueError(f"{msg_type.name} array has shape {tuple(shape)}; expected {rule.ndim} dimensions")


def encode(msg_type: MessageType, header: Message, array: np.ndarray | None = None) -> list[bytes | memoryview]:
    """Frames for `socket.send_multipart(frames, copy=False)`.

    The header's `array` field must be left unset: it is filled here from `array`.
    """
    msg_type = MessageType(msg_type)
    schema = SCHEMAS[msg_type]
    if not isinstance(header, schema.header_class):
        raise TypeError(
            f"{msg_type.name} needs a {schema.header_class.DESCRIPTOR.full_name} header, "
            f"got {type(header).__name__}"
        )
    header_bytes = header.SerializeToString()
    if schema.array is None:
        if array is not None:
            raise ValueError(f"{msg_type.name} carries no array")
        return [msg_type.value, header_bytes]
    if header.HasField("array"):
        raise ValueError(f"{msg_type.name} header.array is set by encode(); leave it empty")
    if array is None:
        if schema.array.is_required:
            raise ValueError(f"{msg_type.name} requires an array")
        return [msg_type.value, header_bytes]
    if not isinstance(array, np.ndarray):
        raise TypeError(f"{msg_type.name} array must be a numpy.ndarray, got {type(array).__name__}")
    wire_dtype = array.dtype.newbyteorder("<")
    _check_array(msg_type, schema.array, wire_dtype, array.shape)
    # Contiguous little-endian buffer; a no-op (no copy) for the usual native C-order array.
    payload = np.ascontiguousarray(array, dtype=wire_dtype)
    # Appending a serialized message that sets only `array` merges it into the header: this
    # avoids copying or mutating the caller's header (the field is known to be unset above).
    spec = common_pb2.ArraySpec(dtype=_DTYPE_TO_WIRE[wire_dtype], shape=payload.shape)
    header_bytes += schema.header_class(array=spec).SerializeToString()
    # A flat byte view of the same memory (memoryview.cast refuses zero-size shapes).
    return [msg_type.value, header_bytes, memoryview(payload.reshape(-1).view(np.uint8))]


def _frame_view(frame: Any, index: int) -> memoryview:
    # bytes, bytearray, memoryview and zmq.Frame all expose the buffer protocol.
    try:
        view = memoryview(frame)
    except TypeError:
        raise ValueError(f"frame {index} is a {type(frame).__name__}, not a buffer") from None
    if view.ndim == 1 and view.format == "B":
        return view
    if view.nbytes == 0:
        return memoryview(b"")  # cast() refuses zero-size shapes
    if not view.c_contiguous:
        raise ValueError(f"frame {index} is not a contiguous buffer")
    return view.cast("B")


def decode(frames: Sequence[Any]) -> tuple[MessageType, Message, np.ndarray | None]:
    """(type, header, array or None) from received frames; ValueError on anything malformed."""
    if len(frames) not in (2, 3):
        raise ValueError(f"expected 2 or 3 frames (type, header[, array]), got {len(frames)}")
    tag = bytes(_frame_view(frames[0], 0))
    msg_type = _TYPES_BY_TAG.get(tag)
    if msg_type is None:
        raise ValueError(f"unknown message type {tag[:32]!r}")
    schema = SCHEMAS[msg_type]
    header = schema.header_class()
    try:
        header.ParseFromString(_frame_view(frames[1], 1))
    except DecodeError as exc:
        raise ValueError(f"malformed {msg_type.name} header: {exc}") from None
    rule = schema.array
    if len(frames) == 2:
        if rule is not None and rule.is_required:
            raise ValueError(f"{msg_type.name} requires an array frame")
        if rule is not None and header.HasField("array"):
            raise ValueError(f"{msg_type.name} header describes an array but no array frame came")
        return msg_type, header, None
    if rule is None:
        raise ValueError(f"{msg_type.name} carries no array, got a third frame")
    if not header.HasField("array"):
        raise ValueError(f"{msg_type.name} has an array frame but header.array is unset")
    dtype = _WIRE_TO_DTYPE.get(header.array.dtype)
    if dtype is None:
        raise ValueError(f"{msg_type.name} header.array.dtype {header.array.dtype} is not a known dtype")
    shape = tuple(header.array.shape)
    _check_array(msg_type, rule, dtype, shape)
    payload = _frame_view(frames[2], 2)
    expected_bytes = math.prod(shape) * dtype.itemsize
    if payload.nbytes != expected_bytes:
        raise ValueError(
            f"{msg_type.name} array frame has {payload.nbytes} bytes; header says {dtype.name}{list(shape)} "
            f"= {expected_bytes} bytes"
        )
    array = np.frombuffer(payload, dtype=dtype).reshape(shape)
    array.flags.writeable = False  # a view on the received frame, shared with ZeroMQ
    return msg_type, header, array
