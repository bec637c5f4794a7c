"""The HTTP face's server in-process: accepted connections have Nagle off (a first audio chunk must
not wait for the ACK of the response headers), and it stops cleanly."""
from __future__ import annotations

import asyncio
import socket

import pytest

from gateway.http.serve import HttpFront

pytestmark = pytest.mark.timeout(60)


def test_accepted_connections_have_nodelay():
    async def check() -> int:
        front = HttpFront("127.0.0.1", 0, "127.0.0.1:1", 100)   # no gRPC needed to accept a connection
        front.bind()
        await front.start()
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", front.port)
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            await writer.drain()
            assert b"200" in await asyncio.wait_for(reader.readline(), 10)
            (connection,) = front._server.server_state.connections
            server_side = connection.transport.get_extra_info("socket")
            flag = server_side.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
            writer.close()
            return flag
        finally:
            await front.stop()
    assert asyncio.run(asyncio.wait_for(check(), 30)) != 0
