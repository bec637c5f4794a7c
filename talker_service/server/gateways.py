"""Gateways connected to the talker's ROUTER, keyed by routing identity, seen through any message.

A gateway silent for `timeout_s` (it heartbeats every period) is gone: the caller aborts its
requests, since nothing would ever read their audio.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field

from protos.tts.internal.v1 import admin_pb2, common_pb2

logger = logging.getLogger(__name__)


@dataclass
class GatewayPeer:
    identity: bytes
    peer_id: str
    last_seen_s: float
    requests: set = field(default_factory=set)    # live request ids it started


class GatewayPeers:
    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.peers: dict[bytes, GatewayPeer] = {}

    def touch(self, identity: bytes, now_s: float) -> bool:
        """Record traffic; True for a new gateway (it gets a heartbeat at once)."""
        peer = self.peers.get(identity)
        if peer is None:
            self.peers[identity] = GatewayPeer(identity, identity.hex(), now_s)
            logger.info("gateway connected (identity %s)", identity.hex())
            return True
        peer.last_seen_s = now_s
        return False

    def heartbeat(self, identity: bytes, beat: common_pb2.Heartbeat) -> None:
        peer = self.peers.get(identity)
        if peer is not None and beat.peer_id:
            peer.peer_id = beat.peer_id

    def add_request(self, identity: bytes, request_id: str) -> None:
        peer = self.peers.get(identity)
        if peer is not None:   # always known: any message touches its sender first
            peer.requests.add(request_id)

    def discard_request(self, identity: bytes, request_id: str) -> None:
        peer = self.peers.get(identity)
        if peer is not None:   # None once expired: its requests were aborted with it
            peer.requests.discard(request_id)

    def identities(self) -> list[bytes]:
        return list(self.peers)

    def name(self, identity: bytes) -> str:
        peer = self.peers.get(identity)
        return peer.peer_id if peer is not None else identity.hex()

    def expire(self, now_s: float) -> list[GatewayPeer]:
        gone = [p for p in self.peers.values() if now_s - p.last_seen_s > self.timeout_s]
        for peer in gone:
            del self.peers[peer.identity]
            logger.warning("gateway %s gone: silent for %.1f s, %d requests to abort", peer.peer_id,
                           now_s - peer.last_seen_s, len(peer.requests))
        return gone

    def status(self, now_s: float) -> list[admin_pb2.PeerStatus]:
        return [admin_pb2.PeerStatus(peer_id=p.peer_id, is_healthy=now_s - p.last_seen_s <= self.timeout_s,
                                     last_heartbeat_age_ms=(now_s - p.last_seen_s) * 1e3,
                                     num_streams=len(p.requests)) for p in self.peers.values()]
