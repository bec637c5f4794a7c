"""The talker's links to its vocoders: one DEALER per resolved address, liveness and credits from heartbeats.

`--vocoders tcp://name:port` may name many vocoders (a headless Service answers one address per
ready pod); `PeerDirectory` re-resolves it off the loop thread and `refresh` applies the changes:
a new address gets its own DEALER (registered in the loop's poller), an address that left DNS is
retired - no new requests, its live streams run on, and the socket closes once it holds none (if it
dies first, `expire` reports it and its requests fail UNAVAILABLE). An address that comes back
before that is simply un-retired.

A vocoder is healthy once a heartbeat has arrived within `timeout_s` and it is neither draining nor
retired; a new request goes to the healthy vocoder with the most credits (free slots it announced,
less the streams we opened since). A vocoder that falls silent, restarts (new incarnation) or
refuses our sends is lost: the caller fails every request routed to it with UNAVAILABLE. Sockets
use ZMQ_IMMEDIATE so a send to an endpoint that never connected fails at once instead of queueing.
"""
from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

import zmq

from protos.tts.internal.v1 import admin_pb2, common_pb2
from service_common.discovery import PeerDirectory, ResolveFn, is_ipv6_endpoint, system_resolve

logger = logging.getLogger(__name__)


@dataclass
class VocoderLink:
    endpoint: str
    socket: zmq.Socket
    peer_id: str = ""
    last_heartbeat_s: float | None = None   # None: never heard from
    incarnation: int = 0
    is_draining: bool = False
    is_retired: bool = False                # gone from DNS: no new work, closed once its streams end
    load: common_pb2.Load = field(default_factory=common_pb2.Load)
    streams: set = field(default_factory=set)          # request ids routed here
    # Routed here but not opened yet (a stream opens with its first frame, possibly long after its
    # START waited for a talker slot): the vocoder's load cannot count them at any heartbeat.
    unopened: set = field(default_factory=set)
    # Handles of the FramesOpen sent here that no heartbeat's load counted yet, oldest first: each
    # holds a slot there already. A heartbeat names the last open it counts (Load.last_open_handle);
    # one that the vocoder took while our opens waited in its socket (a long decode step) must not
    # make their slots look free (the vocoder refused 317 of 1024 Poisson arrivals at 256 streams).
    opens_in_flight: dict = field(default_factory=dict)   # handle -> None, in send order
    # Routed here, let start their prefill (server/admission.py), not opened yet: each will take a slot
    admitted: set = field(default_factory=set)
    last_stream_handle: int = 0             # FramesOpen.handle given to the latest stream opened here

    def new_stream_handle(self) -> int:
        """A handle for a new stream on this link: counts up and wraps within uint32, skipping 0, so
        a handle comes back only after 2**32 - 1 opens (the vocoder refuses one still in use)."""
        self.last_stream_handle = self.last_stream_handle % 0xFFFFFFFF + 1
        return self.last_stream_handle

    @property
    def name(self) -> str:
        return self.peer_id or self.endpoint

    def is_healthy(self, now_s: float, timeout_s: float) -> bool:
        return (self.last_heartbeat_s is not None and now_s - self.last_heartbeat_s <= timeout_s
                and not self.is_draining and not self.is_retired)

    @property
    def _slots_left(self) -> int:
        """Free slots it announced, less the streams we opened there that its load did not count."""
        return int(self.load.num_slots_total) - int(self.load.num_slots_used) - len(self.opens_in_flight)

    @property
    def credits(self) -> int:
        """Slots left less the streams routed here to open later (a new START's choice).
        Counting a stream from its START, and forgetting it at a heartbeat that could not yet hold it,
        overstated the credits of the vocoder just heard from: a burst of STARTs went mostly there."""
        return self._slots_left - len(self.unopened)

    @property
    def free_slots(self) -> int:
        """Slots left less the requests admitted to a prefill that have not opened yet: how many
        more requests routed here may start now (server/admission.py)."""
        return self._slots_left - len(self.admitted)

    def opened(self, request_id: str, handle: int) -> None:
        """The stream's FramesOpen (`handle`) goes out now: the vocoder's load counts it once a
        heartbeat names it, or a later open, as counted."""
        self.unopened.discard(request_id)
        self.admitted.discard(request_id)
        self.opens_in_flight[handle] = None

    def counted_opens(self, last_open_handle: int | None) -> None:
        """A heartbeat's load counts our opens up to `last_open_handle` (ZeroMQ keeps their order; 0:
        none of them yet); None: a vocoder that does not say, whose load is taken to count them all."""
        if last_open_handle is None:
            self.opens_in_flight.clear()
            return
        if last_open_handle not in self.opens_in_flight:   # 0, or named before (or passed by a later open)
            return
        for handle in list(self.opens_in_flight):
            del self.opens_in_flight[handle]
            if handle == last_open_handle:
                break


