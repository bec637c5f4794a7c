"""Messages in -> engine calls and route changes: gateways' START, TEXT, END, ABORT, and vocoders'
HEARTBEAT and ERROR. The loop's handler tables point at these methods.

Protocol faults fail only the request named: a duplicate START is refused (ALREADY_EXISTS) and
the live request goes on; TEXT after END (FAILED_PRECONDITION), a TEXT sequence gap (ABORTED)
or an END count mismatch (DATA_LOSS) end that request with the error; TEXT/END for an unknown
request is answered NOT_FOUND; ABORT is idempotent (unknown ids are logged and ignored).
"""
from __future__ import annotations

import logging
import time
from typing import Callable

from protos import wire
from protos.tts.internal.v1 import common_pb2, talker_pb2
from service_common import hop_trace
from service_common.endpoints import check_endpoint
from talker_service.engine import EngineError, TalkerEngine
from talker_service.server.gateways import GatewayPeers
from talker_service.server.outbox import Outbox
from talker_service.server.routes import Route, RouteTable
from talker_service.server.start import StartReader
from talker_service.server.vocoders import VocoderLink, VocoderLinks

logger = logging.getLogger(__name__)


class GatewayIntake:
    def __init__(self, routes: RouteTable, engine: TalkerEngine, vocoders: VocoderLinks, gateways: GatewayPeers,
                 start_reader: StartReader, outbox: Outbox, *, peer_id: str, model_name: str,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.routes = routes
        self.engine = engine
        self.vocoders = vocoders
        self.gateways = gateways
        self.start_reader = start_reader
        self.outbox = outbox
        self.peer_id = peer_id
        self.model_name = model_name
        self.clock = clock

    def on_start(self, identity: bytes, start: talker_pb2.Start) -> None:
        rid = start.request_id
        try:
            if not rid:
                raise EngineError("INVALID_ARGUMENT", "Start.request_id is empty")
            if rid in self.routes:
                # the live request with this id is left alone; only this START is refused
                self.outbox.error_to_gateway(identity, rid, "ALREADY_EXISTS",
                                             f"request {rid!r} is already live on this talker")
                return
            if start.model and start.model != self.model_name:
                raise EngineError("NOT_FOUND", f"request {rid!r}: model {start.model!r} is not served here "
                                               f"(this talker serves {self.model_name!r})")
            try:
                check_endpoint(start.reply_to, "reply_to")
            except ValueError as exc:
                raise EngineError("INVALID_ARGUMENT", f"request {rid!r}: {exc}") from None
            now_s = self.clock()
            vocoder = self.vocoders.pick(now_s)
            if vocoder is None:
                raise EngineError("UNAVAILABLE", f"request {rid!r}: no healthy vocoder")
            prompt, feed, sampling, context = self.start_reader.read(start)
            ahead = self.engine.add_request(rid, prompt, feed, sampling)
            hop_trace.mark(rid, "t_start_in")
        except EngineError as exc:
            logger.warning("request %s refused: %s", rid or "-", exc.message)
            self.outbox.error_to_gateway(identity, rid, exc.code, exc.message)
            return
        deadline_s = None
        if start.deadline_unix_ms:
            deadline_s = now_s + (start.deadline_unix_ms - time.time() * 1e3) / 1e3
        self.routes.add(Route(rid, identity, start.reply_to, vocoder, context, deadline_s, seed=sampling.seed))
        self.outbox.to_gateway(identity, wire.MessageType.ACK, talker_pb2.Ack(
            request_id=rid, talker_id=self.peer_id, vocoder_id=vocoder.name, num_requests_ahead=ahead))
        logger.info("request %s started for gateway %s, vocoder %s (%d ahead)", rid, self.gateways.name(identity),
                    vocoder.name, ahead)

    def _route(self, identity: bytes, request_id: str, what: str) -> Route | None:
        route = self.routes.get(request_id)
        if route is None or route.gateway != identity:
            self.outbox.error_to_gateway(identity, request_id, "NOT_FOUND",
                                         f"{what} for request {request_id!r}, which is not live on this talker")
            return None
        return route

    def on_text(self, identity: bytes, text: talker_pb2.Text) -> None:
        route = self._route(identity, text.request_id, "TEXT")
        if route is None:
            return
        try:
            if route.is_ended:
                raise EngineError("FAILED_PRECONDITION", f"request {text.request_id!r}: TEXT after END")
            if text.seq != route.next_text_seq:
                raise EngineError("ABORTED", f"request {text.request_id!r}: TEXT seq {text.seq}, expected "
                                             f"{route.next_text_seq}")
            if not route.next_text_seq:
                hop_trace.mark(text.request_id, "t_text_in")
            route.next_text_seq += 1
            self.engine.push_text(text.request_id, text.token_ids)
        except EngineError as exc:
            self.routes.fail(text.request_id, exc.code, exc.message)

    def on_end(self, identity: bytes, end: talker_pb2.End) -> None:
        route = self._route(identity, end.request_id, "END")
        if route is None:
            return
        try:
            if route.is_ended:
                raise EngineError("FAILED_PRECONDITION", f"request {end.request_id!r}: END received twice")
            route.is_ended = True
            if end.num_text_messages != route.next_text_seq:
                raise EngineError("DATA_LOSS", f"request {end.request_id!r}: END says {end.num_text_messages} TEXT "
                                               f"messages, {route.next_text_seq} arrived")
            self.engine.end_text(end.request_id)
        except EngineError as exc:
            self.routes.fail(end.request_id, exc.code, exc.message)

    def on_abort(self, identity: bytes, abort: common_pb2.Abort) -> None:
        route = self.routes.get(abort.request_id)
        if route is None or route.gateway != identity:
            logger.info("abort of request %r ignored: not live here", abort.request_id)
            return
        reason = common_pb2.StatusCode.Name(abort.reason or common_pb2.STATUS_CODE_CANCELLED)
        self.routes.abort(abort.request_id, reason.removeprefix("STATUS_CODE_"),
                          abort.message or "aborted by the gateway")


class VocoderIntake:
    """What vocoders tell us: heartbeats (liveness, credits, restarts) and errors of our requests."""

    def __init__(self, vocoders: VocoderLinks, routes: RouteTable, clock: Callable[[], float] = time.monotonic) -> None:
        self.vocoders = vocoders
        self.routes = routes
        self.clock = clock

    def on_heartbeat(self, link: VocoderLink, beat: common_pb2.Heartbeat) -> None:
        if self.vocoders.heartbeat(link, beat, self.clock()):
            self.routes.fail_vocoder(link, "restarted and lost its streams")

    def on_error(self, link: VocoderLink, error: common_pb2.Error) -> None:
        if error.request_id not in link.streams:
            logger.warning("error from vocoder %s: %s", link.name, error.message)
            return
        code = common_pb2.StatusCode.Name(error.code or common_pb2.STATUS_CODE_UNKNOWN)
        self.routes.fail(error.request_id, code.removeprefix("STATUS_CODE_"),
                         f"vocoder {link.name}: {error.message}", notify_vocoder=False)
