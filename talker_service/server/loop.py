"""The talker's event loop: receive -> admin jobs -> step -> emit -> housekeeping, idle when
nothing can run.

One thread owns the engine; the ZeroMQ sockets (the ROUTER gateways connect to, one DEALER per
vocoder) are shared with one more thread, the periodic heartbeats (`HeartbeatThread`), under
`sockets_lock`, which the loop releases only around the engine step: a long step on a busy CPU
never silences this talker, and peers are judged right after a receive, on all they sent. Messages go through handler tables keyed by message type to components that
own their state and are handed what they need; none of them sees this class:
- `GatewayIntake` (START admitted to the engine's queue, TEXT, END, ABORT), `VocoderIntake`
  (vocoder heartbeats and errors), `VoiceRequests` (ENCODE_VOICE, on a worker thread);
- `RouteTable`: every live request's route, and the one place requests are ended;
- `Emitter`: each step's frames as one FRAMES message per vocoder;
- `Housekeeping` (liveness, deadlines) and `Heartbeats` (what we send, and when);
- `AdminJobs` / `AdminGenerations`: gRPC admin calls run on this thread.
"""
from __future__ import annotations

import logging
import threading
import time

import zmq

from protos import wire
from service_common.heartbeat_thread import HeartbeatThread
from service_common.metrics import BusyClock
from service_common.startup import bind_zmq
from talker_service.engine import TalkerEngine
from talker_service.engine.stats import HOST_PHASES
from talker_service.server.admin_jobs import AdminGenerations, AdminJobs, Job
from talker_service.server.config import TalkerServiceConfig
from talker_service.server.emit import Emitter
from talker_service.server.gateways import GatewayPeers
from talker_service.server.heartbeats import Heartbeats
from talker_service.server.housekeeping import Housekeeping
from talker_service.server.intake import GatewayIntake, VocoderIntake
from talker_service.server.outbox import Outbox
from talker_service.server.routes import RouteTable
from talker_service.server.start import StartReader
from talker_service.server.stats import talker_stats
from talker_service.server.admission import Admission
from talker_service.server.vocoders import VocoderLink, VocoderLinks
from talker_service.server.voice_jobs import VoiceEncoding, VoiceRequests

logger = logging.getLogger(__name__)

SHUTDOWN_LINGER_MS = 500
# gateway messages handled per look while the loop waits for the device: the device is asked again
# after each batch, so the loop returns to it at most one batch late
WAIT_INTAKE_BATCH = 32


