"""`POST /v1/audio/speech`: one synthesis over the gateway's StreamSynthesize, answered as audio bytes
(streamed as they are made) or as server-sent events.

The HTTP status is decided by the stream's first message: everything that can be refused (a bad
field, an unknown voice, overload, no talker) is refused before the start message, so it arrives
as a proper status with an OpenAI-style error body. A failure after audio has started can only end
the response early: the chunked body is cut off (audio), or an `error` event ends it (sse).
"""
from __future__ import annotations

import base64
import json
import logging

import numpy as np
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from gateway.http.errors import HttpError, grpc_error, grpc_error_response, http_error_response
from gateway.http.local_calls import LocalGateway, LocalRpcError, model_type_name, whole_text_requests
from gateway.http.speech_request import SpeechRequest, parse_speech_request
from protos.tts.v1 import tts_pb2

logger = logging.getLogger(__name__)


def summary_dict(summary: tts_pb2.SynthesisSummary) -> dict:
    return {"audio_s": summary.audio_s, "time_to_first_audio_ms": summary.time_to_first_audio_ms,
            "real_time_factor": summary.real_time_factor, "num_frames": summary.num_frames,
            "num_text_tokens": summary.num_text_tokens,
            "finish_reason": tts_pb2.FinishReason.Name(summary.finish_reason).removeprefix("FINISH_REASON_").lower(),
            "num_stalls": summary.num_stalls, "longest_stall_ms": summary.longest_stall_ms}


def _sse(event: dict) -> bytes:
    return f"data: {json.dumps(event)}\n\n".encode()


class SpeechEndpoint:
    def __init__(self, client: LocalGateway, max_text_chars: int) -> None:
        self.client, self.max_text_chars = client, max_text_chars

    async def handle(self, request: Request) -> Response:
        try:
            body = json.loads(await request.body() or b"null")
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            return http_error_response(HttpError(400, f"the request body is not JSON: {exc}"))
        responses = None
        try:
            speech = parse_speech_request(body, await self.client.model(), self.max_text_chars)
            _, responses = self.client.stream(whole_text_requests(speech.config, speech.text))
            try:   # the start message, or the refusal as an RPC error
                start = await responses.__anext__()
            except StopAsyncIteration:
                raise HttpError(502, "the gateway's stream ended before it started") from None
        except HttpError as exc:
            return http_error_response(exc)
        except LocalRpcError as exc:
            if responses is not None:
                await responses.aclose()
            return grpc_error_response(exc)
        headers = {"X-Request-Id": start.start.request_id}
        if speech.stream_format == "sse":
            return StreamingResponse(self._events(responses, speech), media_type="text/event-stream", headers=headers)
        if speech.output.is_streamed:
            return StreamingResponse(self._audio(responses), media_type=speech.output.content_type, headers=headers)
        return await self._whole(responses, speech, headers)

    async def _messages(self, responses):
        """The stream's audio and summary messages; the call is cancelled if the client goes away."""
        try:
            async for message in responses:
                yield message
        finally:
            await responses.aclose()   # cancels the call unless it has ended

    async def _audio(self, responses):
        try:
            async for message in self._messages(responses):
                if message.HasField("audio"):
                    yield message.audio.audio
        except LocalRpcError as exc:
            # Headers are gone: the only signal left is a body cut short (no terminating chunk).
            logger.info("HTTP speech stream ended early: %s %s", exc.code().name, exc.details())
            raise

    async def _events(self, responses, speech: SpeechRequest):
        pcm = []
        try:
            async for message in self._messages(responses):
                if message.HasField("audio") and speech.output.is_streamed:
                    yield _sse({"type": "speech.audio.delta", "audio": base64.b64encode(message.audio.audio).decode()})
                elif message.HasField("audio"):
                    pcm.append(message.audio.audio)
                elif message.HasField("summary"):
                    if pcm:
                        audio = speech.output.whole_file(np.frombuffer(b"".join(pcm), "<f4"))
                        yield _sse({"type": "speech.audio.delta", "audio": base64.b64encode(audio).decode()})
                    s = message.summary
                    yield _sse({"type": "speech.audio.done",
                                "usage": {"input_tokens": s.num_text_tokens, "output_tokens": s.num_frames,
                                          "total_tokens": s.num_text_tokens + s.num_frames},
                                "summary": summary_dict(s)})
        except LocalRpcError as exc:
            status, body = grpc_error(exc)
            yield _sse({"type": "error", **body, "status": status})

    async def _whole(self, responses, speech: SpeechRequest, headers: dict) -> Response:
        pcm, summary = [], None
        try:
            async for message in self._messages(responses):
                if message.HasField("audio"):
                    pcm.append(message.audio.audio)
                elif message.HasField("summary"):
                    summary = message.summary
        except LocalRpcError as exc:
            return grpc_error_response(exc)
        audio = speech.output.whole_file(np.frombuffer(b"".join(pcm), "<f4"))
        if summary is not None:
            headers["X-Time-To-First-Audio-Ms"] = f"{summary.time_to_first_audio_ms:.1f}"
            headers["X-Audio-Seconds"] = f"{summary.audio_s:.3f}"
        return Response(audio, media_type=speech.output.content_type, headers=headers)


async def list_models(client: LocalGateway) -> JSONResponse:
    model = await client.model()
    return JSONResponse({"object": "list", "data": [
        {"id": model.model, "object": "model", "created": 0, "owned_by": "qwen3-tts-serve",
         "model_type": model_type_name(model), "model_size": model.model_size}]})
