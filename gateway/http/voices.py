"""`/v1/audio/voices`: what the served model can speak (speakers, or registered clones), and
registering / deleting a cloned voice from an uploaded clip (the page's upload)."""
from __future__ import annotations

import grpc
from starlette.requests import Request
from starlette.responses import JSONResponse

from gateway.http.errors import HttpError, grpc_error_response, http_error_response
from gateway.http.local_calls import LocalGateway, LocalRpcError, model_type_name
from protos.tts.v1 import config_pb2, voices_pb2

# The upload's file name decides how the clip is decoded.
_CLIP_ENCODINGS = {"wav": config_pb2.REFERENCE_AUDIO_ENCODING_WAV, "flac": config_pb2.REFERENCE_AUDIO_ENCODING_FLAC,
                   "ogg": config_pb2.REFERENCE_AUDIO_ENCODING_OGG, "opus": config_pb2.REFERENCE_AUDIO_ENCODING_OGG,
                   "mp3": config_pb2.REFERENCE_AUDIO_ENCODING_MP3}


def _registered(voice: voices_pb2.RegisteredVoice) -> dict:
    return {"id": voice.voice_id, "kind": "registered", "name": voice.display_name or voice.voice_id,
            "reference_text": voice.reference_text, "x_vector_only": voice.x_vector_only,
            "reference_audio_s": round(voice.reference_audio_s, 3)}


async def list_voices(client: LocalGateway) -> JSONResponse:
    listing = await client.voices()
    model = next(m for m in listing.models if m.is_default)
    voices = [{"id": s.name, "kind": "speaker", "name": s.name, "dialect": s.dialect} for s in model.speakers]
    voices += [_registered(v) for v in listing.registered_voices if v.model == model.model]
    return JSONResponse({"model": model.model, "model_type": model_type_name(model), "voices": voices,
                         "languages": list(model.languages), "supports_instructions": model.supports_instruct})


async def register_voice(client: LocalGateway, request: Request) -> JSONResponse:
    """multipart/form-data: file (the clip), voice_id, reference_text (optional: none = x-vector
    only), display_name, overwrite."""
    try:
        form = await request.form()
    except Exception as exc:  # starlette raises its own parse errors; all mean a malformed upload
        return http_error_response(HttpError(400, f"the upload is not valid multipart/form-data: {exc}"))
    try:
        upload = form.get("file")
        if upload is None or isinstance(upload, str):
            raise HttpError(400, "file: required: a reference clip (wav, flac, ogg, opus or mp3)", "file")
        extension = (upload.filename or "").rsplit(".", 1)[-1].lower()
        if extension not in _CLIP_ENCODINGS:
            raise HttpError(400, f"file: {upload.filename!r}: name it .wav, .flac, .ogg, .opus or .mp3", "file")
        reference_text = str(form.get("reference_text") or "")
        clone = config_pb2.CloneVoice(
            reference_audio=config_pb2.ReferenceAudio(data=await upload.read(), encoding=_CLIP_ENCODINGS[extension]),
            reference_text=reference_text, x_vector_only=not reference_text.strip())
        reply = await client.register_voice(voices_pb2.RegisterVoiceRequest(
            voice_id=str(form.get("voice_id") or ""), clone=clone, display_name=str(form.get("display_name") or ""),
            overwrite=str(form.get("overwrite") or "").lower() in ("1", "true", "yes", "on")))
    except HttpError as exc:
        return http_error_response(exc)
    except LocalRpcError as exc:
        return grpc_error_response(exc)
    return JSONResponse(_registered(reply.voice), status_code=201)


async def delete_voice(client: LocalGateway, voice_id: str) -> JSONResponse:
    try:
        reply = await client.delete_voice(voices_pb2.DeleteVoiceRequest(voice_id=voice_id))
    except LocalRpcError as exc:
        if exc.code() == grpc.StatusCode.NOT_FOUND:   # a path that names nothing is a 404, not a 400
            return JSONResponse({"error": {"message": exc.details(), "type": "invalid_request_error",
                                           "param": "voice_id", "code": "not_found"}}, status_code=404)
        return grpc_error_response(exc)
    return JSONResponse(_registered(reply.voice))
