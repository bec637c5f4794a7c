"""The HTTP face's calls into the gateway's own TextToSpeech servicer, in-process: no loopback gRPC
hop (a second protobuf serialization and a grpc.aio client and server per message, all in the
gateway's one event loop).

The calls go through the same servicer methods as gRPC's, so admission (max streams, draining),
limits, voices, metrics and statuses are the gRPC ones. What gRPC itself did around a call is
done here the same way:
- each StreamSynthesize runs in a task of its own, as grpc.aio runs each handler, and feeds a
  bounded queue: a consumer that stops reading stops the handler at its next message, as flow
  control would;
- `context.abort(code, details)` raises LocalRpcError, shaped like grpc.aio.AioRpcError (`.code()`,
  `.details()`), and any other exception of a handler becomes UNKNOWN (logged), as grpc.aio does;
- cancelling a call (or closing, or dropping, its responses) cancels the handler task:
  CancelledError reaches the servicer where it waits, as on a gRPC client's cancel, so its session
  closes and the talker and vocoder are told to abort.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import grpc

from protos.tts.v1 import config_pb2, tts_pb2, voices_pb2

if TYPE_CHECKING:
    from gateway.servicer import TextToSpeechServicer

logger = logging.getLogger(__name__)

MAX_BUFFERED_RESPONSES = 64   # per stream: how far a handler may run ahead of its reader
_END = object()               # in a stream's queue: the handler has ended (its outcome is on the call)


class LocalRpcError(Exception):
    """A call's failure status, with grpc.aio.AioRpcError's `code()` and `details()`."""

    def __init__(self, code: grpc.StatusCode, details: str = "") -> None:
        super().__init__(f"{code.name}: {details}")
        self._code, self._details = code, details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details


class LocalContext:
    """What the servicer uses of grpc.aio.ServicerContext: no deadline, and abort."""

    def time_remaining(self) -> float | None:
        return None

    async def abort(self, code: grpc.StatusCode, details: str = "") -> None:
        raise LocalRpcError(code, details)


class LocalCall:
    """One StreamSynthesize: the servicer's handler in a task of its own, its responses in a bounded
    queue. `read()` returns the next response, None after the last one, or raises the handler's
    status once the responses before it are read; after `cancel()` it raises CANCELLED."""

    def __init__(self, servicer: TextToSpeechServicer, requests: AsyncIterator, max_buffered: int) -> None:
        self._queue: asyncio.Queue = asyncio.Queue(max_buffered)
        self._error: LocalRpcError | None = None
        self._is_ended = False        # the reader has seen the end
        self._is_cancelled = False
        self.task = asyncio.get_running_loop().create_task(self._run(servicer, requests))
        self.task.add_done_callback(self._on_done)

    async def _run(self, servicer: TextToSpeechServicer, requests: AsyncIterator) -> None:
        handler = servicer.StreamSynthesize(requests, LocalContext())
        try:
            async for response in handler:
                if self._is_cancelled:
                    # The handler went on after its cancel: Python 3.11's asyncio.wait_for returns a
                    # result that came as it was cancelled, dropping the CancelledError.
                    await _cancel_at_yield(handler, asyncio.CancelledError())
                try:
                    await self._queue.put(response)
                except asyncio.CancelledError as exc:
                    # Cancelled while the handler waits at its yield: raise it there, as grpc.aio's
                    # cancel reaches a handler, so the servicer's clean-up runs now.
                    await _cancel_at_yield(handler, exc)
        except LocalRpcError as exc:
            self._error = exc
        except asyncio.CancelledError:
            self._error = LocalRpcError(grpc.StatusCode.CANCELLED, "the call was cancelled")
            raise
        except Exception as exc:
            logger.exception("StreamSynthesize (HTTP) failed")
            self._error = LocalRpcError(grpc.StatusCode.UNKNOWN, f"Unexpected {type(exc)}: {exc}")
        finally:
            await handler.aclose()   # nothing to do unless something above broke off mid-stream

    def _on_done(self, task: asyncio.Task) -> None:
        if self._error is None and task.cancelled():   # cancelled before it ever ran
            self._error = LocalRpcError(grpc.StatusCode.CANCELLED, "the call was cancelled")
        elif self._error is None and task.exception() is not None:   # a BaseException _run lets through
            self._error = LocalRpcError(grpc.StatusCode.UNKNOWN, f"Unexpected {type(task.exception())}")
        if not self._queue.full():   # wake a waiting reader; a full queue has none, and read() checks done()
            self._queue.put_nowait(_END)

    def cancel(self) -> bool:
        """Cancel the handler (False if it has ended); a later read raises CANCELLED."""
        if self.task.done() or self._is_cancelled:   # once: a second cancel would cut the clean-up short
            return False
        self._is_cancelled = True
        self.task.cancel()
        if not self._queue.full():   # a reader waiting now wakes to CANCELLED
            self._queue.put_nowait(_END)
        return True

    def cancelled(self) -> bool:
        return self._is_cancelled

    def done(self) -> bool:
        return self.task.done()

    async def read(self) -> tts_pb2.StreamSynthesizeResponse | None:
        while True:
            if self._is_cancelled:
                raise LocalRpcError(grpc.StatusCode.CANCELLED, "the call was cancelled")
            if self._is_ended or (self._queue.empty() and self.task.done()):
                self._is_ended = True
                if self._error is not None:
                    raise self._error
                return None
            item = await self._queue.get()
            if item is not _END:
                return item
            # _END came from cancel() or from the task's end (nothing follows it): the top says which


async def _cancel_at_yield(handler, exc: asyncio.CancelledError) -> None:
    """Raise `exc` in `handler` where it waits at a yield, and then out of here."""
    await handler.athrow(exc)   # raises it back, unless the handler yields again:
    await handler.aclose()
    raise exc


class LocalResponses:
    """A call's responses as an async iterator; `aclose()` (or dropping it unclosed) cancels the
    call unless it has ended, as closing grpc.aio's iterator or losing the call does."""

    def __init__(self, call: LocalCall) -> None:
        self.call = call
        self._loop = asyncio.get_running_loop()

    def __aiter__(self) -> LocalResponses:
        return self

    async def __anext__(self) -> tts_pb2.StreamSynthesizeResponse:
        response = await self.call.read()
        if response is None:
            raise StopAsyncIteration
        return response

    async def aclose(self) -> None:
        self.call.cancel()

    def __del__(self) -> None:
        # A response never iterated (the client left before the body began) leaves no finally to
        # run: the handler would hold its admission slot, blocked on a full queue, for good.
        # The collector may run in a worker thread (asyncio.to_thread): cancel from the loop.
        call = getattr(self, "call", None)
        if call is not None and not call.done():
            try:
                self._loop.call_soon_threadsafe(call.cancel)
            except RuntimeError:   # the loop is closed: its tasks are gone with it
                pass


