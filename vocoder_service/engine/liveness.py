"""Talker liveness: which open requests have outlived their talker's silence timeout.

A talker that dies leaves its requests open with nobody to send their final frames; these
checks find them so the engine can fail them (UNAVAILABLE) and free their slots.
"""
from __future__ import annotations

from typing import Callable, Iterable, Iterator

from vocoder_service.engine.stream_state import StreamState


def silent_streams(streams: Iterable[StreamState], now: float, timeout_s: float,
                   talker_last_heard_s: Callable[[str], float | None] | None) -> Iterator[tuple[StreamState, str]]:
    """Yield (stream, why) for each unfinished stream whose talker has been silent over `timeout_s`.

    Lazy on purpose: the engine fails each stream as it is yielded, so the caller passes a
    snapshot of its streams rather than the dict it is about to shrink.
    """
    for stream in streams:
        if stream.ended:   # every frame is in: nothing more is owed by the talker
            continue
        heard_s = talker_last_heard_s(stream.request_id) if talker_last_heard_s is not None else None
        # the talker's liveness, not the request's: any message from it (heartbeats too) counts
        last_s = stream.last_activity_s if heard_s is None else max(heard_s, stream.last_activity_s)
        if now - last_s > timeout_s:
            yield stream, (f"request {stream.request_id!r}: talker sent nothing "
                           f"(no frames, no heartbeats) for {now - last_s:.1f} s, over the "
                           f"{timeout_s:.1f} s timeout (talker {stream.talker_id})")
