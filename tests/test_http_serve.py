"""The HTTP face's server in-process: accepted connections have Nagle off (a first audio chunk must
not wait for the ACK of the response headers); whole-file formats of audio past full scale."""
from __future__ import annotations

import asyncio
import socket

import pytest

from gateway.http.serve import HttpFront

pytestmark = pytest.mark.timeout(60)


def test_accepted_connections_have_nodelay():
    async def check() -> int:
        front = HttpFront("127.0.0.1", 0, None, 100)   # no servicer needed to accept a connection
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


def test_whole_file_formats_carry_audio_past_full_scale_clipped():
    import io

    import numpy as np
    import soundfile

    from gateway.http.formats import FORMATS
    t = np.arange(12000) / 24000
    pcm = (1.5 * np.sin(2 * np.pi * 200 * t)).astype(np.float32)   # past full scale, as FLOAT32 carries it
    want = np.clip(pcm, -1.0, 1.0)
    flac, _ = soundfile.read(io.BytesIO(FORMATS["flac"].whole_file(pcm)), dtype="float32")
    assert np.abs(flac - want).max() < 1e-3   # wrapped samples would be off by up to 2
    mp3, _ = soundfile.read(io.BytesIO(FORMATS["mp3"].whole_file(pcm)), dtype="float32")
    # MP3 shifts and smooths a little: compare the best-aligned middle by correlation
    mid = want[3000:9000]
    best = max(np.corrcoef(mp3[3000 + lag:9000 + lag], mid)[0, 1] for lag in range(-1200, 1201, 8))
    assert best > 0.98
