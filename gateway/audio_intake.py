"""The gateway's audio socket: what vocoders push (PCM batches and ERRORs) -> per-request events.

A PCM message carries every chunk one vocoder decode step made for this gateway; it is split into
one event per chunk (`protos.pcm_split.PcmPart`, its samples a view on the received frame), each
delivered to its request's mailbox in order. A malformed message is logged and counted; the
requests its header still names fail with INTERNAL (their audio is lost, the stream could not go
on correctly); every other request is untouched.
"""
from __future__ import annotations

import logging
from typing import Callable

from protos import wire
from protos.pcm_split import split_pcm
from protos.tts.internal.v1 import common_pb2
from service_common import hop_trace

logger = logging.getLogger(__name__)


class AudioIntake:
    def __init__(self, deliver: Callable[[wire.MessageType, object, object], None], origin: str) -> None:
        """`deliver(kind, header, array)` puts one event in its request's mailbox (unknown ids are dropped)."""
        self.deliver = deliver
        self.origin = origin                 # Error.origin of the errors made up here
        self.num_malformed_messages = 0

    def on_message(self, frames: list) -> None:
        try:
            msg_type, header, arrays = wire.decode(frames)
            parts = split_pcm(header, arrays) if msg_type == wire.MessageType.PCM else None
        except ValueError as exc:
            self.num_malformed_messages += 1
            logger.warning("malformed message on the audio socket: %s", exc)
            self._fail_named(frames, f"the vocoder sent malformed audio: {exc}")
            return
        if msg_type == wire.MessageType.ERROR:
            self.deliver(msg_type, header, None)
        elif parts is not None:
            for part in parts:
                if part.seq == 0:
                    hop_trace.mark(part.request_id, "g_pcm_in")
                self.deliver(msg_type, part, part.pcm)
        else:
            logger.warning("%s is not expected on the audio socket; dropped", msg_type.name)

    def _fail_named(self, frames: list, why: str) -> None:
        try:
            msg_type, header = wire.parse_header(frames)
        except ValueError:
            return
        if msg_type != wire.MessageType.PCM:
            return
        for request_id in dict.fromkeys(header.request_ids):
            self.deliver(wire.MessageType.ERROR, common_pb2.Error(
                request_id=request_id, code=common_pb2.STATUS_CODE_INTERNAL, message=why, origin=self.origin), None)
