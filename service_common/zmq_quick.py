"""ZeroMQ sends and receives on an asyncio loop without a future per message when none is needed.

pyzmq's asyncio socket makes a future and schedules loop callbacks for every send and receive,
even when the message goes (or is there) at once. In a gateway process that was about an eighth of
its CPU in a wave of word-by-word calls (py-spy, benchmarks/probe_gateway_starts.py), CPU that the
calls' start messages wait behind. `QuickSocket` tries the non-blocking call on a shadow of the
same socket first and fall back to the awaited one; ZeroMQ delivers a multipart message whole, so a
non-blocking send either takes every part or none.

ZeroMQ's file descriptor is edge-triggered: any operation on the socket may take in messages that
arrived meanwhile without the descriptor firing again. pyzmq re-checks the socket after each of its
own operations; after one of ours the awaited receive on the same socket would otherwise sleep until
the next message (a heartbeat, a second later: the first version of this hung start messages so).
So each quick operation asks pyzmq to re-check (`_schedule_remaining_events`, a private method of
pyzmq's asyncio socket since 17); with a pyzmq without it every operation is awaited. Quick sends
ask for one re-check a loop turn, however many went out in it: the re-check reads the socket's
events (a call into libzmq each time), and a gateway's talker socket carries a send per streamed
word of every call.
"""
from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

import zmq
import zmq.asyncio

# messages handled in one loop turn before the reader yields to the rest of the loop
MAX_BATCH = 64


class QuickSocket:
    """One asyncio socket's quick paths. Sends go in order: at once when the socket takes the
    message, else awaited (and every later send waits behind it, so none overtakes a message still
    waiting). Receives take one awaited message and then what is already there."""

    def __init__(self, sock: zmq.asyncio.Socket) -> None:
        self.sock = sock
        self.now = zmq.Socket.shadow(sock.underlying)   # the same socket, without futures
        # pyzmq's re-check of the socket's awaited operations, or None where it has none
        self.recheck: Callable[[], None] | None = getattr(sock, "_schedule_remaining_events", None)
        self.num_waiting = 0
        self.is_recheck_due = False   # a re-check is scheduled for the next loop turn

    def _recheck_next_turn(self) -> None:
        if not self.is_recheck_due:
            self.is_recheck_due = True
            asyncio.get_running_loop().call_soon(self._recheck_now)

    def _recheck_now(self) -> None:
        self.is_recheck_due = False
        if not self.sock.closed:   # closed in the turn that sent: nothing is awaited on it any more
            self.recheck()

    async def send_multipart(self, frames: Sequence, copy: bool = False) -> None:
        if not self.num_waiting and self.recheck is not None:
            try:
                self.now.send_multipart(frames, flags=zmq.NOBLOCK, copy=copy)
            except zmq.Again:
                pass
            else:
                self._recheck_next_turn()
                return
        self.num_waiting += 1
        try:
            await self.sock.send_multipart(frames, copy=copy)
        finally:
            self.num_waiting -= 1

    async def receive_batch(self, handle: Callable[[list], None], max_batch: int = MAX_BATCH) -> None:
        """One awaited multipart message, then up to `max_batch` - 1 more that are already there,
        each passed to `handle` in arrival order."""
        handle(await self.sock.recv_multipart(copy=False))
        if self.recheck is None:
            return
        try:
            for _ in range(max_batch - 1):
                try:
                    frames = self.now.recv_multipart(flags=zmq.NOBLOCK, copy=False)
                except zmq.Again:
                    return
                handle(frames)
        finally:
            self.recheck()
