"""Sizes both ends of tts.v1 agree on: how much audio one unary reply may carry.

A unary Synthesize reply holds the whole audio in one message, and a gRPC client refuses a
message over its receive limit (4 MiB by default in every gRPC implementation) with
RESOURCE_EXHAUSTED, after the server did all the work. So the gateway refuses, before any work, a
unary request whose worst-case audio exceeds MAX_UNARY_AUDIO_BYTES (its --max-unary-audio-bytes
flag), which leaves 1 MiB of the default limit for the rest of the reply (start, summary,
framing); this repository's client receives UNARY_REPLY_RECEIVE_BYTES, the same sum.
"""
from __future__ import annotations

GRPC_DEFAULT_MAX_RECEIVE_BYTES = 4 << 20
MAX_UNARY_AUDIO_BYTES = 3 << 20
UNARY_REPLY_HEADROOM_BYTES = 1 << 20
UNARY_REPLY_RECEIVE_BYTES = MAX_UNARY_AUDIO_BYTES + UNARY_REPLY_HEADROOM_BYTES
