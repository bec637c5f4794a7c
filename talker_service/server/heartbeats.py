"""The heartbeats this talker sends, and their timers, in one place.

Every `interval_ms` one Heartbeat (our load and how many vocoders we can reach) goes to every
gateway and every vocoder: gateways route by it, vocoders judge our requests alive by it. A
gateway heard from for the first time gets one at once. A vocoder not heard from yet gets a hello
every HELLO_INTERVAL_S in between, so it learns our identity (and answers with its credits) within
a fraction of a period instead of a full one.

All of the sending side's state lives here (next period, hellos, incarnation); what it reads is
handed in: the engine's load, the vocoder links, the gateways, whether we are draining. In the
server the periodic beat is driven by a `HeartbeatThread` (`beat_if_due`, under the sockets lock,
with a load snapshot the loop refreshes) so a long engine step never silences the talker; the loop
itself still says hello and may send a due beat first (`tick`): one shared timer, no double beats.
"""
from __future__ import annotations

import secrets
import time
from typing import Callable

from protos import wire
from protos.tts.internal.v1 import common_pb2
from talker_service.server.gateways import GatewayPeers
from talker_service.server.outbox import Outbox
from talker_service.server.vocoders import VocoderLinks

HELLO_INTERVAL_S = 0.1


class Heartbeats:
    def __init__(self, outbox: Outbox, vocoders: VocoderLinks, gateways: GatewayPeers,
                 load: Callable[[], dict], is_draining: Callable[[], bool], *, peer_id: str, model: str,
                 interval_ms: int) -> None:
        self.outbox = outbox
        self.vocoders = vocoders
        self.gateways = gateways
        self.load = load                   # the engine's load as Load fields
        self.is_draining = is_draining
        self.peer_id = peer_id
        self.model = model
        self.interval_ms = interval_ms
        self.incarnation = secrets.randbits(63)   # new per process: peers tell a restart from a hiccup
        self.next_beat_s = 0.0             # monotonic; 0: the first tick beats at once
        self._last_hello_s: dict[str, float] = {}   # vocoder endpoint -> our last hello, unheard ones only

    def beat(self, now_s: float) -> common_pb2.Heartbeat:
        return common_pb2.Heartbeat(
            peer_id=self.peer_id, role=common_pb2.PEER_ROLE_TALKER, incarnation=self.incarnation,
            sent_unix_ms=int(time.time() * 1e3), interval_ms=self.interval_ms, is_draining=self.is_draining(),
            load=common_pb2.Load(**self.load()), model=self.model,
            num_healthy_vocoders=self.vocoders.num_healthy(now_s))

    def greet_gateway(self, identity: bytes, now_s: float) -> None:
        """A new gateway: it learns our load now, not a period from now."""
        self.outbox.to_gateway(identity, wire.MessageType.HEARTBEAT, self.beat(now_s))

    def is_due(self, now_s: float) -> bool:
        return now_s >= self.next_beat_s

    def tick(self, now_s: float) -> None:
        """Once per loop turn: the periodic beat to every peer when due, else hellos."""
        if not self.beat_if_due(now_s):
            self._say_hello(now_s)

    def beat_if_due(self, now_s: float) -> bool:
        """The periodic beat to every gateway and vocoder, if its time has come; True if sent."""
        if not self.is_due(now_s):
            return False
        self.next_beat_s = now_s + self.interval_ms / 1e3
        beat = self.beat(now_s)
        for identity in self.gateways.identities():
            self.outbox.to_gateway(identity, wire.MessageType.HEARTBEAT, beat)
        for link in self.vocoders.links:
            self.outbox.heartbeat_to_vocoder(link, beat)
        return True

    def _say_hello(self, now_s: float) -> None:
        hellos = {}
        for link in self.vocoders.links:
            if link.last_heartbeat_s is not None:
                continue
            last_s = self._last_hello_s.get(link.endpoint, 0.0)
            if now_s - last_s > HELLO_INTERVAL_S:
                self.outbox.heartbeat_to_vocoder(link, self.beat(now_s))
                last_s = now_s
            hellos[link.endpoint] = last_s
        self._last_hello_s = hellos   # vocoders heard from (or gone) are forgotten
