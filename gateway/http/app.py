"""The Starlette app: routes of the OpenAI-compatible API, the WebSocket and the page."""
from __future__ import annotations

from pathlib import Path

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse
from starlette.routing import Mount, Route, WebSocketRoute
from starlette.staticfiles import StaticFiles

from gateway.http.errors import grpc_error_response
from gateway.http.local_calls import LocalGateway, LocalRpcError
from gateway.http.speech import SpeechEndpoint, list_models
from gateway.http.voices import delete_voice, list_voices, register_voice
from gateway.http.ws import StreamSocket

STATIC_DIR = Path(__file__).resolve().parent / "static"


def build_app(client: LocalGateway, max_text_chars: int) -> Starlette:
    async def models(request: Request):
        try:
            return await list_models(client)
        except LocalRpcError as exc:
            return grpc_error_response(exc)

    async def voices(request: Request):
        try:
            if request.method == "POST":
                return await register_voice(client, request)
            return await list_voices(client)
        except LocalRpcError as exc:
            return grpc_error_response(exc)

    async def voice(request: Request):
        return await delete_voice(client, request.path_params["voice_id"])

    async def page(request: Request):
        return FileResponse(STATIC_DIR / "index.html")

    async def health(request: Request):
        return JSONResponse({"status": "ok"})

    routes = [
        Route("/v1/audio/speech", SpeechEndpoint(client, max_text_chars).handle, methods=["POST"]),
        WebSocketRoute("/v1/audio/speech/stream", StreamSocket(client, max_text_chars).handle),
        Route("/v1/models", models, methods=["GET"]),
        Route("/v1/audio/voices", voices, methods=["GET", "POST"]),
        Route("/v1/audio/voices/{voice_id}", voice, methods=["DELETE"]),
        Route("/", page, methods=["GET"]),
        Route("/healthz", health, methods=["GET"]),
        Mount("/static", StaticFiles(directory=STATIC_DIR), name="static"),
    ]
    return Starlette(routes=routes)
