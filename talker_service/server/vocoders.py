"""The talker's links to its vocoders: one DEALER each, liveness and credits from their heartbeats.

A vocoder is healthy once a heartbeat has arrived within `timeout_s` and it is not draining; a
new request goes to the healthy vocoder with the most credits (free slots it announced, less the
streams we opened since). A vocoder that falls silent, restarts (new incarnation) or refuses our
sends is lost: the caller fails every request routed to it with UNAVAILABLE. Sockets use
ZMQ_IMMEDIATE so a send to an endpoint that never connected fails at once instead of queueing.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field

import zmq

from protos.tts.internal.v1 import admin_pb2, common_pb2

logger = logging.getLogger(__name__)


@dataclass
class VocoderLink:
    endpoint: str
    socket: zmq.Socket
    peer_id: str = ""
    last_heartbeat_s: float | None = None   # None: never heard from
    incarnation: int = 0
    is_draining: bool = False
    load: common_pb2.Load = field(default_factory=common_pb2.Load)
    streams: set = field(default_factory=set)          # request ids routed here
    num_opened_since_heartbeat: int = 0
    last_hello_s: float = 0.0                          # our last heartbeat to it while unheard

    @property
    def name(self) -> str:
        return self.peer_id or self.endpoint

    def is_healthy(self, now_s: float, timeout_s: float) -> bool:
        return (self.last_heartbeat_s is not None and now_s - self.last_heartbeat_s <= timeout_s
                and not self.is_draining)

    @property
    def credits(self) -> int:
        return int(self.load.num_slots_total) - int(self.load.num_slots_used) - self.num_opened_since_heartbeat


class VocoderLinks:
    def __init__(self, context: zmq.Context, endpoints: list[str], snd_hwm: int, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.links: list[VocoderLink] = []
        for endpoint in endpoints:
            sock = context.socket(zmq.DEALER)
            sock.setsockopt(zmq.SNDHWM, snd_hwm)
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.IMMEDIATE, 1)
            sock.connect(endpoint)
            self.links.append(VocoderLink(endpoint, sock))
            logger.info("connecting to vocoder %s", endpoint)

    def by_socket(self, sock: zmq.Socket) -> VocoderLink:
        return next(link for link in self.links if link.socket is sock)

    def num_healthy(self, now_s: float) -> int:
        return sum(link.is_healthy(now_s, self.timeout_s) for link in self.links)

    def pick(self, now_s: float) -> VocoderLink | None:
        """The healthy vocoder with the most credits (ties: fewer streams, then list order)."""
        healthy = [link for link in self.links if link.is_healthy(now_s, self.timeout_s)]
        if not healthy:
            return None
        return max(healthy, key=lambda link: (link.credits, -len(link.streams)))

    def heartbeat(self, link: VocoderLink, beat: common_pb2.Heartbeat, now_s: float) -> bool:
        """Record a heartbeat; True when the vocoder restarted (every stream it held is gone)."""
        restarted = bool(link.incarnation and beat.incarnation != link.incarnation)
        if link.last_heartbeat_s is None or restarted:
            logger.info("vocoder %s at %s is up (incarnation %d)", beat.peer_id, link.endpoint, beat.incarnation)
        link.peer_id = beat.peer_id
        link.incarnation = beat.incarnation
        link.is_draining = beat.is_draining
        link.load.CopyFrom(beat.load)
        link.last_heartbeat_s = now_s
        link.num_opened_since_heartbeat = 0
        return restarted

    def expire(self, now_s: float) -> list[VocoderLink]:
        """Vocoders that were healthy and went silent; they stay linked and may come back."""
        lost = []
        for link in self.links:
            if link.last_heartbeat_s is not None and now_s - link.last_heartbeat_s > self.timeout_s:
                logger.warning("vocoder %s lost: silent for %.1f s", link.name, now_s - link.last_heartbeat_s)
                link.last_heartbeat_s = None
                lost.append(link)
        return lost

    def status(self, now_s: float) -> list[admin_pb2.PeerStatus]:
        return [admin_pb2.PeerStatus(
            peer_id=link.peer_id, endpoint=link.endpoint, is_healthy=link.is_healthy(now_s, self.timeout_s),
            last_heartbeat_age_ms=0.0 if link.last_heartbeat_s is None else (now_s - link.last_heartbeat_s) * 1e3,
            num_streams=len(link.streams), load=link.load) for link in self.links]

    def close(self, linger_ms: int) -> None:
        for link in self.links:
            link.socket.close(linger=linger_ms)
