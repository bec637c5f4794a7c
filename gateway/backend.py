"""The gateway's ZeroMQ side: DEALERs to talkers, the PULL socket vocoders push audio to, and the
per-request mailboxes that connect them to gRPC calls.

Everything runs on the gRPC server's asyncio loop (zmq.asyncio), so a request's state is only
touched from one thread. Talkers are tracked by their heartbeats: a talker is healthy while it
sends them, is not draining and reports at least one reachable vocoder; one that goes silent
for `peer_timeout_ms` is lost and every stream it held fails with UNAVAILABLE.

A killed talker is found sooner than that: a socket monitor on each DEALER reports the TCP link
closing (the kernel closes a dead process's sockets at once), and the streams it held fail
UNAVAILABLE naming it then, as the talker's own ZMQ_IMMEDIATE sends find a dead vocoder within a
step. The DEALER reconnects by itself; the talker is back in rotation at its first heartbeat over
the new link. Only streams that handed the talker work (START or ENCODE_VOICE sent) fail: a stream
still collecting its text in the gateway moves to another talker when it starts (`reroute`).

`--talkers tcp://name:port` may stand for many talkers (one DNS record per pod); `PeerDirectory`
re-resolves it off the event loop and `_tick` applies the answer: a new address gets its own
DEALER and receive task, an address gone from DNS is retired (no new requests; heartbeats go on
so its live streams finish) and closed once this gateway has no stream on it.
"""
from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from dataclasses import dataclass, field

import numpy as np
import zmq
import zmq.asyncio
import zmq.utils.monitor

from gateway.audio_intake import AudioIntake
from protos import wire
from protos.tts.internal.v1 import common_pb2
from service_common.discovery import PeerDirectory, ResolveFn, is_ipv6_endpoint, system_resolve
from service_common.startup import bind_zmq
from service_common.zmq_quick import QuickSocket

logger = logging.getLogger(__name__)

MAILBOX_SIZE = 4096    # messages queued for one request before it fails (a client that stops reading)
SNDHWM = 10000


@dataclass
class Event:
    kind: wire.MessageType
    header: object
    array: np.ndarray | None = None


@dataclass
class TalkerPeer:
    endpoint: str
    sock: zmq.asyncio.Socket
    peer_id: str = ""
    model: str = ""
    incarnation: int = 0
    last_seen_s: float = 0.0
    load: common_pb2.Load = field(default_factory=common_pb2.Load)
    num_healthy_vocoders: int = 0
    is_draining: bool = False
    is_retired: bool = False      # gone from DNS: no new requests, closed once num_streams is 0
    is_connected: bool = False    # the TCP link is up (socket monitor); a heartbeat after it is needed too
    num_streams: int = 0          # this gateway's live requests on the talker
    task: asyncio.Task | None = None   # its receive loop and link watch
    monitor: zmq.asyncio.Socket | None = None   # PAIR receiving the DEALER's connect/disconnect events
    quick: QuickSocket = field(init=False)   # `sock` without a future per message when it is ready

    def __post_init__(self) -> None:
        self.quick = QuickSocket(self.sock)

    @property
    def name(self) -> str:
        return f"{self.peer_id or '-'} at {self.endpoint}"

    def is_healthy(self, now_s: float, timeout_s: float) -> bool:
        return (self.is_connected and self.last_seen_s > 0 and now_s - self.last_seen_s < timeout_s
                and not self.is_draining and not self.is_retired and self.num_healthy_vocoders > 0)

    def score(self) -> float:
        total = max(self.load.num_slots_total, 1)
        return (max(self.load.num_slots_used + self.load.num_requests_queued, self.num_streams)) / total


class Mailbox:
    """Messages for one request: ACK/ERROR from its talker, PCM/ERROR from its vocoder."""

    def __init__(self, request_id: str, talker: TalkerPeer | None) -> None:
        self.request_id = request_id
        self.talker = talker
        # the talker holds work of this request (START or ENCODE_VOICE sent): losing it fails the request
        self.is_on_talker = False
        self.queue: asyncio.Queue[Event] = asyncio.Queue(MAILBOX_SIZE)

    def put(self, event: Event) -> None:
        try:
            self.queue.put_nowait(event)
        except asyncio.QueueFull:
            logger.warning("request %s: mailbox full; failing it", self.request_id)
            self.queue = asyncio.Queue(1)   # the reader sees only the error from now on
            self.queue.put_nowait(Event(wire.MessageType.ERROR, common_pb2.Error(
                request_id=self.request_id, code=common_pb2.STATUS_CODE_RESOURCE_EXHAUSTED,
                message="client reads audio slower than it is produced; mailbox full", origin="gateway")))


