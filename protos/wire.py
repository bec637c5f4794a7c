"""Multipart ZeroMQ message codec for the internal data plane.

A message is frame 0 = the `MessageType` tag, frame 1 = the protobuf header of the class the tag
names, then raw little-endian C-order array frames:
- single-array messages (ENCODE_VOICE): frame 2, whose dtype and shape travel in the header's
  `array` field (`tts.internal.v1.ArraySpec`);
- multi-array messages (FRAMES, PCM): exactly one frame per array the schema names, frames 2, 3,
  ..., each described by the header's `repeated ArraySpec arrays` in the same order. `decode`
  returns them as a named tuple (`FramesArrays`, `PcmArrays`) after checking every dtype, shape
  and byte count, and that the arrays agree with each other and the header (row sums, counts).

Layout choice: neither one frame per column nor one packed structured buffer, but per message a
small integer table (one row per entry, one column per number; protos/array_messages.py) plus
the bulk payload (codes or PCM) in a frame of its own. Separate frames keep each array's dtype
and alignment, let the sender hand numpy buffers to ZeroMQ as they are (copy=False; the payload
is the only large part) and the receiver take `np.frombuffer` views, and are each checked against
their own ArraySpec, so a malformed message is refused naming the array at fault. Few frames,
because each costs a send call, a spec and a check on both sides (pyzmq sends multipart part by
part): with a frame per column a batch-1 step took ~1.7x the host time (0.34 vs 0.20 ms, CPU).
No pickle: a peer can only make us parse protobuf and reinterpret bytes as one of a few numeric
dtypes.

Frames are passed after any ROUTER routing envelope has been split off by the caller. Encoding
hands the arrays' own buffers to ZeroMQ, so the caller must not modify them until the send
completes; decoding returns read-only views on the received frames.
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

from protos.array_messages import (CODES_PER_FRAME, FRAMES_ARRAYS, FRAMES_ENTRY_COLUMNS, PCM_ARRAYS, PCM_CHUNK_COLUMNS,
                                   ArrayGroup, ArrayRule, FramesArrays, PcmArrays, array_rule, frames_entries)
from protos.tts.internal.v1 import common_pb2, talker_pb2, vocoder_pb2

logger = logging.getLogger(__name__)

# Re-exported: senders and receivers name the array tuples and the frame width through this module.
__all__ = ["CODES_PER_FRAME", "FRAMES_ENTRY_COLUMNS", "FramesArrays", "MessageType", "PCM_CHUNK_COLUMNS", "PcmArrays",
           "SCHEMAS", "decode", "encode", "frames_entries", "parse_header"]


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
class Schema:
    header_class: type[Message]
    array: ArrayRule | None = None     # single-array messages: frame 2 (required), described by header.array
    arrays: ArrayGroup | None = None   # multi-array messages: frames 2.., described by header.arrays


SCHEMAS: dict[MessageType, Schema] = {
    MessageType.START: Schema(talker_pb2.Start),
    MessageType.TEXT: Schema(talker_pb2.Text),
    MessageType.END: Schema(talker_pb2.End),
    MessageType.ENCODE_VOICE: Schema(talker_pb2.EncodeVoice, array=array_rule("audio", 1, "<f4")),  # [num_samples]
    MessageType.ABORT: Schema(common_pb2.Abort),
    MessageType.ACK: Schema(talker_pb2.Ack),
    MessageType.VOICE_ENCODED: Schema(talker_pb2.VoiceEncoded),
    MessageType.FRAMES: Schema(vocoder_pb2.FramesChunk, arrays=FRAMES_ARRAYS),
    MessageType.PCM: Schema(vocoder_pb2.PcmBatch, arrays=PCM_ARRAYS),
    MessageType.ERROR: Schema(common_pb2.Error),
    MessageType.HEARTBEAT: Schema(common_pb2.Heartbeat),
}

_DTYPE_TO_WIRE = {
    np.dtype("<i2"): common_pb2.DTYPE_INT16,
    np.dtype("<i4"): common_pb2.DTYPE_INT32,
    np.dtype("<i8"): common_pb2.DTYPE_INT64,
    np.dtype("<f2"): common_pb2.DTYPE_FLOAT16,
    np.dtype("<f4"): common_pb2.DTYPE_FLOAT32,
    np.dtype("<u1"): common_pb2.DTYPE_UINT8,
    np.dtype("<u4"): common_pb2.DTYPE_UINT32,
    np.dtype("<u8"): common_pb2.DTYPE_UINT64,
}
_WIRE_TO_DTYPE = {wire: dtype for dtype, wire in _DTYPE_TO_WIRE.items()}
_TYPES_BY_TAG = {t.value: t for t in MessageType}


def _label(msg_type: MessageType, rule: ArrayRule, schema: Schema) -> str:
    return f"{msg_type.name} array" if schema.arrays is None else f"{msg_type.name} array {rule.name!r}"


def _check_array(label: str, rule: ArrayRule, dtype: np.dtype, shape: Sequence[int]) -> None:
    if dtype not in rule.dtypes:
        allowed = ", ".join(sorted(d.name for d in rule.dtypes))
        raise ValueError(f"{label} has dtype {dtype.name}; expected one of: {allowed}")
    if len(shape) != rule.ndim:
        raise ValueError(f"{label} has shape {tuple(shape)}; expected {rule.ndim} dimensions")


def _payload(label: str, rule: ArrayRule, array: Any) -> tuple[common_pb2.ArraySpec, memoryview]:
    """The ArraySpec and a flat byte view (no copy for a native C-order array) of one array."""
    if not isinstance(array, np.ndarray):
        raise TypeError(f"{label} must be a numpy.ndarray, got {type(array).__name__}")
    wire_dtype = array.dtype.newbyteorder("<")
    _check_array(label, rule, wire_dtype, array.shape)
    payload = np.ascontiguousarray(array, dtype=wire_dtype)
    spec = common_pb2.ArraySpec(dtype=_DTYPE_TO_WIRE[wire_dtype], shape=payload.shape)
    # memoryview.cast refuses zero-size shapes, a uint8 view of the flat array does not.
    return spec, memoryview(payload.reshape(-1).view(np.uint8))


def encode(msg_type: MessageType, header: Message, array: Any = None) -> list[bytes | memoryview]:
    """Frames for `socket.send_multipart(frames, copy=False)`.

    `array`: an ndarray for single-array messages (None for messages without arrays); the named tuple of the type's arrays
    (`FramesArrays`, `PcmArrays`, or a plain tuple in that order) for multi-array messages, which
    are checked like `decode` checks them, so a sender's bug fails here rather than at the peer.
    The header's `array`/`arrays` field must be left unset: it is filled here.
    """
    if type(msg_type) is not MessageType:   # an enum call costs ~1 us; senders mostly pass the member
        msg_type = MessageType(msg_type)
    schema = SCHEMAS[msg_type]
    if not isinstance(header, schema.header_class):
        raise TypeError(
            f"{msg_type.name} needs a {schema.header_class.DESCRIPTOR.full_name} header, "
            f"got {type(header).__name__}"
        )
    header_bytes = header.SerializeToString()
    if schema.arrays is not None:
        return _encode_group(msg_type, schema, header, header_bytes, array)
    if schema.array is None:
        if array is not None:
            raise ValueError(f"{msg_type.name} carries no array")
        return [msg_type.value, header_bytes]
    if header.HasField("array"):
        raise ValueError(f"{msg_type.name} header.array is set by encode(); leave it empty")
    if array is None:
        raise ValueError(f"{msg_type.name} requires an array")
    spec, payload = _payload(_label(msg_type, schema.array, schema), schema.array, array)
    # Appending a serialized message that sets only `array` merges it into the header: this
    # avoids copying or mutating the caller's header (the field is known to be unset above).
    header_bytes += schema.header_class(array=spec).SerializeToString()
    return [msg_type.value, header_bytes, payload]


def _encode_group(msg_type: MessageType, schema: Schema, header: Message, header_bytes: bytes,
                  arrays: Any) -> list[bytes | memoryview]:
    group = schema.arrays
    if len(header.arrays):
        raise ValueError(f"{msg_type.name} header.arrays is set by encode(); leave it empty")
    if not isinstance(arrays, tuple) or len(arrays) != len(group.rules):
        raise TypeError(f"{msg_type.name} needs its {len(group.rules)} arrays as a {group.tuple_class.__name__}")
    specs, payloads = [], []
    for rule, array in zip(group.rules, arrays):
        spec, payload = _payload(_label(msg_type, rule, schema), rule, array)
        specs.append(spec)
        payloads.append(payload)
    group.check(header, group.tuple_class(*arrays))
    # Repeated fields merge by appending: the specs land in header.arrays without touching `header`.
    header_bytes += schema.header_class(arrays=specs).SerializeToString()
    return [msg_type.value, header_bytes, *payloads]


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


def _array_from(label: str, rule: ArrayRule, spec: common_pb2.ArraySpec, frame: Any, index: int) -> np.ndarray:
    dtype = _WIRE_TO_DTYPE.get(spec.dtype)
    if dtype is None:
        raise ValueError(f"{label}: dtype {spec.dtype} is not a known dtype")
    shape = tuple(spec.shape)
    _check_array(label, rule, dtype, shape)
    payload = _frame_view(frame, index)
    expected_bytes = math.prod(shape) * dtype.itemsize
    if payload.nbytes != expected_bytes:
        raise ValueError(
            f"{label} frame has {payload.nbytes} bytes; header says {dtype.name}{list(shape)} = {expected_bytes} bytes"
        )
    array = np.frombuffer(payload, dtype=dtype).reshape(shape)
    array.flags.writeable = False  # a view on the received frame, shared with ZeroMQ
    return array


def parse_header(frames: Sequence[Any]) -> tuple[MessageType, Message]:
    """(type, header) of a message, without its arrays; ValueError if even those are malformed.
    For a receiver that must find out whom a message that failed `decode` concerns."""
    if len(frames) < 2:
        raise ValueError(f"expected at least 2 frames (type, header), got {len(frames)}")
    tag = bytes(_frame_view(frames[0], 0))
    msg_type = _TYPES_BY_TAG.get(tag)
    if msg_type is None:
        raise ValueError(f"unknown message type {tag[:32]!r}")
    header = SCHEMAS[msg_type].header_class()
    try:
        header.ParseFromString(_frame_view(frames[1], 1))
    except DecodeError as exc:
        raise ValueError(f"malformed {msg_type.name} header: {exc}") from None
    return msg_type, header


def decode(frames: Sequence[Any]) -> tuple[MessageType, Message, Any]:
    """(type, header, arrays) from received frames; ValueError on anything malformed.

    arrays: None for messages without arrays, an ndarray for single-array messages, the type's
    named tuple of read-only ndarrays (`FramesArrays`, `PcmArrays`) for multi-array messages.
    """
    schema = None
    if len(frames) >= 1:
        known = _TYPES_BY_TAG.get(bytes(_frame_view(frames[0], 0)))
        schema = SCHEMAS[known] if known is not None else None
    if schema is not None and schema.arrays is not None:
        expected = 2 + len(schema.arrays.rules)
        if len(frames) != expected:
            raise ValueError(f"{known.name} expects {expected} frames (type, header, "
                             f"{len(schema.arrays.rules)} arrays), got {len(frames)}")
    elif len(frames) not in (2, 3):
        raise ValueError(f"expected 2 or 3 frames (type, header[, array]), got {len(frames)}")
    msg_type, header = parse_header(frames)
    schema = SCHEMAS[msg_type]
    if schema.arrays is not None:
        return msg_type, header, _decode_group(msg_type, schema, header, frames)
    rule = schema.array
    if len(frames) == 2:
        if rule is not None:
            raise ValueError(f"{msg_type.name} requires an array frame")
        return msg_type, header, None
    if rule is None:
        raise ValueError(f"{msg_type.name} carries no array, got a third frame")
    if not header.HasField("array"):
        raise ValueError(f"{msg_type.name} has an array frame but header.array is unset")
    return msg_type, header, _array_from(_label(msg_type, rule, schema), rule, header.array, frames[2], 2)


def _decode_group(msg_type: MessageType, schema: Schema, header: Message, frames: Sequence[Any]) -> tuple:
    group = schema.arrays
    if len(header.arrays) != len(group.rules):
        raise ValueError(f"{msg_type.name} header describes {len(header.arrays)} arrays; expected "
                         f"{len(group.rules)} ({', '.join(r.name for r in group.rules)})")
    arrays = group.tuple_class(*(
        _array_from(_label(msg_type, rule, schema), rule, spec, frames[2 + i], 2 + i)
        for i, (rule, spec) in enumerate(zip(group.rules, header.arrays))))
    group.check(header, arrays)
    return arrays
