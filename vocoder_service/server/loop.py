"""The vocoder's event loop: receive -> expire -> step -> send, idle when there is nothing to do.

One thread owns the engine and the runner; the ZeroMQ sockets are shared with one more thread,
the periodic heartbeats (`HeartbeatThread`), under `sockets_lock`, which the loop releases only
around the decode step: a long step on a busy CPU then never silences this vocoder. Talkers' DEALERs send FRAMES,
ABORT and HEARTBEAT to our ROUTER (frames: identity, type, header[, codes]); PCM goes out on PUSH
sockets to each request's reply_to; errors and heartbeats (our credits: free slots) go back on
the ROUTER. gRPC admin calls reach the loop through `AdminBridge`.
"""
from __future__ import annotations

import logging
import math
import threading
import time
from typing import Callable

import zmq

from protos import wire
from service_common import hop_trace
from service_common.heartbeat_thread import HeartbeatThread
from service_common.metrics import BusyClock
from vocoder_service.engine.engine import ErrorOut, PcmOut, VocoderEngine
from vocoder_service.engine.step_trace import StepTrace
from vocoder_service.runtime.runner import DecoderRunner
from vocoder_service.server.admin_jobs import AdminBridge, AdminDecodes, AdminJob
from vocoder_service.server.config import VocoderServiceConfig
from vocoder_service.server.intake import FramesIntake
from vocoder_service.server.metrics import DeadlineTotals
from vocoder_service.server.outbox import Outbox
from vocoder_service.server.peers import TalkerPeers
from vocoder_service.server.sockets import PushSockets, bind_router
from vocoder_service.server.stats import ServerStats, engine_load, vocoder_stats

logger = logging.getLogger(__name__)

SHUTDOWN_LINGER_MS = 500