class TalkerServer:
    def __init__(self, config: TalkerServiceConfig, engine: TalkerEngine, model_name: str,
                 start_reader: StartReader, admin: AdminJobs | None = None,
                 voices: VoiceEncoding | None = None) -> None:
        self.config = config
        self.engine = engine
        self.model_name = model_name
        self.admin = admin if admin is not None else AdminJobs()
        # ENCODE_VOICE; without one (no checkpoint given) every request is refused FAILED_PRECONDITION
        self.voices = voices if voices is not None else VoiceEncoding(None, engine.vocab.model_type, model_name, 0)
        self.peer_id = config.resolved_peer_id()
        self.started_s = time.monotonic()
        self.stop_requested = threading.Event()
        # time in engine steps (prefill + decode), read by the metrics endpoint's thread (server/metrics.py)
        self.busy = BusyClock(config.busy_window_s)
        self.init_sockets()
        self.init_components(start_reader)
        self.init_handlers()
        self.init_heartbeat_thread()
        self._is_in_wait_intake = False
        if config.intake_in_device_wait:
            self.engine.runner.wait_clock.while_waiting = self.receive_while_waiting

    def init_sockets(self) -> None:
        cfg = self.config
        self.context = zmq.Context()
        self.recv_from_gateways = self.context.socket(zmq.ROUTER)
        self.recv_from_gateways.setsockopt(zmq.RCVHWM, cfg.router_rcv_hwm)
        self.recv_from_gateways.setsockopt(zmq.SNDHWM, cfg.router_snd_hwm)
        self.recv_from_gateways.setsockopt(zmq.LINGER, 0)
        # a send to a gateway that went away raises EHOSTUNREACH instead of vanishing silently
        self.recv_from_gateways.setsockopt(zmq.ROUTER_MANDATORY, 1)
        bind_zmq(self.recv_from_gateways, cfg.bind, "talker bind endpoint")
        self.endpoint = self.recv_from_gateways.getsockopt_string(zmq.LAST_ENDPOINT)
        self.poller = zmq.Poller()
        self.poller.register(self.recv_from_gateways, zmq.POLLIN)
        # registers (and later unregisters) one DEALER per vocoder address in the poller itself
        self.vocoders = VocoderLinks(self.context, cfg.vocoder_endpoints(), cfg.vocoder_snd_hwm, cfg.vocoder_timeout_s,
                                     poller=self.poller, resolve_interval_s=cfg.resolve_interval_s)
        self.gateways = GatewayPeers(cfg.gateway_timeout_s)
        self.outbox = Outbox(self.recv_from_gateways, self.peer_id)
        logger.info("talker %s receiving requests on %s", self.peer_id, self.endpoint)

    def init_components(self, start_reader: StartReader) -> None:
        cfg = self.config
        self.routes = RouteTable(self.engine, self.outbox, self.gateways)
        self.latest_load = self.engine.load()   # what heartbeats advertise; the loop refreshes it
        self.heartbeats = Heartbeats(self.outbox, self.vocoders, self.gateways, lambda: self.latest_load,
                                     self.stop_requested.is_set, peer_id=self.peer_id, model=self.model_name,
                                     interval_ms=cfg.heartbeat_interval_ms)
        self.intake = GatewayIntake(self.routes, self.engine, self.vocoders, self.gateways, start_reader, self.outbox,
                                    peer_id=self.peer_id, model_name=self.model_name)
        self.vocoder_intake = VocoderIntake(self.vocoders, self.routes)
        self.voice_requests = VoiceRequests(self.voices, self.outbox)
        self.emitter = Emitter(self.routes, self.outbox)
        self.generations = AdminGenerations(self.routes, self.engine)
        self.housekeeping = Housekeeping(self.vocoders, self.gateways, self.routes, self.heartbeats,
                                         gateway_check_interval_s=cfg.heartbeat_interval_ms / 1e3)
        # queued requests start only into free vocoder slots, and wait while a vocoder is behind
        self.admission = Admission(self.vocoders, self._vocoder_of, self.engine.oldest_ready_arrival_s,
                                   cfg.deadline_hold_ms / 1e3, describe_talker=self.engine.describe_queue)
        self.engine.admission = self.admission

    def _vocoder_of(self, request_id: str) -> VocoderLink | None:
        route = self.routes.get(request_id)
        return None if route is None else route.vocoder

    def init_handlers(self) -> None:
        intake = self.intake
        self.gateway_handlers = {   # (identity, header, array) per accepted message type
            wire.MessageType.START: lambda identity, start, _: intake.on_start(identity, start),
            wire.MessageType.TEXT: lambda identity, text, _: intake.on_text(identity, text),
            wire.MessageType.END: lambda identity, end, _: intake.on_end(identity, end),
            wire.MessageType.ABORT: lambda identity, abort, _: intake.on_abort(identity, abort),
            wire.MessageType.HEARTBEAT: lambda identity, beat, _: self.gateways.heartbeat(identity, beat),
            wire.MessageType.ENCODE_VOICE: self.voice_requests.on_encode_voice,   # its array: the audio
        }
        self.vocoder_handlers = {   # (link, header); other types from a vocoder are ignored
            wire.MessageType.HEARTBEAT: self.vocoder_intake.on_heartbeat,
            wire.MessageType.ERROR: self.vocoder_intake.on_error,
        }
        self.admin_handlers = {"stats": self.run_stats_job, "generate": self.generations.start,
                               "cancel": self.generations.cancel}

    def init_heartbeat_thread(self) -> None:
        self.sockets_lock = threading.Lock()
        self.beats = HeartbeatThread("talker", self.config.heartbeat_interval_ms / 1e3,
                                     lambda: self.heartbeats.beat_if_due(time.monotonic()), self.sockets_lock,
                                     self.config.max_step_stall_s)

    # ---- the loop ----------------------------------------------------------------------------
    def run(self) -> None:
        self.beats.start()
        try:
            while not self.stop_requested.is_set():
                self.run_once()
        finally:
            self.beats.stop()
            self.close()

    def run_once(self) -> None:
        phases = _PhaseClock(self.engine.runner.wait_clock)
        with self.sockets_lock:
            self.receive(self.idle_timeout_ms())
            self.housekeeping.run(time.monotonic())   # right after receive: peers judged on all they sent
            self.run_admin_jobs()
            phases.lap("intake")
            can_step = self.engine.has_runnable()
            if can_step:   # clones that start now get their vocoder primed during this step
                self.emitter.open_primed(self.engine.admit())
            phases.lap("admit")
        if can_step:
            self.busy.begin()
            # the lock is free while the engine runs: heartbeats leave meanwhile
            first_frames = self.engine.prefill_phase()
            if first_frames:   # new streams' first frames go to the vocoders before the decode step
                with self.sockets_lock:
                    self.emitter.emit(first_frames)
            phases.lap("prefill")
            outs = self.engine.decode_phase()
            if self.config.debug_step_delay_s > 0:
                time.sleep(self.config.debug_step_delay_s)
            self.busy.end()
            phases.lap("decode")
        with self.sockets_lock:
            if can_step:
                self.emitter.emit(outs)
            self.voice_requests.send_answers()
            self.latest_load = self.engine.load()
        self.beats.mark_progress()
        phases.lap("emit")
        if can_step:   # host time: the iteration less its device waits (debug_step_delay_s counts as host)
            self.engine.stats.add_host_time(phases.total_ms, phases.laps_ms, self.engine.launched_bucket)

    def idle_timeout_ms(self) -> int:
        """No wait while a step can run; else until a message, bounded for timers and admin jobs."""
        return 0 if self.engine.has_runnable() else self.config.poll_ms

    def request_stop(self) -> None:
        """Thread- and signal-safe: the loop stops at its next turn."""
        self.stop_requested.set()

    # ---- receive -----------------------------------------------------------------------------
    def receive(self, timeout_ms: int) -> None:
        ready = dict(self.poller.poll(timeout_ms))
        # Vocoders first: after a long step their heartbeats wait here, and a START read before
        # them would judge every vocoder on stale news ("no healthy vocoder").
        for link in self.vocoders.links:
            if link.socket in ready:
                self.receive_from_vocoder(link)
        self.receive_from_gateways(self.config.max_messages_per_poll)

    def receive_from_gateways(self, max_messages: int) -> int:
        """The gateway messages already queued, at most `max_messages`, dispatched; -> how many."""
        for num_read in range(max_messages):
            try:
                frames = self.recv_from_gateways.recv_multipart(flags=zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return num_read
            self.dispatch_gateway(frames[0].bytes, frames[1:])
        return max_messages

    def receive_while_waiting(self) -> bool:
        """While the engine waits for a read-back (the sockets' lock is free then): the vocoders'
        messages, then up to WAIT_INTAKE_BATCH gateway messages already queued. In a wave of
        word-by-word calls the gateways send ~30 messages a stream, more than the turns between
        steps took: at 256 streams on an H200 a START reached the engine 127 ms (p95) after the
        gateway sent it, 41 ms with this (issue #36). The engine's phases tolerate what the
        handlers do (a request queued, text added, a request ended while its rows are on the
        device: read back and dropped, as for an abort between async decode steps).
        -> True when it read gateway messages (look again)."""
        if self._is_in_wait_intake:   # a handler that waited on the device itself: no nesting
            return False
        self._is_in_wait_intake = True
        try:
            with self.sockets_lock:
                for link in self.vocoders.links:   # as receive(): vocoders first, so STARTs see fresh news
                    self.receive_from_vocoder(link)
                return self.receive_from_gateways(WAIT_INTAKE_BATCH) > 0
        finally:
            self._is_in_wait_intake = False

    def dispatch_gateway(self, identity: bytes, body: list) -> None:
        now_s = time.monotonic()
        if self.gateways.touch(identity, now_s):
            self.heartbeats.greet_gateway(identity, now_s)
        try:
            msg_type, header, array = wire.decode(body)
        except ValueError as exc:
            self.outbox.error_to_gateway(identity, "", "INVALID_ARGUMENT", f"malformed message: {exc}")
            return
        handler = self.gateway_handlers.get(msg_type)
        if handler is None:
            self.outbox.error_to_gateway(identity, getattr(header, "request_id", ""), "UNIMPLEMENTED",
                                         f"{msg_type.name} is not accepted by this talker")
            return
        try:
            handler(identity, header, array)
        except Exception:   # one bad message must not take down every other stream
            logger.exception("%s from gateway %s crashed its handler", msg_type.name, self.gateways.name(identity))
            rid = getattr(header, "request_id", "")
            if rid in self.routes:
                self.routes.fail(rid, "INTERNAL", f"{msg_type.name} handling failed on the talker")

    def receive_from_vocoder(self, link: VocoderLink) -> None:
        for _ in range(self.config.max_messages_per_poll):
            try:
                msg_type, header, _ = wire.decode(link.socket.recv_multipart(flags=zmq.NOBLOCK))
            except zmq.Again:
                return
            except ValueError as exc:
                logger.warning("malformed message from vocoder %s: %s", link.name, exc)
                continue
            handler = self.vocoder_handlers.get(msg_type)
            try:
                if handler is not None:
                    handler(link, header)
            except Exception:   # as for gateways: the loop and every other stream go on
                logger.exception("%s from vocoder %s crashed its handler", msg_type.name, link.name)

    # ---- admin (gRPC) jobs ---------------------------------------------------------------------
    def run_admin_jobs(self) -> None:
        for job in self.admin.take_all():
            try:
                self.admin_handlers[job.kind](job)
            except Exception as exc:   # reported to the gRPC caller; the loop goes on
                logger.exception("admin %s job failed", job.kind)
                job.replies.put(exc)

    def run_stats_job(self, job: Job) -> None:
        now_s = time.monotonic()
        job.replies.put(talker_stats(self.engine, self.vocoders, self.gateways, self.voices, peer_id=self.peer_id,
                                     model=self.model_name, uptime_s=now_s - self.started_s, now_s=now_s,
                                     reset=job.payload))

    # ---- shutdown ----------------------------------------------------------------------------
    def close(self) -> None:
        self.routes.fail_all("the talker shut down")
        self.admin.close()
        self.voices.close()
        # the shutdown errors just queued get SHUTDOWN_LINGER_MS to leave, no more
        self.vocoders.close(linger_ms=SHUTDOWN_LINGER_MS)
        self.recv_from_gateways.close(linger=SHUTDOWN_LINGER_MS)
        self.context.term()
        logger.info("talker loop stopped")


IN_WAIT_PHASE = HOST_PHASES[-1]   # "intake_in_wait"


class _PhaseClock:
    """Host time of the loop's phases: wall time since the previous lap less the device waits
    `wait_clock` recorded meanwhile (the engine's read-backs), per phase and in total. Messages read
    inside those waits (receive_while_waiting) are host time of a phase of their own, IN_WAIT_PHASE."""

    def __init__(self, wait_clock) -> None:
        self.wait_clock = wait_clock
        self.laps_ms: dict[str, float] = {IN_WAIT_PHASE: 0.0}
        self.total_ms = 0.0
        self._last_s = time.perf_counter()
        self._last_wait_s, self._last_worked_s = wait_clock.total_s, wait_clock.worked_s

    def lap(self, phase: str) -> None:
        now_s, waited_s, worked_s = time.perf_counter(), self.wait_clock.total_s, self.wait_clock.worked_s
        worked_ms = (worked_s - self._last_worked_s) * 1e3
        host_ms = max(0.0, ((now_s - self._last_s) - (waited_s - self._last_wait_s)) * 1e3 - worked_ms)
        self.laps_ms[phase] = host_ms
        self.laps_ms[IN_WAIT_PHASE] += worked_ms
        self.total_ms += host_ms + worked_ms
        self._last_s, self._last_wait_s, self._last_worked_s = now_s, waited_s, worked_s
