"""`/v1/audio/speech/stream`: text that arrives in pieces (an LLM's tokens) in, audio out, over a
WebSocket; StreamSynthesize's streaming-text mode in JSON.

Client -> server, text frames, in this order:
    {"type": "config", ...}         first and once: the speech API's fields but input/stream_format
                                    (response_format: pcm (default), wav or opus)
    {"type": "text", "text": "..."} any number; "flush": {"type": "flush", "id": "..."}
    {"type": "end"}                 end of input
Server -> client: {"type": "start", ...} (text), then binary frames of audio bytes, flush acks
{"type": "flush_ack", "id", "num_text_tokens"}, and last {"type": "summary", ...}; then it closes
(1000). A refusal or failure sends {"type": "error", "status": <HTTP status>, "error": {...}} and
closes with 1008 (the request's fault), 1013 (overloaded or no backend: try again later) or 1011.
"""
from __future__ import annotations

import asyncio
import json
import logging

from starlette.websockets import WebSocket, WebSocketDisconnect

from gateway.http.errors import HttpError, grpc_error, http_error
from gateway.http.formats import FORMATS
from gateway.http.local_calls import LocalGateway, LocalRpcError
from gateway.http.speech import summary_dict
from gateway.http.speech_request import SPEECH_FIELDS, parse_config
from protos.tts.v1 import config_pb2, tts_pb2

logger = logging.getLogger(__name__)

STREAM_FORMATS = {name: fmt for name, fmt in FORMATS.items() if fmt.is_streamed}
_CONFIG_FIELDS = (SPEECH_FIELDS - {"input", "stream_format"}) | {"type"}


def _close_code(status: int) -> int:
    return 1013 if status in (429, 503) else 1008 if status < 500 else 1011


class _ClientGone(Exception):
    pass


async def _next_message(websocket: WebSocket) -> dict:
    try:
        raw = await websocket.receive_text()
    except WebSocketDisconnect:
        raise _ClientGone() from None
    except KeyError:   # a binary frame where text was expected
        raise HttpError(400, "send JSON text frames") from None
    try:
        message = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise HttpError(400, f"a message is not JSON: {exc}") from None
    if not isinstance(message, dict) or not isinstance(message.get("type"), str):
        raise HttpError(400, "each message is a JSON object with a \"type\"", "type")
    return message


class StreamSocket:
    def __init__(self, client: LocalGateway, max_message_chars: int) -> None:
        self.client, self.max_message_chars = client, max_message_chars

    async def handle(self, websocket: WebSocket) -> None:
        await websocket.accept()
        call = responses = None
        try:
            first = await _next_message(websocket)
            if first["type"] != "config":
                raise HttpError(400, f"the first message must be a config, got {first['type']!r}", "type")
            config, output = parse_config(first, await self.client.model(), STREAM_FORMATS, "pcm",
                                          config_pb2.TEXT_MODE_STREAMING, _CONFIG_FIELDS)
            requests: asyncio.Queue = asyncio.Queue(maxsize=64)   # bounded: a fast client waits for the gateway
            await requests.put(tts_pb2.StreamSynthesizeRequest(config=config))
            call, responses = self.client.stream(_drain(requests))
            try:
                start = (await responses.__anext__()).start
            except StopAsyncIteration:
                raise HttpError(502, "the gateway's stream ended before it started") from None
            await websocket.send_json({"type": "start", "request_id": start.request_id, "format": output.name,
                                       "sample_rate_hz": start.audio_format.sample_rate_hz,
                                       "voice": start.voice.name, "language": start.language})
            refused: list[HttpError] = []   # a bad client message, found by the reader
            reader = asyncio.get_running_loop().create_task(self._read_client(websocket, requests, call, refused))
            try:
                await self._send_audio(websocket, responses)
            except (LocalRpcError, asyncio.CancelledError):
                if refused:    # the reader cancelled the call: report why
                    raise refused[0] from None
                raise
            finally:
                reader.cancel()
            await websocket.close(1000)
        except _ClientGone:
            logger.info("WebSocket client went away")
        except HttpError as exc:
            await _fail(websocket, *http_error(exc))
        except LocalRpcError as exc:
            await _fail(websocket, *grpc_error(exc))
        finally:
            if responses is not None:
                await responses.aclose()   # cancels the call unless it has ended

    async def _read_client(self, websocket: WebSocket, requests: asyncio.Queue, call, refused: list) -> None:
        """Client text -> StreamSynthesize requests until end; a bad message cancels the call, noting why."""
        try:
            while True:
                message = await _next_message(websocket)
                kind = message["type"]
                if kind == "text":
                    text = message.get("text")
                    if not isinstance(text, str) or len(text) > self.max_message_chars:
                        raise HttpError(400, f"text: expected a string of at most {self.max_message_chars} characters",
                                        "text")
                    await requests.put(tts_pb2.StreamSynthesizeRequest(text=text))
                elif kind == "flush":
                    await requests.put(tts_pb2.StreamSynthesizeRequest(
                        flush=tts_pb2.Flush(flush_id=str(message.get("id", "")))))
                elif kind == "end":
                    await requests.put(tts_pb2.StreamSynthesizeRequest(end=tts_pb2.EndOfInput()))
                    await requests.put(None)
                    return
                else:
                    raise HttpError(400, f"type: {kind!r}: expected text, flush or end after the config", "type")
        except _ClientGone:
            await requests.put(None)   # the requests end: the servicer takes that as end of input
        except HttpError as exc:
            refused.append(exc)
            call.cancel()

    async def _send_audio(self, websocket: WebSocket, responses) -> None:
        async for message in responses:
            if message.HasField("audio"):
                await websocket.send_bytes(message.audio.audio)
            elif message.HasField("flush_ack"):
                ack = message.flush_ack
                await websocket.send_json({"type": "flush_ack", "id": ack.flush_id,
                                           "num_text_tokens": ack.num_text_tokens})
            elif message.HasField("summary"):
                await websocket.send_json({"type": "summary", **summary_dict(message.summary)})


async def _drain(requests: asyncio.Queue):
    while (message := await requests.get()) is not None:
        yield message


async def _fail(websocket: WebSocket, status: int, body: dict) -> None:
    try:
        await websocket.send_json({"type": "error", "status": status, **body})
        await websocket.close(_close_code(status))
    except (WebSocketDisconnect, RuntimeError):  # already closed by the client
        pass
