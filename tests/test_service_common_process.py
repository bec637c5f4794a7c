"""service_common's process plumbing, in-process: endpoint syntax, the ready file, stop signals,
and the gRPC side port (health flips, reflection, the admin service registered)."""
from __future__ import annotations

import json
import os
import signal
import socket
import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from protos.tts.internal.v1 import admin_pb2, admin_pb2_grpc
from service_common.endpoints import check_endpoint
from service_common.process import StopSignal, write_ready_file
from service_common.side_port import SidePortServer
from service_common.startup import StartupError

ADMIN = admin_pb2.DESCRIPTOR.services_by_name["TalkerAdmin"].full_name


@pytest.mark.parametrize("endpoint", ["tcp://127.0.0.1:5555", "tcp://*:*", "tcp://[::1]:7", "ipc:///tmp/x",
                                      "inproc://loop"])
def test_check_endpoint_accepts_zeromq_addresses(endpoint):
    check_endpoint(endpoint, "bind endpoint")


@pytest.mark.parametrize("endpoint", ["tcp://host", "http://host:80", "127.0.0.1:5555", "", None])
def test_check_endpoint_names_the_bad_value(endpoint):
    with pytest.raises(ValueError, match="reply_to .* is not a ZeroMQ endpoint"):
        check_endpoint(endpoint, "reply_to")


def test_write_ready_file_leaves_only_the_json(tmp_path):
    path = tmp_path / "svc.ready.json"
    write_ready_file(str(path), {"grpc_port": 1234, "peer_id": "p"})
    assert json.loads(path.read_text()) == {"grpc_port": 1234, "peer_id": "p"}
    assert [p.name for p in tmp_path.iterdir()] == ["svc.ready.json"]


def _deliver(signum: int, stop: StopSignal, timeout_s: float = 5.0) -> None:
    """Signal ourselves; Python runs the handler in the main thread at the next bytecode."""
    stop.event.clear()
    os.kill(os.getpid(), signum)
    assert stop.event.wait(timeout_s), f"{signal.Signals(signum).name} not handled within {timeout_s} s"


def test_stop_signal_before_and_after_a_loop_is_attached():
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    calls = []
    try:
        stop = StopSignal()
        assert not stop.is_set()
        _deliver(signal.SIGTERM, stop)          # during start-up: nothing to stop yet
        stop.attach(lambda: calls.append("stop"))
        assert calls == ["stop"]                # attached late: stopped at once
        _deliver(signal.SIGINT, stop)
        assert calls == ["stop", "stop"]
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, handler)


def _health(channel, service: str) -> int:
    return health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=service), timeout=5).status


class _UnimplementedAdmin(admin_pb2_grpc.TalkerAdminServicer):
    """The generated bases are abstract: a test servicer that answers UNIMPLEMENTED itself."""

    def GetStats(self, request, context):
        context.abort(grpc.StatusCode.UNIMPLEMENTED, "Method not implemented by the test servicer")

    def GenerateCodes(self, request, context):
        context.abort(grpc.StatusCode.UNIMPLEMENTED, "Method not implemented by the test servicer")


def test_side_port_health_reflection_and_admin_service():
    server = SidePortServer("127.0.0.1", 0, ADMIN, admin_pb2_grpc.add_TalkerAdminServicer_to_server,
                            _UnimplementedAdmin(), thread_name_prefix="test-grpc",
                            max_message_bytes=2**20)
    assert server.port > 0
    server.start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            assert {_health(channel, s) for s in ("", ADMIN)} == {health_pb2.HealthCheckResponse.NOT_SERVING}
            server.set_serving(True)
            assert {_health(channel, s) for s in ("", ADMIN)} == {health_pb2.HealthCheckResponse.SERVING}
            replies = reflection_pb2_grpc.ServerReflectionStub(channel).ServerReflectionInfo(
                iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=5)
            names = {s.name for s in next(iter(replies)).list_services_response.service}
            assert {ADMIN, "grpc.health.v1.Health"} <= names
            # The test servicer answers UNIMPLEMENTED: the admin service is registered (else the
            # channel would report UNIMPLEMENTED too, but with "Method not found").
            with pytest.raises(grpc.RpcError) as info:
                admin_pb2_grpc.TalkerAdminStub(channel).GetStats(admin_pb2.GetStatsRequest(), timeout=5)
            assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED
            assert "Method not implemented" in info.value.details()
    finally:
        started = time.monotonic()
        server.stop(grace_s=0.5)
        assert time.monotonic() - started < 5


def test_side_port_refuses_a_port_in_use():
    # A plain listening socket (no SO_REUSEPORT) holds the port, so grpc's bind must fail.
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        with pytest.raises(StartupError, match=f"127.0.0.1:{holder.getsockname()[1]} could not be bound: it is in use"):
            SidePortServer("127.0.0.1", holder.getsockname()[1], ADMIN,
                           admin_pb2_grpc.add_TalkerAdminServicer_to_server, _UnimplementedAdmin(),
                           thread_name_prefix="test-grpc")
