"""Which asyncio event loop a service process runs: the standard one or uvloop's.

A gateway process spends most of its CPU in the event loop's own machinery (gRPC's completion
callbacks, futures, epoll), about 0.15 ms a message on the standard loop; a wave of calls waits in
that loop for its start messages (benchmarks/results/2026-11-28-gapless7-h200.md). uvloop runs the
same asyncio programs on libuv with that machinery in C. `auto` takes it when it is installed (a
dependency of the package off Windows) and the standard loop otherwise, so an install without it
still runs; `uvloop` insists (a missing package is a startup error naming it); `asyncio` opts out.
"""
from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

CHOICES = ("auto", "uvloop", "asyncio")
T = TypeVar("T")


def loop_factory(choice: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """-> a new-loop function for `choice`, or None for the standard loop."""
    if choice not in CHOICES:
        raise ValueError(f"event loop must be one of {', '.join(CHOICES)}, got {choice!r}")
    if choice == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        if choice == "uvloop":
            raise RuntimeError("event loop 'uvloop' asked for, but the uvloop package is not installed "
                               "(pip install uvloop, or choose auto or asyncio)") from None
        return None
    return uvloop.new_event_loop


def run(main: Coroutine[Any, Any, T], choice: str = "auto") -> T:
    """asyncio.run(main) on the loop `choice` picks."""
    factory = loop_factory(choice)
    if factory is None:
        return asyncio.run(main)
    if hasattr(asyncio, "Runner"):   # Python 3.11+
        with asyncio.Runner(loop_factory=factory) as runner:
            return runner.run(main)
    loop = factory()                 # Python 3.10: what asyncio.run does, on this loop
    try:
        asyncio.set_event_loop(loop)
        return loop.run_until_complete(main)
    finally:
        try:
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            asyncio.set_event_loop(None)
            loop.close()
