"""Talkers connected to this vocoder, as seen through their heartbeats and messages.

A ROUTER can only address a peer it has heard from, so the registry is keyed by the ZeroMQ
routing identity. Any message refreshes liveness; a peer silent for `MISSED_PERIODS` of its
heartbeat period is dropped from the registry. When each talker was last heard from is kept
apart (and outlives that drop) because the engine judges every live request by its talker's
silence, not its own: a request parked on streamed text stays alive while its talker heartbeats.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field

from protos.tts.internal.v1 import admin_pb2, common_pb2

logger = logging.getLogger(__name__)

MISSED_PERIODS = 3


@dataclass
class TalkerPeer:
    identity: bytes
    peer_id: str                         # its Heartbeat.peer_id, or the identity in hex until one arrives
    last_seen_s: float
    interval_ms: int = 0                 # its heartbeat period (0: none received yet)
    incarnation: int = 0
    is_draining: bool = False
    load: common_pb2.Load = field(default_factory=common_pb2.Load)


class TalkerPeers:
    def __init__(self, default_interval_ms: int) -> None:
        self.default_interval_ms = default_interval_ms
        self._peers: dict[bytes, TalkerPeer] = {}
        self._last_heard_s: dict[bytes, float] = {}   # identity -> monotonic time of its last message

    def touch(self, identity: bytes, now_s: float) -> bool:
        """Record traffic from `identity`; True when it is a new peer (send it a heartbeat at once)."""
        self._last_heard_s[identity] = now_s
        peer = self._peers.get(identity)
        if peer is None:
            self._peers[identity] = TalkerPeer(identity, identity.hex(), now_s)
            logger.info("talker connected (identity %s)", identity.hex())
            return True
        peer.last_seen_s = now_s
        return False

    def heartbeat(self, identity: bytes, beat: common_pb2.Heartbeat, now_s: float) -> None:
        peer = self._peers.get(identity)
        if peer is None:
            self.touch(identity, now_s)
            peer = self._peers[identity]
        if peer.incarnation and beat.incarnation != peer.incarnation:
            logger.warning("talker %s restarted (incarnation %d -> %d)", beat.peer_id, peer.incarnation, beat.incarnation)
        if beat.peer_id and beat.peer_id != peer.peer_id:
            logger.info("talker identity %s is %s", identity.hex(), beat.peer_id)
            peer.peer_id = beat.peer_id
        peer.interval_ms = beat.interval_ms
        peer.incarnation = beat.incarnation
        peer.is_draining = beat.is_draining
        peer.load.CopyFrom(beat.load)

    def expire(self, now_s: float) -> list[TalkerPeer]:
        """Drop peers silent for too long; returns them."""
        gone = []
        for identity, peer in list(self._peers.items()):
            period_s = (peer.interval_ms or self.default_interval_ms) / 1e3
            if now_s - peer.last_seen_s > MISSED_PERIODS * period_s:
                del self._peers[identity]
                gone.append(peer)
                logger.warning("talker %s lost: silent for %.1f s", peer.peer_id, now_s - peer.last_seen_s)
        return gone

    def last_heard_s(self, identity: bytes) -> float | None:
        """When `identity` last sent anything (heartbeats included); None if never or forgotten."""
        return self._last_heard_s.get(identity)

    def prune_heard(self, in_use: set[bytes]) -> None:
        """Forget last-heard times of identities that are neither registered nor owning a request."""
        for identity in [i for i in self._last_heard_s if i not in in_use and i not in self._peers]:
            del self._last_heard_s[identity]

    def name(self, identity: bytes) -> str:
        peer = self._peers.get(identity)
        return peer.peer_id if peer is not None else identity.hex()

    def identities(self) -> list[bytes]:
        return list(self._peers)

    def forget(self, identity: bytes) -> None:
        """The peer's connection is gone (a send to it was unroutable)."""
        peer = self._peers.pop(identity, None)
        if peer is not None:
            logger.info("talker %s disconnected", peer.peer_id)

    def status(self, now_s: float, streams_by_identity: dict[bytes, int]) -> list[admin_pb2.PeerStatus]:
        out = []
        for peer in self._peers.values():
            period_s = (peer.interval_ms or self.default_interval_ms) / 1e3
            age_s = now_s - peer.last_seen_s
            out.append(admin_pb2.PeerStatus(
                peer_id=peer.peer_id, is_healthy=age_s <= MISSED_PERIODS * period_s and not peer.is_draining,
                last_heartbeat_age_ms=age_s * 1e3, num_streams=streams_by_identity.get(peer.identity, 0),
                load=peer.load,
            ))
        return out

    def __len__(self) -> int:
        return len(self._peers)
