"""Everything the talker sends: replies and heartbeats to gateways (ROUTER), frames, aborts and
heartbeats to vocoders (DEALERs). Sends never block; a gateway send that fails is logged (that
gateway will be expired), a FRAMES send that fails raises for the caller to fail the requests
involved. What a heartbeat says is built by `Heartbeats` (heartbeats.py); this only sends it."""
from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np
import zmq

from protos import wire
from protos.tts.internal.v1 import common_pb2, vocoder_pb2
from talker_service.server.vocoders import VocoderLink

logger = logging.getLogger(__name__)


@dataclass
class FramesBatch:
    """One FRAMES message to one vocoder, being filled: per entry its stream handle, seq and rows;
    a FramesOpen per stream it starts and a FramesClose per stream it ends; the routes involved
    (failed together if the vocoder refuses the message)."""
    handles: list[int] = field(default_factory=list)
    seqs: list[int] = field(default_factory=list)
    num_frames: list[int] = field(default_factory=list)
    codes: list[np.ndarray] = field(default_factory=list)   # [num_frames[i], 16] per entry
    opens: list[vocoder_pb2.FramesOpen] = field(default_factory=list)
    closes: list[vocoder_pb2.FramesClose] = field(default_factory=list)
    routes: list = field(default_factory=list)              # routes.Route (routes.py imports this module)

    def add(self, handle: int, seq: int, rows: np.ndarray, route) -> None:
        """One entry: `rows` [n, 16] of the stream named `handle`, numbered `seq`."""
        self.handles.append(handle)
        self.seqs.append(seq)
        self.num_frames.append(rows.shape[0])
        self.codes.append(rows)
        self.routes.append(route)


def status_code(name: str) -> int:
    """"UNAVAILABLE" -> common_pb2.STATUS_CODE_UNAVAILABLE."""
    return common_pb2.StatusCode.Value("STATUS_CODE_" + name)


class Outbox:
    def __init__(self, router: zmq.Socket, peer_id: str) -> None:
        self.router = router
        self.peer_id = peer_id           # Error.origin and FramesChunk.talker_id
        self.num_gateway_send_failures = 0

    # ---- gateways ---------------------------------------------------------------------------
    def to_gateway(self, identity: bytes, msg_type: wire.MessageType, header) -> bool:
        try:
            self.router.send_multipart([identity, *wire.encode(msg_type, header)], flags=zmq.NOBLOCK, copy=False)
            return True
        except zmq.ZMQError as exc:   # EHOSTUNREACH (gone, ROUTER_MANDATORY) or its queue is full
            self.num_gateway_send_failures += 1
            logger.warning("%s to gateway %s not sent: %s", msg_type.name, identity.hex(), exc)
            return False

    def error_to_gateway(self, identity: bytes, request_id: str, code: str, message: str) -> None:
        self.to_gateway(identity, wire.MessageType.ERROR, common_pb2.Error(
            request_id=request_id, code=status_code(code), message=message, origin=self.peer_id))

    # ---- vocoders ---------------------------------------------------------------------------
    def frames_to_vocoder(self, link: VocoderLink, batch: FramesBatch) -> None:
        """One FRAMES message: the entries as arrays, protobuf only to open and close. Raises zmq.ZMQError."""
        chunk = vocoder_pb2.FramesChunk(talker_id=self.peer_id, opens=batch.opens, closes=batch.closes)
        # every code is < 3072, so int16 halves the bytes on the wire; one pass from the int64 rows
        codes = (np.concatenate(batch.codes, dtype=np.int16, casting="unsafe") if batch.codes
                 else np.zeros((0, wire.CODES_PER_FRAME), np.int16))   # [total, 16]
        arrays = wire.FramesArrays(wire.frames_entries(batch.handles, batch.seqs, batch.num_frames), codes)
        link.socket.send_multipart(wire.encode(wire.MessageType.FRAMES, chunk, arrays), flags=zmq.NOBLOCK, copy=False)

    def abort_to_vocoder(self, link: VocoderLink, request_id: str, reason: str, message: str) -> None:
        try:
            link.socket.send_multipart(wire.encode(wire.MessageType.ABORT, common_pb2.Abort(
                request_id=request_id, reason=status_code(reason), message=message)), flags=zmq.NOBLOCK)
        except zmq.ZMQError as exc:   # it will time the stream out on its side
            logger.warning("request %s: ABORT to vocoder %s not sent: %s", request_id, link.name, exc)

    def heartbeat_to_vocoder(self, link: VocoderLink, beat: common_pb2.Heartbeat) -> None:
        try:
            link.socket.send_multipart(wire.encode(wire.MessageType.HEARTBEAT, beat), flags=zmq.NOBLOCK)
        except zmq.Again:   # not connected yet (ZMQ_IMMEDIATE): it is not healthy until it answers
            pass
