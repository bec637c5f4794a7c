"""The talker's timers, run once per loop iteration: vocoder and gateway liveness expiry, request
deadlines, heartbeats to every peer, and fast hellos to vocoders not heard from yet."""
from __future__ import annotations

import time
from typing import TYPE_CHECKING

from protos import wire

if TYPE_CHECKING:
    from talker_service.server.loop import TalkerServer

HELLO_INTERVAL_S = 0.1


def run_housekeeping(server: "TalkerServer") -> None:
    s, now_s = server, time.monotonic()
    s.vocoders.refresh()   # DNS answer moved: connect new vocoders; close retired ones without streams
    for link in s.vocoders.expire(now_s):
        s.fail_vocoder(link, "went silent")
    for rid in [rid for rid, r in s.routes.items() if r.deadline_s is not None and now_s > r.deadline_s]:
        s.fail_request(rid, "DEADLINE_EXCEEDED", f"request {rid!r}: deadline passed")
    if now_s < s.next_heartbeat_s:
        for link in s.vocoders.links:   # not heard from yet: say hello often so it learns us fast
            if link.last_heartbeat_s is None and now_s - link.last_hello_s > HELLO_INTERVAL_S:
                link.last_hello_s = now_s
                s.outbox.heartbeat_to_vocoder(link, s.heartbeat())
        return
    s.next_heartbeat_s = now_s + s.config.heartbeat_interval_ms / 1e3
    for peer in s.gateways.expire(now_s):
        for rid in sorted(peer.requests):   # the gateway died: its requests have nobody to answer
            s.abort_request(rid, "CANCELLED", f"gateway {peer.peer_id} gone")
    beat = s.heartbeat()
    for identity in list(s.gateways.peers):
        s.outbox.to_gateway(identity, wire.MessageType.HEARTBEAT, beat)
    for link in s.vocoders.links:
        s.outbox.heartbeat_to_vocoder(link, beat)
