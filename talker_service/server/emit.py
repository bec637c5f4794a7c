"""One engine step's outputs -> their destinations: frames batched into one FRAMES message per
vocoder (entries as arrays; a stream is named by the handle its first message gave it), admin
GenerateCodes outputs onto their queue, errors to the request's gateway.

A vocoder that refuses a FRAMES send fails every request in it (and every other stream it holds):
their frames are lost, so they could never finish.
"""
from __future__ import annotations

import numpy as np
import zmq

from protos.tts.internal.v1 import vocoder_pb2
from talker_service.engine import ErrorOut, FramesOut
from talker_service.server.outbox import FramesBatch, Outbox
from talker_service.server.routes import Route, RouteTable
from talker_service.server.summary import summary_of
from talker_service.server.vocoders import VocoderLink


class Emitter:
    def __init__(self, routes: RouteTable, outbox: Outbox) -> None:
        self.routes = routes
        self.outbox = outbox

    def emit(self, outs: list[FramesOut | ErrorOut]) -> None:
        batches: dict[int, tuple[VocoderLink, FramesBatch]] = {}   # keyed by id(link): links are not hashable
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
                link = route.vocoder
                self.add_frames(batches.setdefault(id(link), (link, FramesBatch()))[1], link, route, out)
        for link, batch in batches.values():
            self.send(link, batch)

    def add_frames(self, batch: FramesBatch, link: VocoderLink, route: Route, out: FramesOut) -> None:
        rows = out.codes
        if out.seq == 0:   # the stream opens: a handle names it in the arrays from now on
            route.vocoder_handle = link.new_stream_handle()
            opened = vocoder_pb2.FramesOpen(handle=route.vocoder_handle, request_id=out.request_id,
                                            reply_to=route.reply_to)
            if route.context_codes is not None:   # the decoder's left context, not emitted as audio
                opened.num_context_frames = route.context_codes.shape[0]
                rows = np.concatenate([route.context_codes, rows])   # [K + n, 16]
            batch.opens.append(opened)
        if out.is_final:
            batch.closes.append(vocoder_pb2.FramesClose(handle=route.vocoder_handle, summary=summary_of(out)))
            self.routes.forget(route)
        batch.handles.append(route.vocoder_handle)
        batch.seqs.append(out.seq)
        batch.num_frames.append(rows.shape[0])
        batch.codes.append(rows)
        batch.routes.append(route)

    def send(self, link: VocoderLink, batch: FramesBatch) -> None:
        try:
            self.outbox.frames_to_vocoder(link, batch)
        except zmq.ZMQError as exc:
            why = f"did not accept frames ({exc})"
            link.last_heartbeat_s = None   # unhealthy until it heartbeats again: new requests go elsewhere
            for route in batch.routes:   # some of them just finished: their routes are gone already
                self.routes.fail_route(route, "UNAVAILABLE", f"request {route.request_id!r}: vocoder {link.name} {why}",
                                       notify_vocoder=False)
            self.routes.fail_vocoder(link, why)