class VocoderLinks:
    def __init__(self, context: zmq.Context, endpoints: Sequence[str], snd_hwm: int, timeout_s: float, *,
                 poller: zmq.Poller | None = None, resolve_interval_s: float = 5.0,
                 resolve: ResolveFn = system_resolve) -> None:
        """`poller`: where link sockets are registered as vocoders join and unregistered as they
        leave; None leaves polling `links` to the caller (then the set must not change: no refresh)."""
        self.context = context
        self.poller = poller
        self.snd_hwm = snd_hwm
        self.timeout_s = timeout_s
        self.directory = PeerDirectory(endpoints, resolve_interval_s, resolve)
        self.links: list[VocoderLink] = [self._connect(endpoint) for endpoint in self.directory.take_changes({}).joined]
        if poller is not None:
            self.directory.start()

    # ---- membership --------------------------------------------------------------------------
    def refresh(self) -> None:
        """Apply the latest DNS answer; close retired links that hold no stream any more."""
        if self.poller is None:
            raise RuntimeError("VocoderLinks.refresh needs the loop's poller (pass poller=...)")
        # called every loop turn: build the known-peer map only when DNS moved
        changes = self.directory.has_news and self.directory.take_changes(
            {link.endpoint: link.is_retired for link in self.links})
        if changes:
            for link in self.links:
                if link.endpoint in changes.returned:
                    link.is_retired = False
                    logger.info("vocoder %s is back in DNS", link.name)
                elif link.endpoint in changes.left:
                    link.is_retired = True
                    logger.info("vocoder %s left DNS: retired with %d live streams", link.name, len(link.streams))
            self.links += [self._connect(endpoint) for endpoint in changes.joined]
        for link in [link for link in self.links if link.is_retired and not link.streams]:
            self._close(link, linger_ms=0)
            self.links.remove(link)
            logger.info("vocoder %s at %s disconnected", link.name, link.endpoint)

    def _connect(self, endpoint: str) -> VocoderLink:
        sock = self.context.socket(zmq.DEALER)
        sock.setsockopt(zmq.SNDHWM, self.snd_hwm)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.IMMEDIATE, 1)
        if is_ipv6_endpoint(endpoint):
            sock.setsockopt(zmq.IPV6, 1)
        sock.connect(endpoint)
        if self.poller is not None:
            self.poller.register(sock, zmq.POLLIN)
        logger.info("connecting to vocoder %s", endpoint)
        return VocoderLink(endpoint, sock)

    def _close(self, link: VocoderLink, linger_ms: int) -> None:
        if self.poller is not None:
            self.poller.unregister(link.socket)
        link.socket.close(linger=linger_ms)

    # ---- routing -----------------------------------------------------------------------------
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

    # ---- liveness ----------------------------------------------------------------------------
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
        if restarted:   # every open sent to the old process is gone with it
            link.opens_in_flight.clear()
        link.counted_opens(beat.load.last_open_handle if beat.load.HasField("last_open_handle") else None)
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
        self.directory.stop()
        for link in self.links:
            self._close(link, linger_ms)
        self.links = []
