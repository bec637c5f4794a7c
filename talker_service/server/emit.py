"""One engine step's outputs -> their destinations: frames batched into one FRAMES message per
vocoder, admin GenerateCodes outputs onto their queue, errors to the request's gateway.

A vocoder that refuses a FRAMES send fails every request in it (and every other stream it holds):
their frames are lost, so they could never finish.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import zmq

from protos.tts.internal.v1 import vocoder_pb2
from talker_service.engine import ErrorOut, FramesOut
from talker_service.server.outbox import Outbox
from talker_service.server.routes import Route, RouteTable
from talker_service.server.summary import summary_of
from talker_service.server.vocoders import VocoderLink


@dataclass
class FramesBatch:
    """One FRAMES message to one vocoder: an entry per request, its rows back to back."""
    link: VocoderLink
    entries: list[vocoder_pb2.FramesEntry] = field(default_factory=list)
    codes: list[np.ndarray] = field(default_factory=list)   # [n_i, 16] per entry
    routes: list[Route] = field(default_factory=list)


class Emitter:
    def __init__(self, routes: RouteTable, outbox: Outbox) -> None:
        self.routes = routes
        self.outbox = outbox

    def emit(self, outs: list[FramesOut | ErrorOut]) -> None:
        batches: dict[int, FramesBatch] = {}   # keyed by id(link): links are not hashable
        for out in outs:
            route = self.routes.get(out.request_id)
            if route is None:   # ended this turn already (abort, vocoder loss)
                continue
            if isinstance(out, ErrorOut):
                self.routes.end_route(route, out.code, out.message)
            elif route.sink is not None:
                route.sink.put(out)
                if out.is_final:
                    self.routes.forget(route)
            else:
                self.add_frames(batches.setdefault(id(route.vocoder), FramesBatch(route.vocoder)), route, out)
        for batch in batches.values():
            self.send(batch)

    def add_frames(self, batch: FramesBatch, route: Route, out: FramesOut) -> None:
        entry = vocoder_pb2.FramesEntry(request_id=out.request_id, seq=out.seq, is_final=out.is_final)
        rows = out.codes
        if out.seq == 0:
            entry.reply_to = route.reply_to
            if route.context_codes is not None:   # the decoder's left context, not emitted as audio
                entry.num_context_frames = route.context_codes.shape[0]
                rows = np.concatenate([route.context_codes, rows])   # [K + n, 16]
        if out.is_final:
            entry.summary.CopyFrom(summary_of(out))
            self.routes.forget(route)
        batch.entries.append(entry)
        batch.codes.append(rows)
        batch.routes.append(route)

    def send(self, batch: FramesBatch) -> None:
        link = batch.link
        try:
            self.outbox.frames_to_vocoder(link, batch.entries, batch.codes)
        except zmq.ZMQError as exc:
            why = f"did not accept frames ({exc})"
            link.last_heartbeat_s = None   # unhealthy until it heartbeats again: new requests go elsewhere
            for route in batch.routes:   # some of them just finished: their routes are gone already
                self.routes.fail_route(route, "UNAVAILABLE", f"request {route.request_id!r}: vocoder {link.name} {why}",
                                       notify_vocoder=False)
            self.routes.fail_vocoder(link, why)
