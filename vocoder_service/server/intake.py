"""Turns talkers' FRAMES and ABORT messages into engine calls.

A FRAMES message holds one talker step's entries as arrays (protos/wire.py `FramesArrays`):
streams are named by small handles the talker assigned in the message that opened them
(`FramesOpen`), per talker link, so a talker can only ever address its own streams.

An entry that cannot be applied (unknown or reused handle, a seq gap, codes out of the codebook,
no free slot...) fails only its own request: the talker that sent it gets an ERROR naming the
problem; if the request was live, it is freed and its gateway gets the ERROR too (nothing else
would ever end that stream). The other entries of the message are applied as usual. A message
that does not decode at all fails the requests it can still be traced to (`requests_named_by`).
Requests beyond capacity are refused with RESOURCE_EXHAUSTED, never queued silently.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from protos import wire
from protos.tts.internal.v1 import common_pb2, vocoder_pb2
from service_common import hop_trace
from service_common.endpoints import check_endpoint
from vocoder_service.engine.engine import EngineError, VocoderEngine
from vocoder_service.server.outbox import Outbox
from vocoder_service.server.peers import TalkerPeers

logger = logging.getLogger(__name__)


@dataclass
class Route:
    identity: bytes                  # the talker's ROUTER identity: its request's errors go back there
    reply_to: str                    # the gateway's PULL endpoint
    handle: int                      # the talker's name for the stream on its link
    summary: vocoder_pb2.GenerationSummary | None = None   # from FramesClose, sent with the last PCM


class FramesIntake:
    def __init__(self, engine: VocoderEngine, outbox: Outbox, peers: TalkerPeers,
                 is_accepting: Callable[[], bool]) -> None:
        self.engine = engine
        self.outbox = outbox
        self.peers = peers
        self.is_accepting = is_accepting     # False while draining: new streams are refused
        self.routes: dict[str, Route] = {}
        # Per talker link: handle -> request id of the streams whose FramesClose has not come yet.
        self.handles: dict[bytes, dict[int, str]] = {}
        # Per talker link: the latest FramesOpen handled (opened or refused), echoed in the heartbeats
        # to that talker (Load.last_open_handle): opens after it are still on their way to our slots
        self.last_open_handle: dict[bytes, int] = {}
        self.num_rejected_entries = 0

    # ---- handlers (MessageType -> method, see loop.py) -------------------------------------
    def on_frames(self, identity: bytes, chunk: vocoder_pb2.FramesChunk, arrays: wire.FramesArrays) -> None:
        # arrays: read-only views on the received frames, checked by wire.decode for dtype, shape and
        # agreement (entries' lengths, rows adding up to the codes); what needs state is checked here.
        link = self.handles.setdefault(identity, {})
        opens = self._by_handle(identity, chunk.opens, "FramesOpen", lambda o: o.request_id)
        closes = self._by_handle(identity, chunk.closes, "FramesClose", lambda c: link.get(c.handle, ""))
        handles, seqs, counts = arrays.handles.tolist(), arrays.seqs.tolist(), arrays.num_frames.tolist()
        bad_rows = self._rows_out_of_codebook(arrays.codes)
        for handle in set(opens).union(closes).difference(handles):
            named = opens[handle].request_id if handle in opens else link.get(handle, "")
            self.reject(identity, named, "INVALID_ARGUMENT", f"stream handle {handle} is opened or closed "
                                                             f"by a FRAMES message that holds no entry for it")
        seen: set[int] = set()
        row = 0
        for handle, seq, count in zip(handles, seqs, counts):
            rows = arrays.codes[row:row + count]
            is_bad = bad_rows is not None and bool(bad_rows[row:row + count].any())
            row += count
            open_, close = opens.get(handle), closes.get(handle)
            try:
                self._apply(identity, link, chunk.talker_id, handle, seq, rows, is_bad, open_, close, seen)
            except EngineError as exc:
                named = open_.request_id if open_ is not None else link.get(handle, "")
                self.reject(identity, named, exc.code, exc.message)

    def on_abort(self, identity: bytes, abort: common_pb2.Abort) -> None:
        route = self.routes.get(abort.request_id)
        if route is not None and route.identity != identity:
            logger.warning("request %s: abort from talker %s ignored, the request belongs to %s",
                           abort.request_id, self.peers.name(identity), self.peers.name(route.identity))
            return
        reason = f"{common_pb2.StatusCode.Name(abort.reason)}: {abort.message}"
        self.engine.abort(abort.request_id, reason)   # idempotent: unknown or finished ids are logged
        self.finish(abort.request_id)

    # ---- per entry -------------------------------------------------------------------------
    def _apply(self, identity: bytes, link: dict[int, str], talker_id: str, handle: int, seq: int,
               rows: np.ndarray, is_bad: bool, open_: vocoder_pb2.FramesOpen | None,
               close: vocoder_pb2.FramesClose | None, seen: set[int]) -> None:
        if handle in seen:
            raise EngineError("INVALID_ARGUMENT", f"stream handle {handle} has more than one entry in one FRAMES message")
        seen.add(handle)
        if open_ is not None:
            rid = self._open(identity, link, talker_id, handle, seq, open_)
        else:
            rid = link.get(handle)
            if rid is None:
                raise EngineError("NOT_FOUND", f"frames for unknown stream handle {handle} (seq {seq}): never "
                                               f"opened on this link, or already closed")
        if is_bad:
            raise EngineError("INVALID_ARGUMENT", f"request {rid!r}: codes must lie in [0, {self.engine.runner.codebook_size}),"
                                                  f" got [{rows.min()}, {rows.max()}]")
        num_before = self._audio_frames_in(rid) if hop_trace.enabled() else None
        self.engine.add_frames(rid, seq, rows, is_final=close is not None,
                               num_context_frames=open_.num_context_frames if open_ is not None else 0,
                               is_checked=True)
        if num_before is not None and num_before < 2:
            # frames 0 and 1 by their index among the audio frames: an entry may carry both, and a
            # clone's first entries carry its voice's context frames
            for index in range(num_before, min(2, self._audio_frames_in(rid))):
                hop_trace.mark(rid, f"v_frames{index}_in")
        if close is not None:
            del link[handle]   # the talker may open a new stream under this handle from the next message on
            if close.HasField("summary") and rid in self.routes:
                self.routes[rid].summary = close.summary

    def _audio_frames_in(self, rid: str) -> int:
        stream = self.engine.streams.get(rid)
        return 0 if stream is None else stream.num_audio_frames_in

    def _open(self, identity: bytes, link: dict[int, str], talker_id: str, handle: int, seq: int,
              open_: vocoder_pb2.FramesOpen) -> str:
        rid = open_.request_id
        self.last_open_handle[identity] = handle   # opened or refused below: no longer on its way
        if not rid:
            raise EngineError("INVALID_ARGUMENT", f"FramesOpen of stream handle {handle} has an empty request_id")
        if seq != 0:
            raise EngineError("INVALID_ARGUMENT", f"request {rid!r}: opened by an entry with seq {seq}, expected 0")
        if handle in link:
            raise EngineError("INVALID_ARGUMENT", f"request {rid!r}: stream handle {handle} is still in use by "
                                                  f"request {link[handle]!r} on this link (handle reuse)")
        if rid in self.routes:
            raise EngineError("ALREADY_EXISTS", f"request {rid!r} is already open on this vocoder")
        if not self.is_accepting():
            raise EngineError("UNAVAILABLE", f"request {rid!r} refused: the vocoder is draining")
        if not open_.reply_to:
            raise EngineError("INVALID_ARGUMENT", f"request {rid!r}: FramesOpen needs reply_to")
        try:
            check_endpoint(open_.reply_to, "reply_to")
        except ValueError as exc:
            raise EngineError("INVALID_ARGUMENT", f"request {rid!r}: {exc}") from None
        self.engine.open(rid, open_.reply_to, talker_id or self.peers.name(identity))
        self.routes[rid] = Route(identity, open_.reply_to, handle)
        link[handle] = rid
        logger.info("request %s opened as stream %d of talker %s, audio to %s", rid, handle,
                    self.peers.name(identity), open_.reply_to)
        return rid

    def _rows_out_of_codebook(self, codes: np.ndarray) -> np.ndarray | None:
        """None when every code is valid (one vectorized pass per message), else a bool per row."""
        # Negative codes wrap to huge values as uint32, so one comparison covers both ends.
        wrapped = codes.astype(np.uint32, copy=False) if codes.dtype == np.int32 else codes.astype(np.uint16, copy=False)
        too_big = wrapped >= self.engine.runner.codebook_size
        if not codes.size or not too_big.any():
            return None
        return too_big.any(axis=1)

    def _by_handle(self, identity: bytes, items, kind: str, name_of: Callable[[Any], str]) -> dict[int, Any]:
        """`items` keyed by handle; every item of a handle named more than once is refused (and dropped)."""
        grouped: dict[int, list] = {}
        for item in items:
            grouped.setdefault(item.handle, []).append(item)
        for handle in [h for h, group in grouped.items() if len(group) > 1]:
            for item in grouped.pop(handle):
                self.reject(identity, name_of(item), "INVALID_ARGUMENT",
                            f"stream handle {handle} has more than one {kind} in one FRAMES message")
        return {handle: group[0] for handle, group in grouped.items()}

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
        self.finish(request_id)
        self.outbox.error_to_gateway(route.reply_to, request_id, code, message)

    def reject_message(self, identity: bytes, request_ids: list[str], message: str) -> None:
        """An undecodable message: fail the requests it names (when known), else a bare ERROR."""
        if not request_ids:
            self.num_rejected_entries += 1
            logger.warning("malformed message from talker %s: %s", self.peers.name(identity), message)
            self.outbox.error_to_talker(identity, "", "INVALID_ARGUMENT", message)
        for rid in dict.fromkeys(request_ids):
            self.reject(identity, rid, "INVALID_ARGUMENT", message)

    def requests_named_by(self, identity: bytes, body: list) -> list[str]:
        """Requests a FRAMES message that failed to decode was about, as far as it can be read: those
        its FramesOpen/FramesClose name, and the sender's streams whose handles the entries frame
        lists (when that frame is what its spec says: uint32 rows of 3). Their frames are lost, so
        they could not go on anyway."""
        try:
            msg_type, header = wire.parse_header(body)
        except ValueError:
            return []
        if msg_type != wire.MessageType.FRAMES:
            return []
        link = self.handles.get(identity, {})
        named = [o.request_id for o in header.opens if o.request_id]
        handles = [c.handle for c in header.closes]
        handles += self._handles_in(header, body)
        named += [link[h] for h in handles if h in link]
        return list(dict.fromkeys(named))

    @staticmethod
    def _handles_in(header: vocoder_pb2.FramesChunk, body: list) -> list[int]:
        width = len(wire.FRAMES_ENTRY_COLUMNS)
        if len(body) < 3 or not header.arrays:
            return []
        spec = header.arrays[0]
        if spec.dtype != common_pb2.DTYPE_UINT32 or len(spec.shape) != 2 or spec.shape[1] != width:
            return []
        try:
            raw = memoryview(body[2]).cast("B")
        except (TypeError, ValueError):
            return []
        if raw.nbytes != spec.shape[0] * width * 4:
            return []
        return np.frombuffer(raw, "<u4").reshape(-1, width)[:, 0].tolist()

    def finish(self, request_id: str) -> Route | None:
        """The request ended (final PCM, error or abort): forget its route and free its handle."""
        route = self.routes.pop(request_id, None)
        if route is not None:
            link = self.handles.get(route.identity)
            if link is not None and link.get(route.handle) == request_id:
                del link[route.handle]
        return route

    def sweep(self) -> None:
        """Drop routes of requests the engine no longer holds (belt and braces against leaks), and
        the handle tables of talkers with no stream left."""
        for rid in [rid for rid in self.routes if rid not in self.engine.streams]:
            self.finish(rid)
        for identity in [i for i, link in self.handles.items() if not link]:
            del self.handles[identity]
        known = set(self.peers.identities())
        for identity in [i for i in self.last_open_handle if i not in known]:
            del self.last_open_handle[identity]

    def streams_by_identity(self) -> dict[bytes, int]:
        counts: dict[bytes, int] = {}
        for route in self.routes.values():
            counts[route.identity] = counts.get(route.identity, 0) + 1
        return counts
