"""A backend's gRPC side port: grpc.health.v1, server reflection and one admin service.

It comes up before the model loads with health NOT_SERVING, so a probe can tell "loading" from
"dead"; the owner flips it to SERVING once the model is ready and back at the start of shutdown.
The admin servicer is registered in the constructor because a started grpc server takes no new
services.
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent import futures

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from service_common.reflection import enable_reflection
from service_common.startup import GRPC_SERVER_OPTIONS, add_grpc_port
from service_common.strict_requests import add_strict_servicer

logger = logging.getLogger(__name__)

AddServicerFn = Callable[[object, grpc.Server], None]   # the generated add_<Name>Servicer_to_server


class SidePortServer:
    """Health + reflection + `admin_service` (its full name, e.g. "tts.internal.v1.TalkerAdmin")."""

    def __init__(self, host: str, port: int, admin_service: str, add_servicer: AddServicerFn, servicer, *,
                 thread_name_prefix: str, max_workers: int = 8, max_message_bytes: int | None = None) -> None:
        options = list(GRPC_SERVER_OPTIONS)
        if max_message_bytes is not None:
            options += [("grpc.max_send_message_length", max_message_bytes),
                        ("grpc.max_receive_message_length", max_message_bytes)]
        self.admin_service = admin_service
        self.server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix=thread_name_prefix),
            options=options)
        self.health = health.HealthServicer()
        # malformed request bytes: INVALID_ARGUMENT naming the message, not gRPC's UNKNOWN
        add_strict_servicer(health_pb2_grpc.add_HealthServicer_to_server, self.health, self.server)
        add_strict_servicer(add_servicer, servicer, self.server)
        enable_reflection((admin_service, health.SERVICE_NAME), self.server)
        self.set_serving(False)
        self.port = add_grpc_port(self.server, host, port, "gRPC side port")

    def start(self) -> None:
        self.server.start()
        logger.info("gRPC side port %d: health, reflection, %s", self.port, self.admin_service)

    def set_serving(self, is_serving: bool) -> None:
        status = health_pb2.HealthCheckResponse.SERVING if is_serving else health_pb2.HealthCheckResponse.NOT_SERVING
        for service in ("", self.admin_service):
            self.health.set(service, status)

    def stop(self, grace_s: float = 1.0) -> None:
        self.set_serving(False)
        self.server.stop(grace_s).wait(grace_s + 1.0)
