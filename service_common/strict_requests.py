"""Request bytes that do not parse end the call with INVALID_ARGUMENT, not UNKNOWN.

gRPC runs a method's request_deserializer in its core and turns any exception there into
UNKNOWN "Unexpected <class 'DecodeError'>", with no way to pick the status. So every method is
registered here with no deserializer (its handler gets the raw bytes), and the wrapper parses
them itself: a message that does not parse aborts the call with INVALID_ARGUMENT
"request is not a valid <full message name> message: ...".

Works for sync (grpc.server) and asyncio (grpc.aio.server) servers and every call shape. For a
client stream, a bad message in the middle may instead be raised into the servicer as
`stream_error(message)`: its own error path then ends the call (and cleans up what the call
started), as it does for any other bad message of the stream.
"""
from __future__ import annotations

import inspect
import logging
from collections.abc import Callable

import grpc

logger = logging.getLogger(__name__)

AddServicerFn = Callable[[object, object], None]   # the generated add_<Name>Servicer_to_server
_INVALID = grpc.StatusCode.INVALID_ARGUMENT


class _Capture:
    """Stands in for a server while the generated add_*_to_server hands over its method handlers."""

    def __init__(self) -> None:
        self.service = ""
        self.handlers: dict[str, grpc.RpcMethodHandler] = {}

    def add_generic_rpc_handlers(self, _handlers) -> None:
        pass   # the same handlers also come through add_registered_method_handlers

    def add_registered_method_handlers(self, service: str, handlers: dict) -> None:
        self.service, self.handlers = service, dict(handlers)


class _Parser:
    """bytes -> message, or the INVALID_ARGUMENT text when they are not one."""

    def __init__(self, deserializer: Callable[[bytes], object], method: str) -> None:
        self.deserializer = deserializer
        message_class = getattr(deserializer, "__self__", None)   # FromString is a classmethod
        descriptor = getattr(message_class, "DESCRIPTOR", None)
        self.message_name = descriptor.full_name if descriptor is not None else f"request of {method}"
        self.method = method

    def parse(self, data: bytes) -> tuple[object | None, str]:
        try:
            return self.deserializer(data), ""
        except Exception as exc:   # any failure to parse client bytes is the client's fault
            detail = str(exc) or type(exc).__name__
            logger.debug("%s: malformed request (%d bytes): %s", self.method, len(data), detail)
            return None, f"request is not a valid {self.message_name} message: {detail}"


def add_strict_servicer(add_servicer: AddServicerFn, servicer, server, *,
                        on_invalid: Callable[[], None] = lambda: None,
                        stream_error: Callable[[str], Exception] | None = None) -> None:
    """Register `servicer` through its generated `add_servicer`, each method parsing its own requests.

    `on_invalid` runs once per call this layer rejects (e.g. to count it); a bad message of a
    client stream raised as `stream_error(text)` is left to the servicer to report and count.
    """
    capture = _Capture()
    add_servicer(servicer, capture)
    is_aio = isinstance(server, grpc.aio.Server)
    wrapped = {}
    for name, handler in capture.handlers.items():
        method = f"/{capture.service}/{name}"
        if handler.request_deserializer is None:
            wrapped[name] = handler
            continue
        parser = _Parser(handler.request_deserializer, method)
        wrap = _AIO_WRAPPERS if is_aio else _SYNC_WRAPPERS
        kind = (handler.request_streaming, handler.response_streaming)
        behavior = getattr(handler, _BEHAVIOR_FIELD[kind])
        wrapped[name] = _MAKE_HANDLER[kind](wrap[kind](behavior, parser, on_invalid, stream_error),
                                            request_deserializer=None,
                                            response_serializer=handler.response_serializer)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(capture.service, wrapped),))
    server.add_registered_method_handlers(capture.service, wrapped)


_BEHAVIOR_FIELD = {(False, False): "unary_unary", (False, True): "unary_stream",
                   (True, False): "stream_unary", (True, True): "stream_stream"}
_MAKE_HANDLER = {(False, False): grpc.unary_unary_rpc_method_handler,
                 (False, True): grpc.unary_stream_rpc_method_handler,
                 (True, False): grpc.stream_unary_rpc_method_handler,
                 (True, True): grpc.stream_stream_rpc_method_handler}


# ---- synchronous servers: context.abort raises ------------------------------------------------
def _sync_parse_or_abort(parser, on_invalid, data, context):
    request, error = parser.parse(data)
    if request is None:
        on_invalid()
        context.abort(_INVALID, error)
    return request


def _sync_requests(parser, on_invalid, stream_error, request_iterator, context):
    for data in request_iterator:
        request, error = parser.parse(data)
        if request is None:
            if stream_error is not None:
                raise stream_error(error)
            on_invalid()
            context.abort(_INVALID, error)
        yield request


def _sync_unary_unary(behavior, parser, on_invalid, _stream_error):
    def handle(data, context):
        return behavior(_sync_parse_or_abort(parser, on_invalid, data, context), context)
    return handle


def _sync_unary_stream(behavior, parser, on_invalid, _stream_error):
    def handle(data, context):
        yield from behavior(_sync_parse_or_abort(parser, on_invalid, data, context), context)
    return handle


def _sync_stream_in(behavior, parser, on_invalid, stream_error):
    def handle(request_iterator, context):
        return behavior(_sync_requests(parser, on_invalid, stream_error, request_iterator, context), context)
    return handle


_SYNC_WRAPPERS = {(False, False): _sync_unary_unary, (False, True): _sync_unary_stream,
                  (True, False): _sync_stream_in, (True, True): _sync_stream_in}


# ---- asyncio servers: `await context.abort` raises; streaming replies may be async generators --
async def _aio_parse_or_abort(parser, on_invalid, data, context):
    request, error = parser.parse(data)
    if request is None:
        on_invalid()
        await context.abort(_INVALID, error)
    return request


async def _aio_requests(parser, on_invalid, stream_error, request_iterator, context):
    async for data in request_iterator:
        request, error = parser.parse(data)
        if request is None:
            if stream_error is not None:
                raise stream_error(error)
            on_invalid()
            await context.abort(_INVALID, error)
        yield request


def _aio_reply(behavior, request_of):
    """A handler of the same kind as `behavior` (async generator or coroutine) fed `request_of(...)`."""
    if inspect.isasyncgenfunction(behavior):
        async def stream_reply(request_or_iterator, context):
            async for response in behavior(await request_of(request_or_iterator, context), context):
                yield response
        return stream_reply

    async def reply(request_or_iterator, context):
        return await behavior(await request_of(request_or_iterator, context), context)
    return reply


def _aio_unary_in(behavior, parser, on_invalid, _stream_error):
    return _aio_reply(behavior, lambda data, context: _aio_parse_or_abort(parser, on_invalid, data, context))


def _aio_stream_in(behavior, parser, on_invalid, stream_error):
    async def requests_of(request_iterator, context):
        return _aio_requests(parser, on_invalid, stream_error, request_iterator, context)
    return _aio_reply(behavior, requests_of)


_AIO_WRAPPERS = {(False, False): _aio_unary_in, (False, True): _aio_unary_in,
                 (True, False): _aio_stream_in, (True, True): _aio_stream_in}
