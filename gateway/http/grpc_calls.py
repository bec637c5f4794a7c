"""The gRPC calls the HTTP face makes to its own gateway: one synthesis stream, the voice catalogue."""
from __future__ import annotations

from collections.abc import AsyncIterator

import grpc

from client.stream_write import exchange
from protos.tts.v1 import config_pb2, tts_pb2, tts_pb2_grpc, voices_pb2


class GatewayClient:
    """A channel to the gateway's gRPC port on loopback; `model()` is cached (it never changes)."""

    def __init__(self, target: str, max_message_bytes: int = 64 << 20) -> None:
        self.channel = grpc.aio.insecure_channel(target, options=[
            ("grpc.max_receive_message_length", max_message_bytes),
            ("grpc.max_send_message_length", max_message_bytes)])
        self.stub = tts_pb2_grpc.TextToSpeechStub(self.channel)
        self._model: voices_pb2.ModelVoices | None = None

    async def close(self) -> None:
        await self.channel.close()

    async def voices(self) -> voices_pb2.ListVoicesResponse:
        return await self.stub.ListVoices(voices_pb2.ListVoicesRequest())

    async def model(self) -> voices_pb2.ModelVoices:
        if self._model is None:
            self._model = next(m for m in (await self.voices()).models if m.is_default)
        return self._model

    def stream(self, requests: AsyncIterator[tts_pb2.StreamSynthesizeRequest]):
        """(call, responses): StreamSynthesize with `requests` sent from a task of their own. A call
        the gateway refuses raises the gateway's status from `responses` (a plain request iterator
        can turn it into INTERNAL when a write loses the race with the refusal: client/stream_write.py)."""
        call = self.stub.StreamSynthesize()
        return call, exchange(call, requests)


def model_type_name(model: voices_pb2.ModelVoices) -> str:
    """"custom_voice", "voice_design" or "base", as the HTTP API names model types."""
    return voices_pb2.ModelType.Name(model.model_type).removeprefix("MODEL_TYPE_").lower()


async def whole_text_requests(config: config_pb2.SynthesisConfig, text: str):
    yield tts_pb2.StreamSynthesizeRequest(config=config)
    yield tts_pb2.StreamSynthesizeRequest(text=text)
    yield tts_pb2.StreamSynthesizeRequest(end=tts_pb2.EndOfInput())
