"""The gateway's gRPC server: TextToSpeech, grpc.health.v1 and server reflection, plus metrics.

Health is NOT_SERVING until the backend sees a talker that reports a reachable vocoder, and
again whenever none is left or the gateway drains.
"""
from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1._async import HealthServicer

from gateway.backend import Backend
from gateway.config import GatewayConfig
from gateway.errors import RequestError
from gateway.metrics import GatewayMetrics
from gateway.model_info import load_model_info
from gateway.servicer import TextToSpeechServicer
from gateway.text_tokenizer import TextTokenizer
from gateway.voices import VoiceRegistry
from protos.tts.v1 import tts_pb2, tts_pb2_grpc
from service_common.process import write_ready_file
from service_common.reflection import enable_reflection
from service_common.startup import add_grpc_port, grpc_server_options
from service_common.strict_requests import add_strict_servicer

logger = logging.getLogger(__name__)

SERVICE_NAME = tts_pb2.DESCRIPTOR.services_by_name["TextToSpeech"].full_name
_SERVING, _NOT_SERVING = health_pb2.HealthCheckResponse.SERVING, health_pb2.HealthCheckResponse.NOT_SERVING


class GatewayServer:
    def __init__(self, config: GatewayConfig, model_dir: str | Path) -> None:
        self.config = config
        self.model_dir = Path(model_dir)
        self.server: grpc.aio.Server | None = None
        self.port = 0
        self.metrics_port = 0
        self.http = None
        self.http_port = -1

    async def start(self) -> None:
        config = self.config
        name = config.model_name or Path(config.model).name
        self.model = load_model_info(self.model_dir, name)
        self.tokenizer = TextTokenizer.from_dir(self.model_dir)
        self.metrics = GatewayMetrics()
        self.backend = Backend(config.talkers, config.audio_bind, config.audio_advertise,
                               config.heartbeat_interval_ms, config.peer_timeout_ms, config.resolve_interval_s)
        self.voices = VoiceRegistry(config.voices_dir)
        self.servicer = TextToSpeechServicer(config, self.model, self.tokenizer, self.backend, self.voices,
                                             self.metrics)
        # gRPC's own limit sits above ours so an oversized message gets our INVALID_ARGUMENT
        # naming the field rather than a bare RESOURCE_EXHAUSTED from the transport.
        max_bytes = config.max_message_bytes * 2 + (1 << 20)
        self.server = grpc.aio.server(options=[*grpc_server_options(config.reuse_port),
                                               ("grpc.max_receive_message_length", max_bytes),
                                               ("grpc.max_send_message_length", max_bytes)])
        # Bytes that are no message end the call INVALID_ARGUMENT (counted); a bad message inside a
        # stream goes to the servicer as a RequestError, which reports and counts it.
        count_invalid = self.metrics.errors.labels(grpc.StatusCode.INVALID_ARGUMENT.name).inc
        add_strict_servicer(tts_pb2_grpc.add_TextToSpeechServicer_to_server, self.servicer, self.server,
                            on_invalid=count_invalid,
                            stream_error=lambda text: RequestError(grpc.StatusCode.INVALID_ARGUMENT, text))
        self.health = HealthServicer()
        add_strict_servicer(health_pb2_grpc.add_HealthServicer_to_server, self.health, self.server)
        enable_reflection((SERVICE_NAME, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name), self.server)
        await self._set_health(False)
        self.backend.on_health_change = lambda ok: asyncio.get_running_loop().create_task(self._set_health(ok))
        self.backend.on_num_healthy_change = self.metrics.healthy_talkers.set
        self.port = add_grpc_port(self.server, config.grpc_host, config.grpc_port, "gateway gRPC port",
                                  config.reuse_port)
        # Before the gRPC server starts: a taken metrics port then leaves nothing running to stop.
        if config.metrics_port >= 0:
            self.metrics_port = self.metrics.serve(config.metrics_port, config.metrics_host)
        if config.http_port >= 0:
            from gateway.http.serve import HttpFront  # starlette/uvicorn only when the HTTP face is on
            # The HTTP face calls this servicer in-process: same admission, limits, metrics, statuses.
            self.http = HttpFront(config.http_host, config.http_port, self.servicer, config.max_text_chars,
                                  config.reuse_port)
            self.http_port = self.http.bind()   # before gRPC starts, as the metrics port
        await self.server.start()
        self.backend.start()
        if self.http is not None:
            await self.http.start()
        logger.info("gateway listening on %s:%d (model %s, talkers %s, audio %s)", config.grpc_host, self.port,
                    name, ",".join(config.talkers), self.backend.reply_to)
        if config.ready_file:
            info = {"grpc_port": self.port, "metrics_port": self.metrics_port, "http_port": self.http_port,
                    "audio_endpoint": self.backend.reply_to,
                    "pid": os.getpid(), "model": name}
            write_ready_file(config.ready_file, info)

    async def _set_health(self, is_serving: bool) -> None:
        if self.servicer.is_draining:
            is_serving = False
        state = _SERVING if is_serving else _NOT_SERVING
        await self.health.set("", state)
        await self.health.set(SERVICE_NAME, state)

    async def drain(self, grace_s: float) -> None:
        """Refuse new calls, let live ones finish for up to `grace_s`, then stop everything."""
        self.servicer.is_draining = True
        await self._set_health(False)
        logger.info("draining: %d live streams, grace %.1f s", self.servicer.num_active, grace_s)
        # gRPC calls and the HTTP face's streams (in-process calls) get the same grace, side by side.
        http_drain = [self.http.drain(grace_s)] if self.http is not None else []
        await asyncio.gather(self.server.stop(grace_s), *http_drain)
        # Cancelled handlers send their ABORTs from their finally blocks; let them run before
        # the sockets close.
        for _ in range(100):
            if not self.servicer.num_active:
                break
            await asyncio.sleep(0.01)
        if self.http is not None:
            await self.http.stop()
        await self.backend.stop()
        logger.info("gateway stopped")
