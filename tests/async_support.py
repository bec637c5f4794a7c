"""Driving asyncio code from plain test functions: one copy of `run` and `until`. No tests here.

Every wait has a deadline, so a hung coroutine fails its test with a message instead of stalling it
until pytest-timeout kills the worker.
"""
from __future__ import annotations

import asyncio
import time

RUN_TIMEOUT_S = 30.0
UNTIL_TIMEOUT_S = 10.0


def run(coro, timeout_s: float = RUN_TIMEOUT_S):
    """`coro` to its end on a fresh event loop; asyncio.TimeoutError after `timeout_s`."""
    return asyncio.run(asyncio.wait_for(coro, timeout_s))


async def until(condition, what: str, timeout_s: float = UNTIL_TIMEOUT_S, interval_s: float = 0.02):
    """Wait (yielding to the loop) until `condition()` is truthy, and return its value; an
    AssertionError naming `what` if it is not within `timeout_s`."""
    deadline_s = time.monotonic() + timeout_s
    while not (value := condition()):
        assert time.monotonic() < deadline_s, f"timed out waiting for: {what}"
        await asyncio.sleep(interval_s)
    return value
