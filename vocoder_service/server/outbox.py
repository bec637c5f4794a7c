"""Everything the vocoder sends: PCM and errors to gateways, errors and heartbeats to talkers.

Sends never block the loop. A talker that went away (EHOSTUNREACH on the mandatory ROUTER) or a
talker whose queue is full only costs a log line: talker-bound messages are advisory (errors,
credits). A gateway whose queue is full raises `zmq.Again` to the caller, which then fails that
request rather than drop audio from the middle of a stream.
"""
from __future__ import annotations

import logging
import random
import time

import numpy as np
import zmq

from protos import wire
from protos.tts.internal.v1 import common_pb2, vocoder_pb2
from vocoder_service.engine.engine import PcmOut
from vocoder_service.server.sockets import PushSockets

logger = logging.getLogger(__name__)


def status_code(name: str) -> int:
    """Engine code name ("RESOURCE_EXHAUSTED") -> tts.internal.v1.StatusCode value (UNKNOWN if unheard of)."""
    try:
        return common_pb2.StatusCode.Value(f"STATUS_CODE_{name}")
    except ValueError:
        return common_pb2.STATUS_CODE_UNKNOWN


class Outbox:
    def __init__(self, router: zmq.Socket, pushes: PushSockets, peer_id: str, model_name: str,
                 sample_rate_hz: int, heartbeat_interval_ms: int) -> None:
        self.router = router
        self.pushes = pushes
        self.peer_id = peer_id
        self.model_name = model_name
        self.sample_rate_hz = sample_rate_hz
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.incarnation = random.getrandbits(63) or 1
        self.num_talker_send_failures = 0
        self.unreachable: set[bytes] = set()   # talkers whose connection is gone (the loop forgets them)

    # ---- talkers (ROUTER) -----------------------------------------------------------------
    def to_talker(self, identity: bytes, msg_type: wire.MessageType, header) -> bool:
        try:
            self.router.send_multipart([identity, *wire.encode(msg_type, header)], flags=zmq.NOBLOCK, copy=False)
            return True
        except zmq.ZMQError as exc:  # EHOSTUNREACH: peer gone; EAGAIN: its queue is full
            self.num_talker_send_failures += 1
            if exc.errno == zmq.EHOSTUNREACH:
                self.unreachable.add(identity)
            logger.warning("%s to talker %s not sent: %s", msg_type.name, identity.hex(), exc)
            return False

    def error_to_talker(self, identity: bytes, request_id: str, code: str, message: str) -> bool:
        return self.to_talker(identity, wire.MessageType.ERROR, self._error(request_id, code, message))

    def heartbeat_to_talker(self, identity: bytes, load: common_pb2.Load, is_draining: bool) -> bool:
        beat = common_pb2.Heartbeat(
            peer_id=self.peer_id, role=common_pb2.PEER_ROLE_VOCODER, incarnation=self.incarnation,
            sent_unix_ms=int(time.time() * 1e3), interval_ms=self.heartbeat_interval_ms,
            is_draining=is_draining, load=load, model=self.model_name,
        )
        return self.to_talker(identity, wire.MessageType.HEARTBEAT, beat)

    # ---- gateways (PUSH to reply_to) ------------------------------------------------------
    def error_to_gateway(self, reply_to: str | None, request_id: str, code: str, message: str) -> bool:
        if not reply_to:
            return False
        try:
            self.pushes.send(reply_to, wire.encode(wire.MessageType.ERROR, self._error(request_id, code, message)))
            return True
        except (zmq.ZMQError, ValueError) as exc:
            logger.warning("request %s: error to gateway %s not sent: %s", request_id, reply_to, exc)
            return False

    def pcm_to_gateway(self, out: PcmOut, summary: vocoder_pb2.GenerationSummary | None) -> None:
        """Send one PCM chunk; raises zmq.Again when the gateway's queue is full."""
        header = vocoder_pb2.PcmChunk(
            request_id=out.request_id, seq=out.seq, sample_offset=out.sample_offset, num_samples=len(out.pcm),
            sample_rate_hz=self.sample_rate_hz, num_frames=out.num_frames, is_final=out.is_final,
        )
        if out.timing is not None:
            timing = out.timing
            header.timings.CopyFrom(vocoder_pb2.ChunkTimings(
                queue_ms=max(0.0, (timing.decode_start_s - timing.newest_frame_s) * 1e3),
                decode_ms=timing.decode_ms, batch_size=timing.batch_size, is_graph=timing.is_graph,
            ))
        if out.is_final and summary is not None:
            header.generation.CopyFrom(summary)
        pcm = np.asarray(out.pcm, dtype="<f4") if len(out.pcm) else None
        self.pushes.send(out.reply_to, wire.encode(wire.MessageType.PCM, header, pcm))

    def _error(self, request_id: str, code: str, message: str) -> common_pb2.Error:
        return common_pb2.Error(request_id=request_id, code=status_code(code), message=message, origin=self.peer_id)
