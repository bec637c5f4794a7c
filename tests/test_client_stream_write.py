"""The client keeps the server's status when the server ends a bidi call while the client is still
writing (grpc/grpc#36066: grpc.aio's own write would report INTERNAL instead)."""
from __future__ import annotations

import asyncio

import grpc
import pytest

from client.stream_write import WriteAfterEnd, write_keeping_status
from service_common.startup import GRPC_SERVER_OPTIONS

pytestmark = pytest.mark.timeout(120)
METHOD = "/test.Echo/Chat"
NUM_CALLS = 40
NUM_WRITES = 200


async def reject_at_once(request_iterator, context):
    async for _ in request_iterator:
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "config.speaker.name: unknown speaker 'x'")
    yield b""  # pragma: no cover - never reached


async def serve() -> tuple[grpc.aio.Server, int]:
    server = grpc.aio.server(options=GRPC_SERVER_OPTIONS)
    handler = grpc.stream_stream_rpc_method_handler(reject_at_once)
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler("test.Echo", {"Chat": handler})])
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, port


async def one_call(channel, write) -> grpc.StatusCode:
    call = channel.stream_stream(METHOD)(timeout=30)

    async def writer():
        try:
            for _ in range(NUM_WRITES):
                await write(call, b"x" * 64)
            await call.done_writing()
        except (WriteAfterEnd, grpc.aio.AioRpcError, asyncio.InvalidStateError):
            pass

    task = asyncio.get_running_loop().create_task(writer())
    try:
        while await call.read() is not grpc.aio.EOF:
            pass
    except grpc.aio.AioRpcError as exc:
        return exc.code()
    finally:
        await task
    return grpc.StatusCode.OK


async def codes_seen(write) -> list[grpc.StatusCode]:
    server, port = await serve()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            return [await one_call(channel, write) for _ in range(NUM_CALLS)]
    finally:
        await server.stop(None)


def test_status_of_a_call_the_server_ended_survives_later_writes():
    codes = asyncio.run(asyncio.wait_for(codes_seen(write_keeping_status), 100))
    assert codes == [grpc.StatusCode.INVALID_ARGUMENT] * NUM_CALLS


def test_write_on_an_ended_call_raises_write_after_end():
    async def main():
        server, port = await serve()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                call = channel.stream_stream(METHOD)(timeout=30)
                await write_keeping_status(call, b"config")
                assert await call.code() == grpc.StatusCode.INVALID_ARGUMENT
                with pytest.raises(WriteAfterEnd):
                    await write_keeping_status(call, b"more")
                assert "config.speaker.name" in await call.details()
        finally:
            await server.stop(None)

    asyncio.run(asyncio.wait_for(main(), 60))
