"""The talker's timers, run once per loop turn: vocoder membership (DNS) and liveness, request
deadlines, gateway liveness, then our own heartbeats.

Gateways are judged once per heartbeat period (their timeout is many periods long), on a timer
of their own that runs in step with the heartbeats, just before our beat goes out: a gateway found
gone gets no beat and its requests are aborted first. Our heartbeats keep their timers to
themselves (heartbeats.py), so they can move off this thread without taking this along.
"""
from __future__ import annotations

from talker_service.server.gateways import GatewayPeers
from talker_service.server.heartbeats import Heartbeats
from talker_service.server.routes import RouteTable
from talker_service.server.vocoders import VocoderLinks


class Housekeeping:
    def __init__(self, vocoders: VocoderLinks, gateways: GatewayPeers, routes: RouteTable,
                 heartbeats: Heartbeats, gateway_check_interval_s: float) -> None:
        self.vocoders = vocoders
        self.gateways = gateways
        self.routes = routes
        self.heartbeats = heartbeats
        self.gateway_check_interval_s = gateway_check_interval_s
        self.next_gateway_check_s = 0.0   # monotonic

    def run(self, now_s: float) -> None:
        self.vocoders.refresh()   # DNS answer moved: connect new vocoders; close retired ones without streams
        for link in self.vocoders.expire(now_s):
            self.routes.fail_vocoder(link, "went silent")
        self.routes.fail_expired(now_s)
        if now_s >= self.next_gateway_check_s:
            self.next_gateway_check_s = now_s + self.gateway_check_interval_s
            self.expire_gateways(now_s)
        self.heartbeats.tick(now_s)

    def expire_gateways(self, now_s: float) -> None:
        for peer in self.gateways.expire(now_s):
            for rid in sorted(peer.requests):   # the gateway died: its requests have nobody to answer
                self.routes.abort(rid, "CANCELLED", f"gateway {peer.peer_id} gone")
