"""The talker's event loop: receive -> step -> emit -> housekeeping, idle when nothing can run.

One thread owns the engine and every ZeroMQ socket: the ROUTER gateways connect to, and one
DEALER per vocoder. Each step's frames are sent as one FRAMES message per vocoder. gRPC admin
calls reach the loop through `AdminJobs`.

This module owns the sockets, the loop and request ending; beside it `intake` handles gateway
requests, `emit` routes each step's outputs, `housekeeping` runs the timers.
"""
from __future__ import annotations

import logging
import threading
import time

import zmq

from protos import wire
from protos.tts.internal.v1 import common_pb2, talker_pb2
from talker_service.engine import EngineError, ErrorOut, FramesOut, TalkerEngine
from talker_service.server.admin_jobs import AdminJobs
from talker_service.server.config import TalkerServiceConfig
from talker_service.server.emit import emit_outputs
from talker_service.server.gateways import GatewayPeers
from talker_service.server.housekeeping import HELLO_INTERVAL_S, run_housekeeping
from talker_service.server.intake import GatewayIntake
from talker_service.server.outbox import Outbox
from talker_service.server.routes import Route
from talker_service.server.start import StartReader
from talker_service.server.stats import talker_stats
from talker_service.server.summary import FINISH_REASONS, summary_of
from talker_service.server.vocoders import VocoderLink, VocoderLinks
from talker_service.server.voice_jobs import VoiceEncoding

# HELLO_INTERVAL_S, FINISH_REASONS, summary_of moved out; re-exported as admin.py imports from here.
__all__ = ["FINISH_REASONS", "HELLO_INTERVAL_S", "TalkerServer", "summary_of"]

logger = logging.getLogger(__name__)


