"""One engine step's outputs -> their destinations: frames batched into one FRAMES message per
vocoder, admin GenerateCodes outputs onto their queue, errors to the request's gateway.

A vocoder that refuses a FRAMES send fails every request in it (and every other stream it holds):
their frames are lost, so they could never finish.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import zmq

from protos.tts.internal.v1 import vocoder_pb2
from talker_service.engine import ErrorOut, FramesOut
from talker_service.server.routes import Route
from talker_service.server.summary import summary_of
from talker_service.server.vocoders import VocoderLink

if TYPE_CHECKING:
    from talker_service.server.loop import TalkerServer


def emit_outputs(server: "TalkerServer", outs: list[FramesOut | ErrorOut]) -> None:
    s = server
    batches: dict[int, tuple[VocoderLink, list, list, list[Route]]] = {}
    for out in outs:
        route = s.routes.get(out.request_id)
        if route is None:
            continue
        if isinstance(out, ErrorOut):
            s.end_route(route, out.code, out.message)
        elif route.sink is not None:
            route.sink.put(out)
            if out.is_final:
                s.routes.pop(out.request_id, None)
        else:
            link, entries, codes, routes = batches.setdefault(id(route.vocoder), (route.vocoder, [], [], []))
            entry = vocoder_pb2.FramesEntry(request_id=out.request_id, seq=out.seq, is_final=out.is_final)
            rows = out.codes
            if out.seq == 0:
                entry.reply_to = route.reply_to
                if route.context_codes is not None:   # the decoder's left context, not emitted as audio
                    entry.num_context_frames = route.context_codes.shape[0]
                    rows = np.concatenate([route.context_codes, rows])   # [K + n, 16]
            if out.is_final:
                entry.summary.CopyFrom(summary_of(out))
                s.forget(route)
            entries.append(entry)
            codes.append(rows)
            routes.append(route)
    for link, entries, codes, routes in batches.values():
        try:
            s.outbox.frames_to_vocoder(link, entries, codes)
        except zmq.ZMQError as exc:
            why = f"did not accept frames ({exc})"
            link.last_heartbeat_s = None   # unhealthy until it heartbeats again: new requests go elsewhere
            for route in routes:   # some of them just finished: their routes are gone already
                s.engine.fail(route.request_id, "UNAVAILABLE", why)
                s.end_route(route, "UNAVAILABLE", f"request {route.request_id!r}: vocoder {link.name} {why}",
                            notify_vocoder=False)
            s.fail_vocoder(link, why)
