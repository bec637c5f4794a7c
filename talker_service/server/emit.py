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
from service_common import hop_trace
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
        # Runs once per step for every running stream (up to 256): a vocoder's batch is built once
        # and kept while consecutive outputs go to the same vocoder, not looked up (or built) per output.
        batches: dict[int, tuple[VocoderLink, FramesBatch]] = {}   # keyed by id(link): links are not hashable
        find_route = self.routes.get
        batch: FramesBatch | None = None
        batch_link = None   # the link `batch` goes to: consecutive outs mostly share one vocoder
        is_marking = hop_trace.enabled()
        for out in outs:
            route = find_route(out.request_id)
            if route is None:   # ended this turn already (abort, vocoder loss)
                continue
            if isinstance(out, ErrorOut):
                self.routes.end_route(route, out.code, out.message)
                continue
            if route.sink is not None:
                route.sink.put(out)
                if out.is_final:
                    self.routes.forget(route)
                continue
            link = route.vocoder
            if link is not batch_link:
                entry = batches.get(id(link))
                if entry is None:
                    entry = batches[id(link)] = (link, FramesBatch())
                batch_link, batch = link, entry[1]
            self.add_frames(batch, link, route, out)
            if is_marking and out.first_frame_index < 2:   # frames 0 and 1 leave with this batch, this turn
                for index in range(out.first_frame_index, min(2, out.first_frame_index + out.codes.shape[0])):
                    hop_trace.mark(route.request_id, f"t_frame{index}_out")
        for link, batch in batches.values():
            self.send(link, batch)

    def open_primed(self, request_ids: list) -> None:
        """Open the vocoder streams of just-admitted voice clones with their reference codes now.

        The vocoder decodes a clone's reference codes into its state before the first audio chunk
        (several decode rounds for a 5 s clip). Sent when the request gets its talker slot, that
        priming runs while the talker prefills, not after the first frame. The stream's frames
        then carry seq 1, 2, ... (seq 0 was the context).
        """
        batches: dict[int, tuple[VocoderLink, FramesBatch]] = {}
        for rid in request_ids:
            route = self.routes.get(rid)
            if route is None or route.context_codes is None or route.vocoder is None or route.vocoder_handle:
                continue
            link = route.vocoder
            batch = batches.setdefault(id(link), (link, FramesBatch()))[1]
            self.open_stream(batch, link, route, route.context_codes.shape[0])
            batch.add(route.vocoder_handle, 0, route.context_codes, route)
            route.frames_seq_offset = 1
        for link, batch in batches.values():
            self.send(link, batch)

    @staticmethod
    def open_stream(batch: FramesBatch, link: VocoderLink, route: Route, num_context_frames: int) -> None:
        """A handle names the stream in the arrays from now on; its first entry starts with the
        decoder's left context (a clone's reference codes, never emitted as audio)."""
        route.vocoder_handle = link.new_stream_handle()
        link.opened(route.request_id, route.vocoder_handle)
        batch.opens.append(vocoder_pb2.FramesOpen(handle=route.vocoder_handle, request_id=route.request_id,
                                                  reply_to=route.reply_to, num_context_frames=num_context_frames))

    def add_frames(self, batch: FramesBatch, link: VocoderLink, route: Route, out: FramesOut) -> None:
        rows = out.codes
        if not route.vocoder_handle:   # not opened at admission: the context (if any) leads the first entry
            context = route.context_codes
            self.open_stream(batch, link, route, 0 if context is None else context.shape[0])
            if context is not None:
                rows = np.concatenate([context, rows])   # [K + n, 16]
        if out.is_final:
            batch.closes.append(vocoder_pb2.FramesClose(handle=route.vocoder_handle, summary=summary_of(out)))
            self.routes.forget(route)
        batch.add(route.vocoder_handle, out.seq + route.frames_seq_offset, rows, route)

    def send(self, link: VocoderLink, batch: FramesBatch) -> None:
        try:
            self.outbox.frames_to_vocoder(link, batch)
        except zmq.ZMQError as exc:
            why = f"did not accept frames ({exc})"
            link.last_heartbeat_s = None   # unhealthy until it heartbeats again: new requests go elsewhere
            for opened in batch.opens:     # never sent: no slot there to keep taken
                link.opens_in_flight.pop(opened.handle, None)
            for route in batch.routes:   # some of them just finished: their routes are gone already
                self.routes.fail_route(route, "UNAVAILABLE", f"request {route.request_id!r}: vocoder {link.name} {why}",
                                       notify_vocoder=False)
            self.routes.fail_vocoder(link, why)
