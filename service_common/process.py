"""Process plumbing shared by the backends: stop on SIGTERM/SIGINT, and the ready file."""
from __future__ import annotations

import json
import logging
import os
import signal
import threading
from collections.abc import Callable
from pathlib import Path

logger = logging.getLogger(__name__)


def install_stop_handlers(stop: threading.Event, on_stop: Callable[[], None] | None = None) -> None:
    """SIGTERM and SIGINT set `stop` and then call `on_stop`.

    Call it from the main thread (Python installs signal handlers only there). The handlers run
    in the main thread between bytecodes, so `on_stop` must only flag work, never block.
    """
    def on_signal(signum, _frame) -> None:
        logger.info("signal %s: stopping", signal.Signals(signum).name)
        stop.set()
        if on_stop is not None:
            on_stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)


class StopSignal:
    """SIGTERM/SIGINT during start-up set `is_set()`; once a loop is attached they stop it too."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self._request_stop: Callable[[], None] | None = None
        install_stop_handlers(self.event, self._on_stop)

    def is_set(self) -> bool:
        return self.event.is_set()

    def attach(self, request_stop: Callable[[], None]) -> None:
        """`request_stop` must be idempotent: a signal right here can call it twice."""
        self._request_stop = request_stop
        if self.event.is_set():   # the signal came before the loop existed
            request_stop()

    def _on_stop(self) -> None:
        if self._request_stop is not None:
            self._request_stop()


def write_ready_file(path: str | Path, info: dict) -> None:
    """Atomically (rename) so a watcher never reads half a file."""
    target = Path(path)
    tmp = target.with_name(target.name + f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(info))
    os.replace(tmp, target)


def announce_ready(role: str, info: dict, ready_file: str | None) -> None:
    """Log the ready info and, when asked, write it where a launcher or probe waits for it."""
    logger.info("%s ready: %s", role, info)
    if ready_file:
        write_ready_file(ready_file, info)
