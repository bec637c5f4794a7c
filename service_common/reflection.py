"""Server reflection on both versions: grpc.reflection.v1 (what current clients ask for first)
and v1alpha (what grpcio-reflection implements, and older clients use).

The two protocols are the same messages under another package, so a v1 call is answered by the
v1alpha servicer: each request is re-read as v1alpha from its bytes and each response as v1.
"""
from __future__ import annotations

from collections.abc import Iterable

import grpc
from grpc_reflection.v1alpha import reflection
from grpc_reflection.v1alpha import reflection_pb2 as alpha_pb2
from grpc_reflection.v1alpha import reflection_pb2_grpc as alpha_pb2_grpc
from grpc_reflection.v1alpha._async import ReflectionServicer as AsyncAlphaServicer

from protos.reflection.v1 import reflection_pb2 as v1_pb2
from protos.reflection.v1 import reflection_pb2_grpc as v1_pb2_grpc

V1_SERVICE_NAME = v1_pb2.DESCRIPTOR.services_by_name["ServerReflection"].full_name
V1ALPHA_SERVICE_NAME = reflection.SERVICE_NAME


def _to_alpha(request: v1_pb2.ServerReflectionRequest) -> alpha_pb2.ServerReflectionRequest:
    return alpha_pb2.ServerReflectionRequest.FromString(request.SerializeToString())


def _to_v1(response: alpha_pb2.ServerReflectionResponse) -> v1_pb2.ServerReflectionResponse:
    return v1_pb2.ServerReflectionResponse.FromString(response.SerializeToString())


class _SyncV1Servicer(v1_pb2_grpc.ServerReflectionServicer):
    def __init__(self, alpha: reflection.ReflectionServicer) -> None:
        self.alpha = alpha

    def ServerReflectionInfo(self, request_iterator, context):
        for response in self.alpha.ServerReflectionInfo(map(_to_alpha, request_iterator), context):
            yield _to_v1(response)


class _AsyncV1Servicer(v1_pb2_grpc.ServerReflectionServicer):
    def __init__(self, alpha: AsyncAlphaServicer) -> None:
        self.alpha = alpha

    async def ServerReflectionInfo(self, request_iterator, context):
        async def alpha_requests():
            async for request in request_iterator:
                yield _to_alpha(request)

        async for response in self.alpha.ServerReflectionInfo(alpha_requests(), context):
            yield _to_v1(response)


def enable_reflection(service_names: Iterable[str], server) -> None:
    """Serve reflection v1 and v1alpha on `server` (sync or asyncio), listing `service_names`
    plus both reflection services."""
    names = (*service_names, V1_SERVICE_NAME, V1ALPHA_SERVICE_NAME)
    if isinstance(server, grpc.aio.Server):
        alpha = AsyncAlphaServicer(names)
        v1 = _AsyncV1Servicer(alpha)
    else:
        alpha = reflection.ReflectionServicer(names)
        v1 = _SyncV1Servicer(alpha)
    alpha_pb2_grpc.add_ServerReflectionServicer_to_server(alpha, server)
    v1_pb2_grpc.add_ServerReflectionServicer_to_server(v1, server)