class LocalGateway:
    """The HTTP face's calls on the gateway's servicer; `model()` is cached (it never changes)."""

    def __init__(self, servicer: TextToSpeechServicer, max_buffered: int = MAX_BUFFERED_RESPONSES) -> None:
        self.servicer, self.max_buffered = servicer, max_buffered
        self._model: voices_pb2.ModelVoices | None = None
        self.live: set[LocalCall] = set()   # the streams whose handler has not ended

    async def voices(self) -> voices_pb2.ListVoicesResponse:
        return await self.servicer.ListVoices(voices_pb2.ListVoicesRequest(), LocalContext())

    async def model(self) -> voices_pb2.ModelVoices:
        if self._model is None:
            self._model = next(m for m in (await self.voices()).models if m.is_default)
        return self._model

    async def register_voice(self, request: voices_pb2.RegisterVoiceRequest) -> voices_pb2.RegisterVoiceResponse:
        return await self.servicer.RegisterVoice(request, LocalContext())

    async def delete_voice(self, request: voices_pb2.DeleteVoiceRequest) -> voices_pb2.DeleteVoiceResponse:
        return await self.servicer.DeleteVoice(request, LocalContext())

    def stream(self, requests: AsyncIterator[tts_pb2.StreamSynthesizeRequest]) -> tuple[LocalCall, LocalResponses]:
        """(call, responses): StreamSynthesize reading `requests`. A call the servicer refuses raises
        its status (LocalRpcError) from `responses`; `call.cancel()` or `responses.aclose()` ends it."""
        call = LocalCall(self.servicer, requests, self.max_buffered)
        self.live.add(call)
        call.task.add_done_callback(lambda _: self.live.discard(call))
        return call, LocalResponses(call)

    async def drain(self, grace_s: float) -> None:
        """Let live streams finish for up to `grace_s`, then cancel the rest (as the gRPC server's
        stop does its calls) and wait briefly for their clean-up."""
        if self.live:
            await asyncio.wait({call.task for call in self.live}, timeout=grace_s)
        for call in list(self.live):
            call.cancel()
        if self.live:
            await asyncio.wait({call.task for call in self.live}, timeout=5.0)


def model_type_name(model: voices_pb2.ModelVoices) -> str:
    """"custom_voice", "voice_design" or "base", as the HTTP API names model types."""
    return voices_pb2.ModelType.Name(model.model_type).removeprefix("MODEL_TYPE_").lower()


async def whole_text_requests(config: config_pb2.SynthesisConfig, text: str):
    yield tts_pb2.StreamSynthesizeRequest(config=config)
    yield tts_pb2.StreamSynthesizeRequest(text=text)
    yield tts_pb2.StreamSynthesizeRequest(end=tts_pb2.EndOfInput())
