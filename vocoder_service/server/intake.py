"""Turns talkers' FRAMES and ABORT messages into engine calls, one entry at a time.

An entry that cannot be applied fails only its own request: the talker that sent it gets an
ERROR; if that talker owns the live request, the request is freed and its gateway gets the ERROR
too (nothing else would ever end that stream). A message naming another talker's request never
touches it. Requests beyond capacity are refused with RESOURCE_EXHAUSTED, never queued silently.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable

import numpy as np
import zmq
from google.protobuf.message import DecodeError

from protos import wire
from protos.tts.internal.v1 import common_pb2, vocoder_pb2
from service_common.endpoints import check_endpoint
from vocoder_service.engine.engine import NUM_CODE_GROUPS, EngineError, VocoderEngine
from vocoder_service.server.outbox import Outbox
from vocoder_service.server.peers import TalkerPeers

logger = logging.getLogger(__name__)


@dataclass
class Route:
    identity: bytes                  # the talker's ROUTER identity: its request's errors go back there
    reply_to: str                    # the gateway's PULL endpoint
    summary: vocoder_pb2.GenerationSummary | None = None   # from the final entry, sent with the last PCM


class FramesIntake:
    def __init__(self, engine: VocoderEngine, outbox: Outbox, peers: TalkerPeers,
                 is_accepting: Callable[[], bool]) -> None:
        self.engine = engine
        self.outbox = outbox
        self.peers = peers
        self.is_accepting = is_accepting     # False while draining: new streams are refused
        self.routes: dict[str, Route] = {}
        self.num_rejected_entries = 0

    # ---- handlers (MessageType -> method, see loop.py) -------------------------------------
    def on_frames(self, identity: bytes, chunk: vocoder_pb2.FramesChunk, codes: np.ndarray) -> None:
        # codes: [total_frames, 16] int16/int32, a read-only view on the received frame
        seen: set[str] = set()
        for entry in chunk.entries:
            try:
                self._apply(identity, chunk.talker_id, entry, codes, seen)
            except EngineError as exc:
                self.reject(identity, entry.request_id, exc.code, exc.message)

    def on_abort(self, identity: bytes, abort: common_pb2.Abort) -> None:
        route = self.routes.get(abort.request_id)
        if route is not None and route.identity != identity:
            logger.warning("request %s: abort from talker %s ignored, the request belongs to %s",
                           abort.request_id, self.peers.name(identity), self.peers.name(route.identity))
            return
        reason = f"{common_pb2.StatusCode.Name(abort.reason)}: {abort.message}"
        self.engine.abort(abort.request_id, reason)   # idempotent: unknown or finished ids are logged
        self.routes.pop(abort.request_id, None)

    # ---- per entry -------------------------------------------------------------------------
    def _apply(self, identity: bytes, talker_id: str, entry: vocoder_pb2.FramesEntry, codes: np.ndarray,
               seen: set[str]) -> None:
        rid = entry.request_id
        if not rid:
            raise EngineError("INVALID_ARGUMENT", "FramesEntry.request_id is empty")
        if rid in seen:
            raise EngineError("INVALID_ARGUMENT", f"request {rid!r}: more than one entry in one FramesChunk")
        seen.add(rid)
        if codes.shape[1] != NUM_CODE_GROUPS:
            raise EngineError("INVALID_ARGUMENT",
                              f"request {rid!r}: codes must be [n, {NUM_CODE_GROUPS}], got {list(codes.shape)}")
        end = entry.row_offset + entry.num_frames
        if end > codes.shape[0]:
            raise EngineError("INVALID_ARGUMENT", f"request {rid!r}: rows [{entry.row_offset}, {end}) exceed the "
                                                  f"{codes.shape[0]} rows of the codes array")
        if entry.num_context_frames > entry.num_frames:
            raise EngineError("INVALID_ARGUMENT", f"request {rid!r}: num_context_frames {entry.num_context_frames} > "
                                                  f"num_frames {entry.num_frames}")
        if entry.seq == 0 and rid not in self.engine.streams:
            self._open(identity, talker_id, entry)
        elif rid in self.engine.streams and (rid not in self.routes or self.routes[rid].identity != identity):
            raise EngineError("PERMISSION_DENIED", f"request {rid!r} belongs to another client of this vocoder")
        self.engine.add_frames(rid, entry.seq, codes[entry.row_offset:end], is_final=entry.is_final,
                               num_context_frames=entry.num_context_frames)
        if entry.is_final and entry.HasField("summary") and rid in self.routes:
            self.routes[rid].summary = entry.summary

    def _open(self, identity: bytes, talker_id: str, entry: vocoder_pb2.FramesEntry) -> None:
        rid = entry.request_id
        if not self.is_accepting():
            raise EngineError("UNAVAILABLE", f"request {rid!r} refused: the vocoder is draining")
        if not entry.reply_to:
            raise EngineError("INVALID_ARGUMENT", f"request {rid!r}: the seq 0 entry needs reply_to")
        try:
            check_endpoint(entry.reply_to, "reply_to")
        except ValueError as exc:
            raise EngineError("INVALID_ARGUMENT", f"request {rid!r}: {exc}") from None
        self.engine.open(rid, entry.reply_to, talker_id or self.peers.name(identity))
        self.routes[rid] = Route(identity, entry.reply_to)
        logger.info("request %s opened for talker %s, audio to %s", rid, self.peers.name(identity), entry.reply_to)

    # ---- failures ----------------------------------------------------------------------------
    def reject(self, identity: bytes, request_id: str, code: str, message: str) -> None:
        """Refuse one entry: ERROR to its sender; fail the request too when the sender owns it."""
        self.num_rejected_entries += 1
        logger.warning("request %s: rejected entry from talker %s (%s): %s",
                       request_id or "-", self.peers.name(identity), code, message)
        self.outbox.error_to_talker(identity, request_id, code, message)
        route = self.routes.get(request_id)
        if route is None or route.identity != identity:
            return
        self.engine.fail(request_id, code, message)   # no-op if the engine already freed it
        self.routes.pop(request_id, None)
        self.outbox.error_to_gateway(route.reply_to, request_id, code, message)

    def reject_message(self, identity: bytes, request_ids: list[str], message: str) -> None:
        """An undecodable message: fail the requests it names (when known), else a bare ERROR."""
        if not request_ids:
            self.num_rejected_entries += 1
            logger.warning("malformed message from talker %s: %s", self.peers.name(identity), message)
            self.outbox.error_to_talker(identity, "", "INVALID_ARGUMENT", message)
        for rid in dict.fromkeys(request_ids):
            self.reject(identity, rid, "INVALID_ARGUMENT", message)

    def finish(self, request_id: str) -> Route | None:
        """The request ended (final PCM or error sent): forget its route."""
        return self.routes.pop(request_id, None)

    def sweep(self) -> None:
        """Drop routes of requests the engine no longer holds (belt and braces against leaks)."""
        for rid in [rid for rid in self.routes if rid not in self.engine.streams]:
            del self.routes[rid]

    def streams_by_identity(self) -> dict[bytes, int]:
        counts: dict[bytes, int] = {}
        for route in self.routes.values():
            counts[route.identity] = counts.get(route.identity, 0) + 1
        return counts


def request_ids_of(body: list) -> list[str]:
    """Request ids named by a FRAMES message that failed to decode, when its header still parses."""
    if len(body) < 2:
        return []
    tag, raw = (frame.bytes if isinstance(frame, zmq.Frame) else bytes(frame) for frame in body[:2])
    if tag != wire.MessageType.FRAMES.value:
        return []
    chunk = vocoder_pb2.FramesChunk()
    try:
        chunk.ParseFromString(raw)
    except DecodeError:
        return []
    return [entry.request_id for entry in chunk.entries if entry.request_id]
