"""uvicorn in the gateway's own event loop, on a socket bound up front (a taken port is a one-line
start-up error, and port 0 reports the port it got)."""
from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from typing import TYPE_CHECKING

import uvicorn

from gateway.http.app import build_app
from gateway.http.local_calls import LocalGateway
from service_common.startup import StartupError

if TYPE_CHECKING:
    from gateway.servicer import TextToSpeechServicer

logger = logging.getLogger(__name__)


class _InLoopServer(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self):
        # The gateway owns SIGTERM/SIGINT (it drains gRPC first); uvicorn must not take them over.
        yield


class HttpFront:
    def __init__(self, host: str, port: int, servicer: TextToSpeechServicer, max_text_chars: int,
                 reuse_port: bool = False) -> None:
        """`servicer`: the gateway's own, called in-process (local_calls.py)."""
        self.host, self.requested_port, self.reuse_port = host, port, reuse_port
        self.client = LocalGateway(servicer)
        self.app = build_app(self.client, max_text_chars)
        self.port = 0
        self._socket: socket.socket | None = None
        self._task: asyncio.Task | None = None
        self._server: _InLoopServer | None = None

    def bind(self) -> int:
        """Bind the listening socket (StartupError naming the port if it cannot be); the bound port."""
        self._socket = self._bind()
        self.port = self._socket.getsockname()[1]
        return self.port

    def _bind(self) -> socket.socket:
        # proto=IPPROTO_TCP matters: asyncio turns Nagle off (TCP_NODELAY) only on sockets that say
        # they are TCP, and accepted sockets copy the listener's proto. With Nagle on, a first audio
        # chunk waited for the ACK of the response headers, which the client delays: TTFA over HTTP
        # was 48 ms against gRPC's 17 on an H100 (2026-11-28, bench_http_vs_grpc.py).
        sock = socket.socket(socket.AF_INET6 if ":" in self.host else socket.AF_INET, socket.SOCK_STREAM,
                             socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.reuse_port:   # gateway workers share the port (gateway/workers.py)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        try:
            sock.bind((self.host, self.requested_port))
        except OSError as exc:
            sock.close()
            reason = "it is in use by another process" if exc.errno == 98 else exc.strerror
            raise StartupError(f"gateway HTTP port {self.host}:{self.requested_port} could not be bound: {reason}") from None
        sock.listen(1024)
        sock.setblocking(False)
        return sock

    async def start(self) -> None:
        sock = self._socket if self._socket is not None else self._bind()
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(self.app, log_level="warning", lifespan="off", ws="websockets-sansio",
                                timeout_graceful_shutdown=5, access_log=False)
        self._server = _InLoopServer(config)
        self._task = asyncio.get_running_loop().create_task(self._server.serve(sockets=[sock]))
        while not self._server.started:
            if self._task.done():
                self._task.result()   # raises what stopped it
                raise StartupError("the HTTP server stopped while starting")
            await asyncio.sleep(0.005)
        logger.info("HTTP API on http://%s:%d (OpenAI /v1/audio/speech, WebSocket /v1/audio/speech/stream, page /)",
                    self.host, self.port)

    async def drain(self, grace_s: float) -> None:
        """Live synthesis streams get up to `grace_s` to finish, then are cancelled (the gRPC server's
        stop does the same to its calls); new ones are refused by the draining servicer."""
        await self.client.drain(grace_s)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError, asyncio.TimeoutError):
                await asyncio.wait_for(self._task, 10)
        await self.client.drain(0.0)   # a stream begun while uvicorn closed its connections