class TalkerServer:
    def __init__(self, config: TalkerServiceConfig, engine: TalkerEngine, model_name: str,
                 start_reader: StartReader, admin: AdminJobs | None = None,
                 voices: VoiceEncoding | None = None) -> None:
        self.config = config
        self.engine = engine
        self.model_name = model_name
        self.start_reader = start_reader
        self.admin = admin if admin is not None else AdminJobs()
        # ENCODE_VOICE; without one (no checkpoint given) every request is refused FAILED_PRECONDITION
        self.voices = voices if voices is not None else VoiceEncoding(None, engine.vocab.model_type, model_name, 0)
        self.peer_id = config.resolved_peer_id()
        self.started_s = time.monotonic()
        self.stop_requested = threading.Event()
        self.routes: dict[str, Route] = {}
        self.init_sockets()
        self.init_handlers()

    def init_sockets(self) -> None:
        cfg = self.config
        self.context = zmq.Context()
        self.recv_from_gateways = self.context.socket(zmq.ROUTER)
        self.recv_from_gateways.setsockopt(zmq.RCVHWM, cfg.router_rcv_hwm)
        self.recv_from_gateways.setsockopt(zmq.SNDHWM, cfg.router_snd_hwm)
        self.recv_from_gateways.setsockopt(zmq.LINGER, 0)
        self.recv_from_gateways.setsockopt(zmq.ROUTER_MANDATORY, 1)
        self.recv_from_gateways.bind(cfg.bind)
        self.endpoint = self.recv_from_gateways.getsockopt_string(zmq.LAST_ENDPOINT)
        self.poller = zmq.Poller()
        self.poller.register(self.recv_from_gateways, zmq.POLLIN)
        # registers (and later unregisters) one DEALER per vocoder address in the poller itself
        self.vocoders = VocoderLinks(self.context, cfg.vocoder_endpoints(), cfg.vocoder_snd_hwm, cfg.vocoder_timeout_s,
                                     poller=self.poller, resolve_interval_s=cfg.resolve_interval_s)
        self.gateways = GatewayPeers(cfg.gateway_timeout_s)
        self.outbox = Outbox(self.recv_from_gateways, self.peer_id, self.model_name, cfg.heartbeat_interval_ms)
        self.next_heartbeat_s = 0.0
        logger.info("talker %s receiving requests on %s", self.peer_id, self.endpoint)

    def init_handlers(self) -> None:
        self.intake = GatewayIntake(self)
        self.gateway_handlers = {
            wire.MessageType.START: self.intake.on_start,
            wire.MessageType.TEXT: self.intake.on_text,
            wire.MessageType.END: self.intake.on_end,
            wire.MessageType.ABORT: self.intake.on_abort,
            wire.MessageType.HEARTBEAT: self.gateways.heartbeat,
        }

    # ---- the loop ----------------------------------------------------------------------------
    def run(self) -> None:
        try:
            while not self.stop_requested.is_set():
                self.run_once()
        finally:
            self.close()

    def run_once(self) -> None:
        self.receive(0 if self.engine.has_runnable() else self.config.poll_ms)
        self.answer_voices()
        self.admin.run(self)
        if self.engine.has_runnable():
            self.emit(self.engine.step())
        self.housekeeping()

    def request_stop(self) -> None:
        self.stop_requested.set()

    # ---- receive -----------------------------------------------------------------------------
    def receive(self, timeout_ms: int) -> None:
        ready = dict(self.poller.poll(timeout_ms))
        for _ in range(self.config.max_messages_per_poll):
            try:
                frames = self.recv_from_gateways.recv_multipart(flags=zmq.NOBLOCK, copy=False)
            except zmq.Again:
                break
            self.from_gateway(frames[0].bytes, frames[1:])
        for link in self.vocoders.links:
            if link.socket in ready:
                self.from_vocoder(link)

    def from_gateway(self, identity: bytes, body: list) -> None:
        if self.gateways.touch(identity, time.monotonic()):
            self.outbox.to_gateway(identity, wire.MessageType.HEARTBEAT, self.heartbeat())
        try:
            msg_type, header, array = wire.decode(body)
        except ValueError as exc:
            self.outbox.error_to_gateway(identity, "", "INVALID_ARGUMENT", f"malformed message: {exc}")
            return
        if msg_type == wire.MessageType.ENCODE_VOICE:   # the only gateway message with an array frame
            self.encode_voice(identity, header, array)
            return
        handler = self.gateway_handlers.get(msg_type)
        if handler is None:
            self.outbox.error_to_gateway(identity, getattr(header, "request_id", ""), "UNIMPLEMENTED",
                                         f"{msg_type.name} is not accepted by this talker")
            return
        try:
            handler(identity, header)
        except Exception:   # one bad message must not take down every other stream
            logger.exception("%s from gateway %s crashed its handler", msg_type.name, self.gateways.name(identity))
            rid = getattr(header, "request_id", "")
            if rid in self.routes:
                self.fail_request(rid, "INTERNAL", f"{msg_type.name} handling failed on the talker")

    def from_vocoder(self, link: VocoderLink) -> None:
        for _ in range(self.config.max_messages_per_poll):
            try:
                msg_type, header, _ = wire.decode(link.socket.recv_multipart(flags=zmq.NOBLOCK))
            except zmq.Again:
                return
            except ValueError as exc:
                logger.warning("malformed message from vocoder %s: %s", link.name, exc)
                continue
            if msg_type == wire.MessageType.HEARTBEAT:
                if self.vocoders.heartbeat(link, header, time.monotonic()):
                    self.fail_vocoder(link, "restarted and lost its streams")
            elif msg_type == wire.MessageType.ERROR and header.request_id in link.streams:
                code = common_pb2.StatusCode.Name(header.code or common_pb2.STATUS_CODE_UNKNOWN)
                self.fail_request(header.request_id, code.removeprefix("STATUS_CODE_"),
                                  f"vocoder {link.name}: {header.message}", notify_vocoder=False)
            elif msg_type == wire.MessageType.ERROR:
                logger.warning("error from vocoder %s: %s", link.name, header.message)

    # ---- voice cloning (ENCODE_VOICE) --------------------------------------------------------------
    def encode_voice(self, identity: bytes, request: talker_pb2.EncodeVoice, audio) -> None:
        try:
            self.voices.submit(identity, request, audio)
        except EngineError as exc:
            logger.warning("request %s: ENCODE_VOICE refused: %s", request.request_id or "-", exc.message)
            self.outbox.error_to_gateway(identity, request.request_id, exc.code, exc.message)

    def answer_voices(self) -> None:
        for answer in self.voices.take_finished():
            if answer.error is not None:
                self.outbox.error_to_gateway(answer.identity, answer.request_id, answer.error.code,
                                             answer.error.message)
            else:
                self.outbox.to_gateway(answer.identity, wire.MessageType.VOICE_ENCODED, answer.encoded)

    # ---- emit ------------------------------------------------------------------------------------
    def emit(self, outs: list[FramesOut | ErrorOut]) -> None:
        emit_outputs(self, outs)

    # ---- ending requests -------------------------------------------------------------------------
    def forget(self, route: Route) -> None:
        self.routes.pop(route.request_id, None)
        if route.vocoder is not None:
            route.vocoder.streams.discard(route.request_id)
        peer = self.gateways.peers.get(route.gateway) if route.gateway is not None else None
        if peer is not None:
            peer.requests.discard(route.request_id)

    def end_route(self, route: Route, code: str, message: str, notify_vocoder: bool = True) -> None:
        """The request ends with an error: tell its gateway (or admin caller) and its vocoder."""
        self.forget(route)
        if route.sink is not None:
            route.sink.put(ErrorOut(route.request_id, code, message))
            return
        self.outbox.error_to_gateway(route.gateway, route.request_id, code, message)
        if notify_vocoder and route.vocoder is not None:
            self.outbox.abort_to_vocoder(route.vocoder, route.request_id, code, message)

    def fail_request(self, request_id: str, code: str, message: str, notify_vocoder: bool = True) -> None:
        route = self.routes.get(request_id)
        logger.warning("request %s failed (%s): %s", request_id, code, message)
        self.engine.fail(request_id, code, message)
        if route is not None:
            self.end_route(route, code, message, notify_vocoder)

    def abort_request(self, request_id: str, reason: str, message: str) -> None:
        route = self.routes.get(request_id)
        self.engine.abort(request_id)
        if route is not None:
            self.forget(route)
            if route.vocoder is not None:
                self.outbox.abort_to_vocoder(route.vocoder, request_id, reason, message)

    def fail_vocoder(self, link: VocoderLink, why: str) -> None:
        rids = sorted(link.streams)
        logger.warning("vocoder %s %s: failing %d requests with UNAVAILABLE", link.name, why, len(rids))
        for rid in rids:
            self.fail_request(rid, "UNAVAILABLE", f"request {rid!r}: vocoder {link.name} {why}", notify_vocoder=False)

    # ---- timers ------------------------------------------------------------------------------------
    def heartbeat(self) -> common_pb2.Heartbeat:
        load = common_pb2.Load(**self.engine.load())
        return self.outbox.heartbeat(load, self.vocoders.num_healthy(time.monotonic()),
                                     is_draining=self.stop_requested.is_set())

    def housekeeping(self) -> None:
        run_housekeeping(self)

    def stats(self, reset: bool = False):
        return talker_stats(self, reset)

    def close(self) -> None:
        for rid in list(self.routes):
            self.fail_request(rid, "UNAVAILABLE", f"request {rid!r}: the talker shut down")
        self.admin.close()
        self.voices.close()
        self.vocoders.close(linger_ms=500)
        self.recv_from_gateways.close(linger=500)
        self.context.term()
        logger.info("talker loop stopped")


