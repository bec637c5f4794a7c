"""Where each live request's output goes, and how a request ends.

A route leads to its gateway (errors), its vocoder (frames), or an admin GenerateCodes call (a
queue read by a gRPC thread). `RouteTable` owns every route and is the one place a request is
ended from the talker's side: it tells the engine, the caller (gateway or admin queue) and the
vocoder, each exactly once. Ending an id that is not live does nothing, so a request can be
ended from two paths in one loop turn (an ABORT and a vocoder loss) without a double ERROR.
"""
from __future__ import annotations

import logging
import queue
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from talker_service.engine import ErrorOut, TalkerEngine
from talker_service.server.gateways import GatewayPeers
from talker_service.server.outbox import Outbox
from talker_service.server.vocoders import VocoderLink

logger = logging.getLogger(__name__)


@dataclass
class Route:
    request_id: str
    gateway: bytes | None = None            # ROUTER identity of the gateway; None for admin calls
    reply_to: str = ""
    vocoder: VocoderLink | None = None
    context_codes: np.ndarray | None = None  # [K, 16] voice-clone reference codes, sent before frame 0
    deadline_s: float | None = None          # monotonic; None = no deadline
    next_text_seq: int = 0
    is_ended: bool = False                   # End received
    sink: queue.Queue | None = None          # admin GenerateCodes: engine outputs go here
    seed: int = 0
    vocoder_handle: int = 0                  # the stream's number on its vocoder link (0: not opened yet)
    frames_seq_offset: int = 0               # 1 once the context went ahead as seq 0 (Emitter.open_primed)


class RouteTable:
    def __init__(self, engine: TalkerEngine, outbox: Outbox, gateways: GatewayPeers) -> None:
        self.engine = engine
        self.outbox = outbox
        self.gateways = gateways
        self._routes: dict[str, Route] = {}

    # ---- lookup -------------------------------------------------------------------------------
    def get(self, request_id: str) -> Route | None:
        return self._routes.get(request_id)

    def __contains__(self, request_id: str) -> bool:
        return request_id in self._routes

    def __iter__(self) -> Iterator[Route]:
        return iter(list(self._routes.values()))   # a copy: callers end routes while iterating

    def __len__(self) -> int:
        return len(self._routes)

    # ---- opening and forgetting -------------------------------------------------------------
    def add(self, route: Route) -> None:
        self._routes[route.request_id] = route
        if route.vocoder is not None:
            route.vocoder.streams.add(route.request_id)
            route.vocoder.unopened.add(route.request_id)   # opens with its first frame (Emitter.open_stream)
        if route.gateway is not None:
            self.gateways.add_request(route.gateway, route.request_id)

    def forget(self, route: Route) -> None:
        """Drop the route everywhere it is counted (no message sent): the request finished."""
        self._routes.pop(route.request_id, None)
        if route.vocoder is not None:
            route.vocoder.streams.discard(route.request_id)
            route.vocoder.unopened.discard(route.request_id)
            route.vocoder.admitted.discard(route.request_id)
        if route.gateway is not None:
            self.gateways.discard_request(route.gateway, route.request_id)

    # ---- ending -------------------------------------------------------------------------------
    def end_route(self, route: Route, code: str, message: str, notify_vocoder: bool = True) -> None:
        """The request ends with an error: tell its gateway (or admin caller) and its vocoder."""
        self.forget(route)
        if route.sink is not None:
            route.sink.put(ErrorOut(route.request_id, code, message))
            return
        self.outbox.error_to_gateway(route.gateway, route.request_id, code, message)
        if notify_vocoder and route.vocoder is not None:
            self.outbox.abort_to_vocoder(route.vocoder, route.request_id, code, message)

    def fail(self, request_id: str, code: str, message: str, notify_vocoder: bool = True) -> None:
        """End a request with an error everywhere: engine, caller, vocoder (unless it reported it)."""
        route = self._routes.get(request_id)
        logger.warning("request %s failed (%s): %s", request_id, code, message)
        if route is None:
            self.engine.fail(request_id, code, message)
        else:
            self.fail_route(route, code, message, notify_vocoder)

    def fail_route(self, route: Route, code: str, message: str, notify_vocoder: bool = True) -> None:
        """`fail` for a route held by the caller, which may have been forgotten already (its final
        frames were just lost): the engine lets go of it if it still holds it, the caller is told."""
        self.engine.fail(route.request_id, code, message)
        self.end_route(route, code, message, notify_vocoder)

    def abort(self, request_id: str, reason: str, message: str) -> None:
        """The caller went away: stop the request; only the vocoder is told (nobody else listens)."""
        route = self._routes.get(request_id)
        self.engine.abort(request_id)
        if route is not None:
            self.forget(route)
            if route.vocoder is not None:
                self.outbox.abort_to_vocoder(route.vocoder, request_id, reason, message)

    def fail_vocoder(self, link: VocoderLink, why: str) -> None:
        """The vocoder lost its streams (silent, restarted, refused frames): each request fails."""
        request_ids = sorted(link.streams)
        logger.warning("vocoder %s %s: failing %d requests with UNAVAILABLE", link.name, why, len(request_ids))
        for rid in request_ids:
            self.fail(rid, "UNAVAILABLE", f"request {rid!r}: vocoder {link.name} {why}", notify_vocoder=False)

    def fail_expired(self, now_s: float) -> None:
        for route in self:
            if route.deadline_s is not None and now_s > route.deadline_s:
                self.fail(route.request_id, "DEADLINE_EXCEEDED", f"request {route.request_id!r}: deadline passed")

    def fail_all(self, why: str) -> None:
        for route in self:
            self.fail(route.request_id, "UNAVAILABLE", f"request {route.request_id!r}: {why}")
