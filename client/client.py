"""Async client of tts.v1.TextToSpeech (grpc.aio): streaming and unary synthesis, voices, health."""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterable, AsyncIterator, Iterable
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from client.stream_write import exchange
from protos.limits import UNARY_REPLY_RECEIVE_BYTES
from protos.tts.v1 import config_pb2, tts_pb2, tts_pb2_grpc, voices_pb2

logger = logging.getLogger(__name__)

_REF_ENCODINGS = {".wav": config_pb2.REFERENCE_AUDIO_ENCODING_WAV, ".flac": config_pb2.REFERENCE_AUDIO_ENCODING_FLAC,
                  ".ogg": config_pb2.REFERENCE_AUDIO_ENCODING_OGG, ".mp3": config_pb2.REFERENCE_AUDIO_ENCODING_MP3}


def make_config(voice: str = "", *, language: str = "auto", encoding: int = config_pb2.AUDIO_ENCODING_PCM16,
                sample_rate_hz: int = 0, speed: float = 0.0, seed: int | None = None,
                reference_audio: str | Path | None = None, reference_text: str = "", instruct: str = "",
                text_mode: int = config_pb2.TEXT_MODE_UNSPECIFIED, max_frames: int | None = None, min_frames: int | None = None,
                model: str = "") -> config_pb2.SynthesisConfig:
    """A SynthesisConfig from short options.

    `voice`: "NAME" or "speaker:NAME" (CustomVoice), "design:DESCRIPTION" (VoiceDesign),
    "id:VOICE_ID" (registered voice); with `reference_audio` the voice is cloned from that file.
    """
    cfg = config_pb2.SynthesisConfig(model=model, language=language, speed=speed, text_mode=text_mode,
                                     audio_format=config_pb2.AudioFormat(encoding=encoding,
                                                                         sample_rate_hz=sample_rate_hz))
    if reference_audio is not None:
        path = Path(reference_audio)
        cfg.clone.reference_audio.data = path.read_bytes()
        cfg.clone.reference_audio.encoding = _REF_ENCODINGS.get(path.suffix.lower(), 0)
        cfg.clone.reference_text = reference_text
        cfg.clone.x_vector_only = not reference_text
    elif voice.startswith("design:") or (not voice and instruct):
        cfg.design.instruct = voice.removeprefix("design:") or instruct
    elif voice.startswith("id:"):
        cfg.registered_voice_id = voice.removeprefix("id:")
    elif voice:
        cfg.speaker.name = voice.removeprefix("speaker:")
        cfg.speaker.instruct = instruct
    if seed is not None:
        cfg.sampling.seed = seed
    if max_frames is not None:
        cfg.sampling.max_frames = max_frames
    if min_frames is not None:
        cfg.sampling.min_frames = min_frames
    return cfg


async def _as_async(texts: AsyncIterable[str] | Iterable[str]) -> AsyncIterator[str]:
    if hasattr(texts, "__aiter__"):
        async for text in texts:
            yield text
    else:
        for text in texts:
            yield text


class TtsClient:
    """`max_message_bytes`: largest message sent (a clone's reference audio rides in one).
    `max_receive_bytes`: largest message received; the default matches what a gateway with the
    default --max-unary-audio-bytes may put in one unary reply (protos/limits.py). Raise both
    together when talking to a gateway whose limit was raised."""

    def __init__(self, target: str = "127.0.0.1:50051", max_message_bytes: int = 64 << 20,
                 max_receive_bytes: int = UNARY_REPLY_RECEIVE_BYTES, own_connection: bool = False) -> None:
        """`own_connection`: this client's calls go over a TCP connection of its own (gRPC otherwise
        shares one among the channels of a process that have the same target and options), e.g. to
        reach every gateway process behind one SO_REUSEPORT port, which the kernel assigns per connection."""
        self.target = target
        options = [("grpc.max_receive_message_length", max_receive_bytes),
                   ("grpc.max_send_message_length", max_message_bytes)]
        if own_connection:
            options.append(("grpc.use_local_subchannel_pool", 1))
        self.channel = grpc.aio.insecure_channel(target, options=options)
        self.stub = tts_pb2_grpc.TextToSpeechStub(self.channel)
        self.health = health_pb2_grpc.HealthStub(self.channel)

    async def __aenter__(self) -> "TtsClient":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def close(self) -> None:
        await self.channel.close()

    async def wait_serving(self, timeout_s: float = 30.0) -> None:
        """Polls grpc.health.v1 until SERVING; TimeoutError naming the last status otherwise."""
        deadline = time.monotonic() + timeout_s
        last = "unreachable"
        while time.monotonic() < deadline:
            try:
                reply = await self.health.Check(health_pb2.HealthCheckRequest(service=""), timeout=2.0)
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    return
                last = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
            except grpc.aio.AioRpcError as exc:
                last = exc.code().name
            await asyncio.sleep(0.1)
        raise TimeoutError(f"{self.target} not SERVING after {timeout_s:g} s (last: {last})")

    async def stream(self, texts: AsyncIterable[str] | Iterable[str], config: config_pb2.SynthesisConfig,
                     timeout_s: float | None = None) -> AsyncIterator[tts_pb2.StreamSynthesizeResponse]:
        """StreamSynthesize: sends `config`, then each text delta as it comes, then end of input;
        yields every response (start, audio, flush acks, summary) as it arrives."""
        async def requests():
            yield tts_pb2.StreamSynthesizeRequest(config=config)
            async for text in _as_async(texts):
                yield tts_pb2.StreamSynthesizeRequest(text=text)
            yield tts_pb2.StreamSynthesizeRequest(end=tts_pb2.EndOfInput())

        async for response in exchange(self.stub.StreamSynthesize(timeout=timeout_s), requests()):
            yield response

    async def synthesize(self, text: str, config: config_pb2.SynthesisConfig,
                         timeout_s: float | None = None) -> tts_pb2.SynthesizeResponse:
        """Unary Synthesize: the whole audio in one reply. A request whose worst-case audio is over
        the gateway's unary limit is refused INVALID_ARGUMENT before any work: use stream()."""
        return await self.stub.Synthesize(tts_pb2.SynthesizeRequest(config=config, text=text), timeout=timeout_s)

    async def list_voices(self, model: str = "") -> voices_pb2.ListVoicesResponse:
        return await self.stub.ListVoices(voices_pb2.ListVoicesRequest(model=model), timeout=10)

    async def register_voice(self, voice_id: str, reference_audio: str | Path, reference_text: str = "",
                             display_name: str = "", overwrite: bool = False) -> voices_pb2.RegisteredVoice:
        clone = make_config(reference_audio=reference_audio, reference_text=reference_text).clone
        reply = await self.stub.RegisterVoice(voices_pb2.RegisterVoiceRequest(
            voice_id=voice_id, clone=clone, display_name=display_name, overwrite=overwrite), timeout=120)
        return reply.voice

    async def delete_voice(self, voice_id: str) -> voices_pb2.RegisteredVoice:
        return (await self.stub.DeleteVoice(voices_pb2.DeleteVoiceRequest(voice_id=voice_id), timeout=10)).voice
