"""Everything the vocoder sends: PCM and errors to gateways, errors and heartbeats to talkers.

Sends never block the loop. A talker that went away (EHOSTUNREACH on the mandatory ROUTER) or a
talker whose queue is full only costs a log line: talker-bound messages are advisory (errors,
credits). PCM leaves as one message per gateway per decode step (`pcm_to_gateway`); a gateway
whose queue is full raises `zmq.Again` to the caller, which then fails the requests of that
message rather than drop audio from the middle of their streams.
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

_NO_PCM = np.zeros(0, "<f4")


def status_code(name: str) -> int:
    """Engine code name ("RESOURCE_EXHAUSTED") -> tts.internal.v1.StatusCode value (UNKNOWN if unheard of)."""
    try:
        return common_pb2.StatusCode.Value(f"STATUS_CODE_{name}")
    except ValueError:
        return common_pb2.STATUS_CODE_UNKNOWN


def back_to_back(pcms: list[np.ndarray]) -> np.ndarray:
    """The chunks' samples as one float32 buffer [sum(len)]. Without a copy when they already lie
    back to back in one array (full rows of one decode output, in order: the usual steady-state
    batch), since 256 chunks of 4 frames are ~8 MB per step; else one concatenation."""
    if not pcms:
        return _NO_PCM
    base = pcms[0].base
    if (isinstance(base, np.ndarray) and base.dtype == np.float32 and base.flags.c_contiguous
            and all(p.base is base and p.dtype == np.float32 and p.flags.c_contiguous for p in pcms)):
        itemsize, base_at = base.itemsize, base.__array_interface__["data"][0]
        start = (pcms[0].__array_interface__["data"][0] - base_at) // itemsize
        end = start
        for p in pcms:
            if p.__array_interface__["data"][0] != base_at + end * itemsize:
                break
            end += len(p)
        else:
            return base.reshape(-1)[start:end]
    return np.concatenate(pcms, dtype="<f4", casting="same_kind")


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

    def heartbeat_to_talker(self, identity: bytes, load: common_pb2.Load, is_draining: bool,
                            last_open_handle: int = 0) -> bool:
        """`last_open_handle`: that talker's latest FramesOpen which `load` counts (0: none yet)."""
        beat = common_pb2.Heartbeat(
            peer_id=self.peer_id, role=common_pb2.PEER_ROLE_VOCODER, incarnation=self.incarnation,
            sent_unix_ms=int(time.time() * 1e3), interval_ms=self.heartbeat_interval_ms,
            is_draining=is_draining, load=load, model=self.model_name,
        )
        beat.load.last_open_handle = last_open_handle   # set even when 0: "none yet" is not "cannot say"
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

    def pcm_to_gateway(self, reply_to: str, outs: list[PcmOut],
                       summaries: list[vocoder_pb2.GenerationSummary | None]) -> None:
        """One PCM message carrying every chunk in `outs` (all for `reply_to`, one decode step):
        per-chunk numbers as arrays, the samples back to back in one float32 buffer, a PcmFinal
        with the talker's summary (`summaries[i]`, may be None) per final chunk, a PcmSampleFaults
        per chunk in which the engine found samples that are not audio.
        Raises zmq.Again when the gateway's queue is full, ValueError for a bad address."""
        header = vocoder_pb2.PcmBatch(sample_rate_hz=self.sample_rate_hz, request_ids=[o.request_id for o in outs])
        rows: list[tuple] = []   # wire.PCM_CHUNK_COLUMNS per chunk
        for index, out in enumerate(outs):
            timing = out.timing
            if timing is None:   # an empty closing chunk: no decode ran
                rows.append((out.seq, out.sample_offset, len(out.pcm), out.num_frames, 0, 0, 0, 0))
            else:
                rows.append((out.seq, out.sample_offset, len(out.pcm), out.num_frames,
                             round(max(0.0, timing.decode_start_s - timing.newest_frame_s) * 1e6),
                             round(timing.decode_ms * 1e3), timing.batch_size, int(timing.is_graph)))
            if out.faults:
                header.sample_faults.add(chunk_index=index, num_nonfinite_samples=out.faults.num_nonfinite,
                                         num_clipped_samples=out.faults.num_clipped)
            if out.is_final:
                final = header.finals.add(chunk_index=index)
                if summaries[index] is not None:
                    final.generation.CopyFrom(summaries[index])
        chunks = np.array(rows, "<u8").reshape(-1, len(wire.PCM_CHUNK_COLUMNS))   # [C, 8]
        arrays = wire.PcmArrays(chunks, back_to_back([o.pcm for o in outs]))
        self.pushes.send(reply_to, wire.encode(wire.MessageType.PCM, header, arrays))

    def _error(self, request_id: str, code: str, message: str) -> common_pb2.Error:
        return common_pb2.Error(request_id=request_id, code=status_code(code), message=message, origin=self.peer_id)
