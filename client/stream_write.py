"""One client-stream write that keeps the server's status when the server ends the call first.

grpc.aio's `call.write()` turns a write that fails because the server already ended the call (an
INVALID_ARGUMENT for a bad config, say) into INTERNAL "Internal error from Core", overwriting the
status the server sent whenever the failed write is processed after that status (grpc/grpc#36066,
fix proposed in grpc/grpc#43486, not released as of grpcio 1.85.1). A user would then see INTERNAL for
their own bad input, on a loaded machine about one call in three.

`write_keeping_status` sends the message the same way but, on a failed send, waits briefly for the
status the server sent instead of inventing one. Only when none comes (the batch was refused without
the call ending) does it fall back to grpc's own INTERNAL, so nothing waits forever. It reaches into
two private attributes of the call; where they are missing it uses the plain `call.write()`.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterable, AsyncIterator, Iterable

import grpc

try:   # private, hence guarded: without it the plain write is used
    from grpc._cython import cygrpc
except ImportError:   # pragma: no cover - every grpcio wheel has it today
    cygrpc = None

logger = logging.getLogger(__name__)

STATUS_WAIT_S = 2.0   # after a failed send: how long the server's status may take to arrive


class WriteAfterEnd(Exception):
    """The server ended the call before this message went out; the call's status says why."""


async def write_keeping_status(call: grpc.aio.StreamStreamCall, request, *,
                               status_wait_s: float = STATUS_WAIT_S) -> None:
    """Send `request` on `call`. Raises WriteAfterEnd when the call has ended (read the status from
    the call, e.g. by `await call.read()` or `await call.code()`)."""
    cython_call = getattr(call, "_cython_call", None)
    if cygrpc is None or cython_call is None or not all(
            hasattr(call, name) for name in ("_request_serializer", "_metadata_sent", "_done_writing_flag")):
        try:
            await call.write(request)
        except (grpc.aio.AioRpcError, grpc.aio.UsageError, asyncio.InvalidStateError) as exc:
            raise WriteAfterEnd(repr(exc)) from exc
        return
    if call.done():
        raise WriteAfterEnd("the call has already ended")
    if call._done_writing_flag:
        raise asyncio.InvalidStateError("write after done_writing()")
    await call._metadata_sent.wait()   # messages may only follow the initial metadata
    try:
        serializer = call._request_serializer   # None: the request is bytes already
        await cython_call.send_serialized_message(request if serializer is None else serializer(request))
    except cygrpc.InternalError as exc:
        try:
            await asyncio.wait_for(asyncio.shield(call.code()), status_wait_s)
        except asyncio.TimeoutError:
            logger.debug("send failed and no status came in %.1f s: %s", status_wait_s, exc)
            cython_call.set_internal_error(str(exc))   # what grpc.aio does, so readers are not left waiting
        raise WriteAfterEnd(str(exc)) from exc
    except asyncio.CancelledError:
        if not call.cancelled():
            call.cancel()
        raise


async def exchange(call: grpc.aio.StreamStreamCall, requests: AsyncIterable | Iterable) -> AsyncIterator:
    """Send `requests` on `call` from a task of their own (so requests can keep coming while responses
    are read), half-close, and yield each response. A call the server ended raises its own status."""
    async def write_all():
        try:
            if isinstance(requests, AsyncIterable):
                async for request in requests:
                    await write_keeping_status(call, request)
            else:
                for request in requests:
                    await write_keeping_status(call, request)
            await call.done_writing()
        except (WriteAfterEnd, grpc.aio.AioRpcError, grpc.aio.UsageError, asyncio.InvalidStateError) as exc:
            logger.debug("stream writer stopped: %r", exc)   # read() below raises the call's status

    writer = asyncio.get_running_loop().create_task(write_all())
    try:
        while (response := await call.read()) is not grpc.aio.EOF:
            yield response
    finally:
        writer.cancel()
        if not call.done():
            call.cancel()
