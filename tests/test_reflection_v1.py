"""Server reflection v1 beside v1alpha, on the gateway (asyncio server) and a side port (sync
server): a raw v1 call (bytes of our own v1 messages on /grpc.reflection.v1.ServerReflection/...)
lists the services and returns the descriptor of a symbol; v1alpha keeps working."""
from __future__ import annotations

import asyncio

import grpc
import pytest
from google.protobuf import descriptor_pb2
from grpc_reflection.v1alpha import reflection_pb2 as alpha_pb2

from checkpoint.files import resolve_model_dir
from protos.reflection.v1 import reflection_pb2 as v1_pb2
from protos.tts.internal.v1 import admin_pb2_grpc
from service_common.side_port import SidePortServer
from test_gateway_support import FakeTalker, running_gateway

pytestmark = pytest.mark.timeout(60)
V1_PATH = "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo"
V1ALPHA_PATH = "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"


def ask(channel: grpc.Channel, path: str, request) -> list:
    """One raw reflection exchange: the request's bytes out, the responses parsed as `request`'s kind."""
    response_class = v1_pb2.ServerReflectionResponse if path == V1_PATH else alpha_pb2.ServerReflectionResponse
    call = channel.stream_stream(path)   # no serializers: bytes both ways
    return [response_class.FromString(data) for data in call(iter([request.SerializeToString()]), timeout=10)]


def listed(channel: grpc.Channel, path: str) -> set[str]:
    request_class = v1_pb2.ServerReflectionRequest if path == V1_PATH else alpha_pb2.ServerReflectionRequest
    [response] = ask(channel, path, request_class(list_services=""))
    return {s.name for s in response.list_services_response.service}


def symbol_file(channel: grpc.Channel, symbol: str) -> descriptor_pb2.FileDescriptorProto:
    [response] = ask(channel, V1_PATH, v1_pb2.ServerReflectionRequest(file_containing_symbol=symbol))
    assert response.WhichOneof("message_response") == "file_descriptor_response", response
    return descriptor_pb2.FileDescriptorProto.FromString(response.file_descriptor_response.file_descriptor_proto[0])


class _NoAdmin(admin_pb2_grpc.TalkerAdminServicer):
    """Reflection only needs the service registered; its calls are never made here."""

    def GetStats(self, request, context):
        context.abort(grpc.StatusCode.UNIMPLEMENTED, "not in this test")

    def GenerateCodes(self, request, context):
        context.abort(grpc.StatusCode.UNIMPLEMENTED, "not in this test")


def test_side_port_serves_reflection_v1_and_v1alpha():
    server = SidePortServer("127.0.0.1", 0, "tts.internal.v1.TalkerAdmin",
                            admin_pb2_grpc.add_TalkerAdminServicer_to_server, _NoAdmin(), thread_name_prefix="test")
    server.start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            expected = {"tts.internal.v1.TalkerAdmin", "grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection",
                        "grpc.reflection.v1alpha.ServerReflection"}
            assert listed(channel, V1_PATH) == expected
            assert listed(channel, V1ALPHA_PATH) == expected
            described = symbol_file(channel, "tts.internal.v1.TalkerAdmin")
            assert described.package == "tts.internal.v1"
            assert "TalkerAdmin" in [s.name for s in described.service]
            [missing] = ask(channel, V1_PATH, v1_pb2.ServerReflectionRequest(file_containing_symbol="no.Such"))
            assert missing.error_response.error_code == grpc.StatusCode.NOT_FOUND.value[0]
            assert missing.original_request.file_containing_symbol == "no.Such"
    finally:
        server.stop(0.5)


def test_gateway_serves_reflection_v1(tmp_path):
    talker = FakeTalker()

    async def body():
        async with running_gateway(resolve_model_dir("tiny"), [talker.endpoint], tmp_path) as gw:
            def check() -> None:
                with grpc.insecure_channel(f"127.0.0.1:{gw.port}") as channel:
                    names = listed(channel, V1_PATH)
                    assert {"tts.v1.TextToSpeech", "grpc.reflection.v1.ServerReflection"} <= names, names
                    assert listed(channel, V1ALPHA_PATH) == names
                    assert symbol_file(channel, "tts.v1.TextToSpeech").package == "tts.v1"
                    assert symbol_file(channel, "grpc.reflection.v1.ServerReflection").package == "grpc.reflection.v1"

            await asyncio.to_thread(check)

    try:
        asyncio.run(asyncio.wait_for(body(), 40))
    finally:
        talker.close()
