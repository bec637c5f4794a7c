"""Where a request's first audio spends its time between the processes: marks for benchmarks.

The summary's stage timings are each measured inside one process; what lies between them (a message
queued in a socket while its reader steps, a read-back the next step picks up) is in none of them. At
256 streams on an H200 that was most of the first audio's time (issue #36). With
QWEN3_TTS_HOP_TRACE_DIR set, each process appends one line per milestone of a request on its way to
first audio to `<dir>/<pid>.tsv`: request id, event (EVENTS), CLOCK_MONOTONIC in ns. That clock is
one for every process of a host (containers included) and none across hosts, so the files of one
machine join (benchmarks/first_audio_hops.py; bench_e2e --hop-trace-dir). Unset, as by default, a
mark costs one global test.
"""
from __future__ import annotations

import logging
import os
import threading
import time

# about in the order a request meets them (START and the first text cross on their ways)
EVENTS = ("g_start_out",    # gateway: START sent to the talker (before the first text is read)
          "t_start_in",     # talker: START read
          "g_text_in",      # gateway: first text read (the server's TTFA clock starts)
          "g_text_out",     # gateway: first TEXT sent
          "t_text_in",      # talker: first TEXT read
          "g_ack_in",       # gateway: the talker's ACK read
          "t_frame0_out",   # talker: frame 0 sent to the vocoder
          "v_frames0_in",   # vocoder: frame 0 read (the first audio frame: a clone's context not counted)
          "t_frame1_out",   # talker: frame 1 sent
          "v_frames1_in",   # vocoder: frame 1 read (in the same FRAMES entry as frame 0 or a later one)
          "v_pcm_out",      # vocoder: first PCM chunk sent
          "g_pcm_in",       # gateway: first PCM chunk read
          "g_audio_out")    # gateway: first audio response built (the server's TTFA clock stops)

_DIR = os.environ.get("QWEN3_TTS_HOP_TRACE_DIR") or None
_lock = threading.Lock()
_file = None


def enabled() -> bool:
    """Whether marks are written: a per-step loop over every stream asks once, not per stream."""
    return _DIR is not None


def mark(request_id, event: str) -> None:
    """One milestone of `request_id` now; the caller marks each (request, event) once. A folder that
    cannot be written ends the marks of this process (logged once), never a request."""
    global _DIR, _file
    if _DIR is None:
        return
    now_ns = time.monotonic_ns()
    with _lock:
        try:
            if _file is None:
                os.makedirs(_DIR, exist_ok=True)
                _file = open(os.path.join(_DIR, f"{os.getpid()}.tsv"), "a", buffering=1)
            _file.write(f"{request_id}\t{event}\t{now_ns}\n")
        except OSError as exc:
            logging.getLogger(__name__).warning("first-audio hop marks off: %s cannot be written (%s)", _DIR, exc)
            _DIR = None