class Backend:
    def __init__(self, talkers: tuple[str, ...], audio_bind: str, audio_advertise: str = "",
                 heartbeat_interval_ms: int = 1000, peer_timeout_ms: int = 3500, resolve_interval_s: float = 5.0,
                 resolve: ResolveFn = system_resolve) -> None:
        self.context = zmq.asyncio.Context()
        self.peer_id = f"gateway@{socket.gethostname()}:{os.getpid()}"
        self.incarnation = int.from_bytes(os.urandom(8), "little") >> 1
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.peer_timeout_s = peer_timeout_ms / 1e3
        self.pull = self.context.socket(zmq.PULL)
        self.pull.setsockopt(zmq.LINGER, 0)
        self.pull.setsockopt(zmq.RCVHWM, SNDHWM)
        bind_zmq(self.pull, audio_bind, "gateway audio bind endpoint")
        self.pull_quick = QuickSocket(self.pull)
        self.reply_to = audio_advertise or self.pull.getsockopt(zmq.LAST_ENDPOINT).decode()
        self.directory = PeerDirectory(talkers, resolve_interval_s, resolve)
        self.talkers = [self._connect(endpoint) for endpoint in self.directory.take_changes({}).joined]
        self.mailboxes: dict[str, Mailbox] = {}
        self.tasks: list[asyncio.Task] = []
        self.on_health_change = lambda is_serving: None
        self.on_num_healthy_change = lambda num_healthy: None   # healthy talkers (the metrics gauge)
        self.audio = AudioIntake(lambda kind, header, array: self._deliver(Event(kind, header, array), "vocoder"),
                                 self.peer_id)
        self._was_healthy = False
        self._num_healthy = 0
        self._next_pick = 0   # index in self.talkers where the round of tied picks goes on

    def _connect(self, endpoint: str) -> TalkerPeer:
        sock = self.context.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.SNDHWM, SNDHWM)
        if is_ipv6_endpoint(endpoint):
            sock.setsockopt(zmq.IPV6, 1)
        # before connect(), so the first CONNECTED event is not missed
        monitor = sock.get_monitor_socket(zmq.EVENT_CONNECTED | zmq.EVENT_DISCONNECTED)
        sock.connect(endpoint)
        logger.info("connecting to talker %s", endpoint)
        return TalkerPeer(endpoint=endpoint, sock=sock, monitor=monitor)

    def _start_receiving(self, talker: TalkerPeer) -> None:
        talker.task = asyncio.get_running_loop().create_task(self._serve_talker(talker))
        self.tasks.append(talker.task)

    async def _disconnect(self, talker: TalkerPeer) -> None:
        self.talkers.remove(talker)
        if talker.task is not None:
            talker.task.cancel()
            await asyncio.gather(talker.task, return_exceptions=True)
            self.tasks.remove(talker.task)
        talker.sock.disable_monitor()
        talker.monitor.close(linger=0)
        talker.sock.close(linger=0)
        logger.info("talker %s at %s disconnected", talker.peer_id or "-", talker.endpoint)

    async def _apply_directory(self) -> None:
        """Connect talkers that appeared in DNS, retire those that left, close retired idle ones."""
        changes = self.directory.take_changes({t.endpoint: t.is_retired for t in self.talkers})
        if changes is not None:
            for talker in self.talkers:
                if talker.endpoint in changes.returned or talker.endpoint in changes.left:
                    talker.is_retired = talker.endpoint in changes.left
                    logger.info("talker %s %s DNS (%d live streams)", talker.peer_id or talker.endpoint,
                                "left" if talker.is_retired else "is back in", talker.num_streams)
            for endpoint in changes.joined:
                self.talkers.append(self._connect(endpoint))
                self._start_receiving(self.talkers[-1])
        for talker in [t for t in self.talkers if t.is_retired and t.num_streams <= 0]:
            await self._disconnect(talker)

    # ---- lifecycle -----------------------------------------------------------------------
    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self.tasks = [loop.create_task(self._receive_audio()), loop.create_task(self._tick())]
        for talker in self.talkers:
            self._start_receiving(talker)
        self.directory.start()

    async def stop(self) -> None:
        self.directory.stop()
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        self.context.destroy(linger=0)

    # ---- sending -------------------------------------------------------------------------
    async def send(self, talker: TalkerPeer, msg_type: wire.MessageType, header, array=None) -> None:
        await talker.quick.send_multipart(wire.encode(msg_type, header, array), copy=False)

    def open_mailbox(self, request_id: str, talker: TalkerPeer | None) -> Mailbox:
        box = Mailbox(request_id, talker)
        self.mailboxes[request_id] = box
        if talker is not None:
            talker.num_streams += 1
        return box

    def close_mailbox(self, box: Mailbox) -> None:
        if self.mailboxes.pop(box.request_id, None) is not None and box.talker is not None:
            box.talker.num_streams -= 1

    def reroute(self, box: Mailbox) -> TalkerPeer | None:
        """A request the talker holds nothing of yet, whose talker is no longer healthy (lost,
        draining, retired): moved to the least-loaded healthy one; None when there is none."""
        talker = self.pick_talker()
        if talker is not None and box.request_id in self.mailboxes:
            logger.info("request %s: talker %s is not healthy; moved to talker %s before its start",
                        box.request_id, box.talker.name if box.talker else "-", talker.name)
            if box.talker is not None:
                box.talker.num_streams -= 1
            box.talker = talker
            talker.num_streams += 1
        return talker

    def is_usable(self, talker: TalkerPeer) -> bool:
        return talker.is_healthy(time.monotonic(), self.peer_timeout_s)

    # ---- routing -------------------------------------------------------------------------
    def healthy_talkers(self) -> list[TalkerPeer]:
        now_s = time.monotonic()
        return [t for t in self.talkers if t.is_healthy(now_s, self.peer_timeout_s)]

    def pick_talker(self) -> TalkerPeer | None:
        """The least-loaded healthy talker (its heartbeat load, or this gateway's own count of
        streams on it when that is higher: heartbeats lag a burst of new requests). Ties go round
        the list from the one after the last pick: always the first of equals would send every
        stream of a lightly loaded stack (one at a time) to one talker."""
        now_s, n = time.monotonic(), len(self.talkers)
        healthy = [(t.score(), (i - self._next_pick) % n, i) for i, t in enumerate(self.talkers)
                   if t.is_healthy(now_s, self.peer_timeout_s)]
        if not healthy:
            return None
        _, _, i = min(healthy)
        self._next_pick = (i + 1) % n
        return self.talkers[i]

    @property
    def is_serving(self) -> bool:
        return bool(self.healthy_talkers())

    def talker_model(self) -> str:
        return next((t.model for t in self.talkers if t.model), "")

    # ---- receiving -----------------------------------------------------------------------
    def _deliver(self, event: Event, source: str) -> None:
        request_id = getattr(event.header, "request_id", "")
        box = self.mailboxes.get(request_id)
        if box is None:
            logger.debug("%s %s for unknown request %r dropped", source, event.kind.name, request_id)
            return
        box.put(event)

    async def _receive_audio(self) -> None:
        while True:
            await self.pull_quick.receive_batch(self.audio.on_message)

    async def _serve_talker(self, talker: TalkerPeer) -> None:
        await asyncio.gather(self._receive_talker(talker), self._watch_link(talker))

    async def _watch_link(self, talker: TalkerPeer) -> None:
        """The DEALER's link events: a closed link is a lost talker (its streams fail now, not after
        `peer_timeout_ms` of silence); a new link waits for its first heartbeat before new work."""
        num_links = 0
        while True:
            event = zmq.utils.monitor.parse_monitor_message(await talker.monitor.recv_multipart())
            if event["event"] == zmq.EVENT_CONNECTED:
                num_links += 1
                talker.is_connected = True
                if num_links > 1:
                    # A heartbeat read since the link closed may be the dead process's last: wait for
                    # one over this link. (Not on the first link: there every heartbeat is fresh, and
                    # the first is often read before this event, which would cost a heartbeat period.)
                    talker.last_seen_s = 0.0
                logger.info("talker link to %s connected", talker.endpoint)
                self._check_health()
                continue
            talker.is_connected = False
            self._lose_talker(talker, "connection closed")

    async def _receive_talker(self, talker: TalkerPeer) -> None:
        while True:
            await talker.quick.receive_batch(lambda frames: self._on_talker_message(talker, frames))

    def _on_talker_message(self, talker: TalkerPeer, frames: list) -> None:
        try:
            msg_type, header, array = wire.decode(frames)
        except ValueError as exc:
            logger.warning("undecodable message from talker %s: %s", talker.endpoint, exc)
            return
        if msg_type == wire.MessageType.HEARTBEAT:
            self._on_heartbeat(talker, header)
        elif msg_type in (wire.MessageType.ACK, wire.MessageType.ERROR, wire.MessageType.VOICE_ENCODED):
            self._deliver(Event(msg_type, header, array), f"talker {talker.peer_id or talker.endpoint}")

    def _on_heartbeat(self, talker: TalkerPeer, hb: common_pb2.Heartbeat) -> None:
        if talker.incarnation and hb.incarnation != talker.incarnation:
            self._fail_streams(talker, f"talker {hb.peer_id} at {talker.endpoint} restarted")
        if not talker.last_seen_s:
            logger.info("talker %s at %s is up (model %s)", hb.peer_id, talker.endpoint, hb.model)
        talker.peer_id, talker.model, talker.incarnation = hb.peer_id, hb.model, hb.incarnation
        talker.load.CopyFrom(hb.load)
        talker.num_healthy_vocoders = hb.num_healthy_vocoders
        talker.is_draining = hb.is_draining
        talker.last_seen_s = time.monotonic()
        self._check_health()

    def _lose_talker(self, talker: TalkerPeer, why: str) -> None:
        """One loss of `talker` (its link closed, or silent past `peer_timeout_ms`): logged once,
        the streams that handed it work fail UNAVAILABLE naming it, and it stays out of rotation
        until a heartbeat arrives (`last_seen_s` 0, which also keeps the silence check from finding
        the same loss again on every tick)."""
        talker.last_seen_s = 0.0
        logger.warning("talker %s lost: %s (%d live streams)", talker.name, why, talker.num_streams)
        self._fail_streams(talker, f"talker {talker.name} lost: {why}")
        self._check_health()

    def _fail_streams(self, talker: TalkerPeer, why: str) -> None:
        """UNAVAILABLE to each request that handed `talker` work; the others reroute at their start."""
        for box in list(self.mailboxes.values()):
            if box.talker is talker and box.is_on_talker:
                box.put(Event(wire.MessageType.ERROR, common_pb2.Error(
                    request_id=box.request_id, code=common_pb2.STATUS_CODE_UNAVAILABLE, message=why,
                    origin=self.peer_id)))

    def _check_health(self) -> None:
        num_healthy = len(self.healthy_talkers())
        if num_healthy != self._num_healthy:
            self._num_healthy = num_healthy
            self.on_num_healthy_change(num_healthy)
        is_healthy = num_healthy > 0
        if is_healthy != self._was_healthy:
            self._was_healthy = is_healthy
            logger.info("backend %s", "SERVING: a talker with a vocoder is reachable" if is_healthy
                        else "NOT_SERVING: no healthy talker")
            self.on_health_change(is_healthy)

    async def _tick(self) -> None:
        """Heartbeats to every talker (a DEALER's first message also introduces it) and loss checks."""
        last_sent_s = 0.0
        while True:
            now_s = time.monotonic()
            is_due = now_s - last_sent_s >= self.heartbeat_interval_ms / 1e3
            last_sent_s = now_s if is_due else last_sent_s
            hb = common_pb2.Heartbeat(peer_id=self.peer_id, role=common_pb2.PEER_ROLE_GATEWAY,
                                      incarnation=self.incarnation, sent_unix_ms=int(time.time() * 1e3),
                                      interval_ms=self.heartbeat_interval_ms)
            await self._apply_directory()
            for talker in self.talkers:
                try:
                    if is_due:
                        await talker.sock.send_multipart(wire.encode(wire.MessageType.HEARTBEAT, hb), flags=zmq.NOBLOCK)
                except zmq.Again:
                    pass
                if talker.last_seen_s and now_s - talker.last_seen_s > self.peer_timeout_s:
                    self._lose_talker(talker, f"silent for {now_s - talker.last_seen_s:.1f} s")
            self._check_health()
            await asyncio.sleep(min(self.heartbeat_interval_ms / 1e3, 0.25))