class VocoderServer:
    def __init__(self, config: VocoderServiceConfig, runner: DecoderRunner, model_name: str,
                 admin: AdminBridge | None = None, on_draining: Callable[[], None] | None = None) -> None:
        self.config = config
        self.on_draining = on_draining   # e.g. flip gRPC health to NOT_SERVING
        self.admin = admin if admin is not None else AdminBridge(config.admin_queue_size)
        self.runner = runner
        self.model_name = model_name
        self.peer_id = config.resolved_peer_id()
        self.started_s = time.monotonic()
        self.stop_requested = threading.Event()
        self.init_engine()
        self.init_sockets()
        self.init_handlers()
        self.init_heartbeats()

    def init_engine(self) -> None:
        engine_config = self.config.engine_config(self.runner.samples_per_frame, self.runner.sample_rate_hz)
        self.engine = VocoderEngine(self.runner, engine_config)
        if self.config.step_trace:
            self.engine.trace = StepTrace(self.config.step_trace)
        self.stats = ServerStats()
        self.draining_since_s: float | None = None
        # read by the metrics endpoint's thread (server/metrics.py): time in decoding steps, and the
        # deadline counts GetStats(reset) would otherwise take back
        self.busy = BusyClock(self.config.busy_window_s)
        self.deadline_totals = DeadlineTotals(lambda: self.engine.deadline_stats)

    def init_sockets(self) -> None:
        cfg = self.config
        self.context = zmq.Context()
        self.recv_from_talkers, self.endpoint = bind_router(self.context, cfg.bind, cfg.router_rcv_hwm, cfg.router_snd_hwm)
        self.send_to_gateways = PushSockets(self.context, cfg.pcm_snd_hwm, cfg.max_push_sockets)
        self.outbox = Outbox(self.recv_from_talkers, self.send_to_gateways, self.peer_id, self.model_name,
                             self.runner.sample_rate_hz, cfg.heartbeat_interval_ms)
        self.peers = TalkerPeers(cfg.heartbeat_interval_ms)
        self.poller = zmq.Poller()
        self.poller.register(self.recv_from_talkers, zmq.POLLIN)
        self.poller.register(self.admin.fileno(), zmq.POLLIN)
        self.next_maintenance_s = 0.0
        self.announced_slots_used, self.announced_late = 0, False
        self.announced_open_handles: dict[bytes, int] = {}   # each talker's last open that a heartbeat named
        logger.info("vocoder %s receiving frames on %s", self.peer_id, self.endpoint)

    def init_handlers(self) -> None:
        self.intake = FramesIntake(self.engine, self.outbox, self.peers, lambda: self.draining_since_s is None)
        self.admin_decodes = AdminDecodes(self.engine, self.runner)
        self.handlers = {   # (identity, header, array) per accepted message type
            wire.MessageType.FRAMES: self.intake.on_frames,
            wire.MessageType.ABORT: lambda identity, header, _: self.intake.on_abort(identity, header),
            wire.MessageType.HEARTBEAT: lambda identity, header, _: self.peers.heartbeat(identity, header, time.monotonic()),
        }
        self.admin_handlers = {"stats": self.run_stats_job, "decode": self.admin_decodes.start}

    def init_heartbeats(self) -> None:
        self.sockets_lock = threading.Lock()
        self.latest_load = self.load()   # what the heartbeat thread advertises; refreshed by the loop
        self.latest_open_handles: dict[bytes, int] = {}   # ... with each talker's last open it counts
        self.beats = HeartbeatThread("vocoder", self.config.heartbeat_interval_ms / 1e3,
                                     lambda: self.broadcast_heartbeat(self.latest_load, self.latest_open_handles),
                                     self.sockets_lock, self.config.max_step_stall_s)

    # ---- the loop ----------------------------------------------------------------------------
    def run(self) -> None:
        self.beats.start()
        try:
            while True:
                with self.sockets_lock:
                    if self.should_exit():
                        break
                self.run_once()
        finally:
            self.beats.stop()
            self.close()

    def run_once(self) -> None:
        with self.sockets_lock:
            self.receive(self.idle_timeout_ms())
            self.maintenance()   # right after receive: peers are judged on everything they sent
            self.run_admin_jobs()
            self.emit(self.engine.expire(self.talker_last_heard_s))
        self.busy.begin()
        # the lock is free: heartbeats leave while this decodes; each batch's chunks are sent as soon
        # as it is read back
        outs = self.engine.step(on_outputs=self.emit_locked if self.config.debug_step_delay_s <= 0 else
                                self._slow_sender())
        self.busy.end(worked=bool(outs))   # a step with nothing to send found nothing to do: idle
        with self.sockets_lock:   # one load a turn: the heartbeat thread's snapshot and the credits
            self.latest_load = self.load()
            self.latest_open_handles = dict(self.intake.last_open_handle)
            self.send_credits(self.latest_load)
        self.beats.mark_progress()

    def idle_timeout_ms(self) -> int:
        """0 with work at hand; else until the engine's next stream becomes due (a playback deadline
        comes closer while no frames arrive), at most poll_ms."""
        if any(s.pieces for s in self.admin_decodes.streams.values()):
            return 0
        return math.ceil(self.engine.idle_timeout_s(self.config.poll_ms / 1e3) * 1e3)

    def talker_last_heard_s(self, request_id: str) -> float | None:
        """When the talker owning `request_id` last sent anything; None for admin streams."""
        route = self.intake.routes.get(request_id)
        return None if route is None else self.peers.last_heard_s(route.identity)

    def request_stop(self) -> None:
        """Thread- and signal-safe: the loop starts draining at its next iteration."""
        self.stop_requested.set()

    # ---- receive -----------------------------------------------------------------------------
    def receive(self, timeout_ms: int) -> None:
        polled_s = time.monotonic()
        self.poller.poll(timeout_ms)
        waited_ms = (time.monotonic() - polled_s) * 1e3
        num_received = 0
        for _ in range(self.config.max_messages_per_poll):
            try:
                frames = self.recv_from_talkers.recv_multipart(flags=zmq.NOBLOCK, copy=False)
            except zmq.Again:
                break
            num_received += 1
            self.dispatch(frames[0].bytes, frames[1:])
        if self.engine.trace is not None:
            self.engine.trace.note_receive(num_received, waited_ms)

    def dispatch(self, identity: bytes, body: list) -> None:
        if self.peers.touch(identity, time.monotonic()):
            self.outbox.heartbeat_to_talker(identity, self.load(), self.draining_since_s is not None,
                                            self.intake.last_open_handle.get(identity, 0))
        try:
            msg_type, header, array = wire.decode(body)
        except ValueError as exc:
            self.intake.reject_message(identity, self.intake.requests_named_by(identity, body),
                                       f"malformed message: {exc}")
            return
        handler = self.handlers.get(msg_type)
        if handler is None:
            self.intake.reject_message(identity, [], f"{msg_type.name} is not accepted by a vocoder")
            return
        try:
            handler(identity, header, array)
        except Exception:  # a bug met by one message must not take down every other stream
            logger.exception("%s from talker %s crashed its handler", msg_type.name, self.peers.name(identity))
            self.outbox.error_to_talker(identity, "", "INTERNAL", f"{msg_type.name} handling failed on the vocoder")

    # ---- admin (gRPC) jobs ---------------------------------------------------------------------
    def run_admin_jobs(self) -> None:
        for job in self.admin.take_all():
            try:
                self.admin_handlers[job.kind](job)
            except Exception as exc:  # reported to the caller's gRPC status; the loop goes on
                if not job.future.done():
                    job.future.set_exception(exc)
        self.admin_decodes.feed()
        self.admin_decodes.expire(time.monotonic())

    def run_stats_job(self, job: AdminJob) -> None:
        stats = vocoder_stats(
            peer_id=self.peer_id, model=self.model_name, uptime_s=time.monotonic() - self.started_s,
            engine=self.engine, runner_stats=self.runner.stats, server_stats=self.stats,
            talkers=self.peers.status(time.monotonic(), self.intake.streams_by_identity()),
        )
        if job.payload.reset:
            self.runner.stats.reset_windows()
            self.stats.reset_windows()
            self.deadline_totals.reset(self.engine.reset_deadline_stats)
        job.future.set_result(stats)

    # ---- send ------------------------------------------------------------------------------------
    def _slow_sender(self):
        """emit_locked behind the test hook's sleep, once a step, before its first chunks leave (a
        slow decode)."""
        slept = []

        def send(outs: list[PcmOut | ErrorOut]) -> None:
            if not slept:
                time.sleep(self.config.debug_step_delay_s)
                slept.append(True)
            self.emit_locked(outs)
        return send

    def emit_locked(self, outs: list[PcmOut | ErrorOut]) -> None:
        with self.sockets_lock:
            self.emit(outs)

    def emit(self, outs: list[PcmOut | ErrorOut]) -> None:
        pcm_by_gateway: dict[str | None, list[PcmOut]] = {}   # one PCM message per gateway per step
        for out in outs:
            if self.admin_decodes.owns(out.request_id):
                self.admin_decodes.on_output(out)
            elif isinstance(out, ErrorOut):
                self.send_error(out)
            else:
                pcm_by_gateway.setdefault(out.reply_to, []).append(out)
        for reply_to, chunks in pcm_by_gateway.items():
            self.send_pcm(reply_to, chunks)

    def send_pcm(self, reply_to: str | None, outs: list[PcmOut]) -> None:
        routes = [self.intake.routes.get(out.request_id) for out in outs]
        if hop_trace.enabled():
            for out in outs:
                if out.seq == 0:
                    hop_trace.mark(out.request_id, "v_pcm_out")
        try:
            if not reply_to:
                raise ValueError("no reply_to")
            self.outbox.pcm_to_gateway(reply_to, outs, [r.summary if r is not None else None for r in routes])
        except (zmq.ZMQError, ValueError) as exc:
            # A gateway that does not read must not stall everyone: its requests in this message end here.
            self.stats.num_pcm_send_failures += 1
            for out, route in zip(outs, routes):
                message = f"request {out.request_id!r}: PCM to {reply_to} not sent ({exc}); request failed"
                error = self.engine.fail(out.request_id, "UNAVAILABLE", message)
                if route is not None:
                    self.outbox.error_to_talker(route.identity, out.request_id, "UNAVAILABLE", message)
                self.intake.finish(out.request_id)
                logger.warning("%s%s", message, "" if error else " (already ended)")
            return
        now_s = time.monotonic()
        for out in outs:
            self.stats.record_sent(out, now_s, self.runner.sample_rate_hz)
            if out.is_final:
                self.intake.finish(out.request_id)
                logger.info("request %s finished: %d samples", out.request_id, out.sample_offset + len(out.pcm))

    def send_error(self, error: ErrorOut) -> None:
        route = self.intake.finish(error.request_id)
        self.outbox.error_to_gateway(error.reply_to, error.request_id, error.code, error.message)
        if route is not None:
            self.outbox.error_to_talker(route.identity, error.request_id, error.code, error.message)

    # ---- timers, credits, shutdown -----------------------------------------------------------------
    def load(self):
        return engine_load(self.engine, self.runner.stats)

    def send_credits(self, load) -> None:
        """Credits: talkers learn at once when slots free up, when their opens are counted, and when
        chunks start (or stop) being late, so a talker holding new streams back hears it (the
        heartbeat thread repeats all of it each period). `load`: this turn's (with
        latest_open_handles taken at the same time)."""
        used, is_late = load.num_slots_used, load.num_late_chunks_recent > 0
        # new opens counted: a talker counts its opens as taking a slot until a heartbeat names them,
        # on top of the load it last heard. When streams ended in the same turn as opens arrived,
        # used did not fall, and without this the talker saw the ended streams' slots as taken until
        # the next periodic heartbeat (up to 1 s): at 256 streams 42-59 ready requests waited that long.
        counted = self.latest_open_handles != self.announced_open_handles
        if used < self.announced_slots_used or is_late != self.announced_late or counted:
            self.broadcast_heartbeat(load, self.latest_open_handles)
            self.announced_open_handles = self.latest_open_handles
        self.announced_slots_used, self.announced_late = used, is_late

    def maintenance(self) -> None:
        now = time.monotonic()
        if now < self.next_maintenance_s:
            return
        self.next_maintenance_s = now + self.config.heartbeat_interval_ms / 1e3
        self.peers.expire(now)
        for identity in self.outbox.unreachable:
            self.peers.forget(identity)
        self.outbox.unreachable.clear()
        self.intake.sweep()
        self.peers.prune_heard({route.identity for route in self.intake.routes.values()})
        self.send_to_gateways.prune({s.reply_to for s in self.engine.streams.values() if s.reply_to})

    def broadcast_heartbeat(self, load=None, open_handles: dict[bytes, int] | None = None) -> None:
        """To every known talker; `load` and `open_handles` given by the heartbeat thread (a snapshot
        the loop made: the load and the last FramesOpen of each talker that it counts)."""
        if load is None:
            load, open_handles = self.load(), self.intake.last_open_handle
        is_draining = self.draining_since_s is not None
        for identity in self.peers.identities():
            self.outbox.heartbeat_to_talker(identity, load, is_draining, (open_handles or {}).get(identity, 0))

    def should_exit(self) -> bool:
        if not self.stop_requested.is_set():
            return False
        now = time.monotonic()
        if self.draining_since_s is None:
            self.draining_since_s = now
            logger.info("draining: %d live requests, up to %.1f s", self.engine.num_active, self.config.drain_timeout_s)
            if self.on_draining is not None:
                self.on_draining()
            self.broadcast_heartbeat()
        talker_streams = self.engine.num_active - len(self.admin_decodes.streams)
        if talker_streams > 0 and now - self.draining_since_s < self.config.drain_timeout_s:
            return False
        leftovers = [rid for rid in self.engine.streams if not self.admin_decodes.owns(rid)]
        errors = [self.engine.fail(rid, "UNAVAILABLE", f"request {rid!r}: the vocoder shut down") for rid in leftovers]
        self.emit([error for error in errors if error is not None])
        return True

    def close(self) -> None:
        self.admin_decodes.fail_all("the vocoder is shutting down")
        self.admin.close()
        # Not linger 0 here: the final chunks and the shutdown errors just queued must still leave,
        # but an unreachable peer cannot hold the exit up for more than SHUTDOWN_LINGER_MS.
        self.send_to_gateways.close_all(SHUTDOWN_LINGER_MS)
        self.recv_from_talkers.close(linger=SHUTDOWN_LINGER_MS)
        self.context.term()
        if self.engine.trace is not None:
            self.engine.trace.close()
        logger.info("vocoder loop stopped")

