"""ZeroMQ sockets of the vocoder: the ROUTER talkers connect to, and PUSH sockets to gateways.

Every socket has explicit high-water marks and linger 0 (a closing socket never blocks the loop
on an unreachable peer). Sends never block: a full queue raises `zmq.Again` to the caller, which
fails the affected request instead of stalling every other stream.
"""
from __future__ import annotations

import logging
from collections import OrderedDict

import zmq

from service_common.endpoints import check_endpoint
from service_common.startup import bind_zmq

logger = logging.getLogger(__name__)


def bind_router(context: zmq.Context, endpoint: str, rcv_hwm: int, snd_hwm: int) -> tuple[zmq.Socket, str]:
    """The talker-facing ROUTER, bound; returns it with the endpoint actually bound (port resolved)."""
    check_endpoint(endpoint, "bind endpoint")
    sock = context.socket(zmq.ROUTER)
    sock.setsockopt(zmq.RCVHWM, rcv_hwm)
    sock.setsockopt(zmq.SNDHWM, snd_hwm)
    sock.setsockopt(zmq.LINGER, 0)
    # Sending to a talker that went away raises EHOSTUNREACH instead of vanishing silently.
    sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
    bind_zmq(sock, endpoint, "vocoder bind endpoint")
    bound = sock.getsockopt_string(zmq.LAST_ENDPOINT)
    return sock, bound


class PushSockets:
    """PUSH sockets to reply addresses, connected on first use and cached per address.

    Bounded: beyond `max_sockets` the least recently used address not in use by a live request
    is closed (a talker could otherwise make us hold one socket per distinct address it names).
    """

    def __init__(self, context: zmq.Context, snd_hwm: int, max_sockets: int) -> None:
        self.context = context
        self.snd_hwm = snd_hwm
        self.max_sockets = max_sockets
        self._sockets: OrderedDict[str, zmq.Socket] = OrderedDict()  # least recently used first

    def get(self, address: str) -> zmq.Socket:
        """The socket for `address`, connecting it if needed; ValueError for a malformed address."""
        sock = self._sockets.get(address)
        if sock is None:
            check_endpoint(address, "reply_to")
            sock = self.context.socket(zmq.PUSH)
            sock.setsockopt(zmq.SNDHWM, self.snd_hwm)
            sock.setsockopt(zmq.LINGER, 0)
            try:
                sock.connect(address)
            except zmq.ZMQError as exc:
                sock.close(linger=0)
                raise ValueError(f"reply_to {address!r} cannot be connected: {exc}") from None
            self._sockets[address] = sock
            logger.info("connected PUSH to gateway %s", address)
        self._sockets.move_to_end(address)
        return sock

    def send(self, address: str, frames: list) -> None:
        """Non-blocking multipart send; raises zmq.Again when the gateway's queue is full."""
        self.get(address).send_multipart(frames, flags=zmq.NOBLOCK, copy=False)

    def prune(self, in_use: set[str]) -> None:
        """Close least recently used sockets beyond the cap that no live request needs."""
        for address in list(self._sockets):
            if len(self._sockets) <= self.max_sockets:
                break
            if address not in in_use:
                self._close(address)

    def _close(self, address: str, linger_ms: int = 0) -> None:
        self._sockets.pop(address).close(linger=linger_ms)
        logger.info("closed PUSH to %s", address)

    def close_all(self, linger_ms: int = 0) -> None:
        """`linger_ms` > 0 at shutdown: the last chunks and errors get that long to leave."""
        for address in list(self._sockets):
            self._close(address, linger_ms)

    def __len__(self) -> int:
        return len(self._sockets)
