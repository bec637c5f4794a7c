"""Where each live request's output goes: its gateway (errors), its vocoder (frames), or an
admin GenerateCodes call (a queue read by the gRPC thread)."""
from __future__ import annotations

import queue
from dataclasses import dataclass

import numpy as np

from talker_service.server.vocoders import VocoderLink


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
