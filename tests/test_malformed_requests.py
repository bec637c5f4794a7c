"""Request bytes that are no protobuf message of the method: INVALID_ARGUMENT naming the message
(not gRPC's UNKNOWN "Unexpected <class 'DecodeError'>"), counted in the gateway's error metric,
nothing crashes, and a valid request afterwards works. Every method of the public gateway (unary,
client stream, voices, health) and of the talker's and vocoder's admin side ports."""
from __future__ import annotations

import asyncio
import random

import grpc
import pytest
from grpc_health.v1 import health_pb2

from checkpoint.files import resolve_model_dir
from protos.tts.internal.v1 import admin_pb2
from protos.tts.v1 import config_pb2, tts_pb2, voices_pb2
from test_gateway_support import FakeTalker, running_gateway

pytestmark = pytest.mark.timeout(120)
NUM_BAD = 1000
CONCURRENCY = 64


def valid_examples(message_class) -> list[bytes]:
    """A few real messages of the class to mutate (empty, plus field-rich ones where known)."""
    examples = [message_class()]
    config = config_pb2.SynthesisConfig(speaker=config_pb2.SpeakerVoice(name="vivian"), language="english")
    rich = {
        tts_pb2.SynthesizeRequest: tts_pb2.SynthesizeRequest(config=config, text="Hello there, friend."),
        tts_pb2.StreamSynthesizeRequest: tts_pb2.StreamSynthesizeRequest(config=config),
        voices_pb2.RegisterVoiceRequest: voices_pb2.RegisterVoiceRequest(voice_id="my-voice", model="tiny",
                                                                         display_name="Mine"),
        voices_pb2.DeleteVoiceRequest: voices_pb2.DeleteVoiceRequest(voice_id="my-voice"),
        admin_pb2.GenerateCodesRequest: admin_pb2.GenerateCodesRequest(text="Hello", config=config),
        admin_pb2.DecodeRequest: admin_pb2.DecodeRequest(codes=list(range(32)), num_frames=2),
    }
    if message_class in rich:
        examples.append(rich[message_class])
    return [m.SerializeToString() for m in examples]


def malformed(message_class, num: int, seed: int) -> list[bytes]:
    """`num` byte strings that do not parse as `message_class`: random bytes and mutated messages
    (truncated, bytes flipped, a bad tag or length appended); the ones that happen to parse are
    dropped, so every one must be refused."""
    rng = random.Random(seed)
    examples = [e for e in valid_examples(message_class) if e]
    found: list[bytes] = []
    while len(found) < num:
        kind = rng.randrange(4)
        if kind == 0 or not examples:
            data = rng.randbytes(rng.randrange(1, 64))
        else:
            data = bytearray(rng.choice(examples))
            if kind == 1:
                data = data[:rng.randrange(1, len(data))] if len(data) > 1 else data + b"\x0a"
            elif kind == 2:
                for _ in range(rng.randrange(1, 4)):
                    data[rng.randrange(len(data))] = rng.randrange(256)
            else:
                data += rng.choice([b"\x0a\x7f", b"\x07", b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", b"\x12"])
            data = bytes(data)
        try:
            message_class.FromString(data)
        except Exception:
            found.append(data)
    return found


async def expect_all_invalid(channel: grpc.aio.Channel, path: str, message_class, shape: str, seed: int) -> None:
    """Send every malformed string raw (no serializer) with `CONCURRENCY` calls in flight."""
    call = {"unary_unary": channel.unary_unary, "unary_stream": channel.unary_stream,
            "stream_stream": channel.stream_stream}[shape](path)
    name = message_class.DESCRIPTOR.full_name
    gate = asyncio.Semaphore(CONCURRENCY)

    async def one(data: bytes) -> None:
        async with gate:
            with pytest.raises(grpc.aio.AioRpcError) as info:
                if shape == "unary_unary":
                    await call(data, timeout=10)
                else:
                    async for _ in call(data if shape == "unary_stream" else iter([data]), timeout=10):
                        pass
            code, details = info.value.code(), info.value.details()
            assert code == grpc.StatusCode.INVALID_ARGUMENT, (path, data, code, details)
            assert details.startswith(f"request is not a valid {name} message: "), (path, details)

    await asyncio.gather(*(one(data) for data in malformed(message_class, NUM_BAD, seed)))


GATEWAY_METHODS = [
    ("/tts.v1.TextToSpeech/Synthesize", tts_pb2.SynthesizeRequest, "unary_unary"),
    ("/tts.v1.TextToSpeech/StreamSynthesize", tts_pb2.StreamSynthesizeRequest, "stream_stream"),
    ("/tts.v1.TextToSpeech/ListVoices", voices_pb2.ListVoicesRequest, "unary_unary"),
    ("/tts.v1.TextToSpeech/RegisterVoice", voices_pb2.RegisterVoiceRequest, "unary_unary"),
    ("/tts.v1.TextToSpeech/DeleteVoice", voices_pb2.DeleteVoiceRequest, "unary_unary"),
]


def test_gateway_refuses_malformed_bytes_invalid_argument_and_counts_them(tmp_path):
    talker = FakeTalker()
    model_dir = resolve_model_dir("tiny")

    async def body():
        async with running_gateway(model_dir, [talker.endpoint], tmp_path) as gw:
            def num_invalid() -> float:
                return gw.metrics.registry.get_sample_value("tts_errors_total", {"code": "INVALID_ARGUMENT"}) or 0

            async with grpc.aio.insecure_channel(f"127.0.0.1:{gw.port}") as channel:
                for seed, (path, message_class, shape) in enumerate(GATEWAY_METHODS):
                    await expect_all_invalid(channel, path, message_class, shape, seed)
                assert num_invalid() == NUM_BAD * len(GATEWAY_METHODS)
                # a bad message after a valid config: the stream's own error path, counted once
                config = tts_pb2.StreamSynthesizeRequest(config=config_pb2.SynthesisConfig(
                    speaker=config_pb2.SpeakerVoice(name="vivian"), language="english")).SerializeToString()
                for data in malformed(tts_pb2.StreamSynthesizeRequest, 5, seed=99):
                    with pytest.raises(grpc.aio.AioRpcError) as info:
                        async for _ in channel.stream_stream(GATEWAY_METHODS[1][0])(iter([config, data]), timeout=10):
                            pass
                    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT, info.value
                    assert "request is not a valid tts.v1.StreamSynthesizeRequest message" in info.value.details()
                assert num_invalid() == NUM_BAD * len(GATEWAY_METHODS) + 5
                # still serving: valid calls work
                stub_voices = await channel.unary_unary(
                    GATEWAY_METHODS[2][0], request_serializer=voices_pb2.ListVoicesRequest.SerializeToString,
                    response_deserializer=voices_pb2.ListVoicesResponse.FromString)(voices_pb2.ListVoicesRequest(),
                                                                                      timeout=10)
                assert stub_voices.models
                reply = await channel.unary_unary(
                    GATEWAY_METHODS[0][0], request_serializer=tts_pb2.SynthesizeRequest.SerializeToString,
                    response_deserializer=tts_pb2.SynthesizeResponse.FromString)(tts_pb2.SynthesizeRequest(
                        config=config_pb2.SynthesisConfig(speaker=config_pb2.SpeakerVoice(name="vivian"),
                                                          language="english"), text="Still here."), timeout=20)
                assert reply.audio and reply.summary.num_frames > 0
                await expect_all_invalid(channel, "/grpc.health.v1.Health/Check", health_pb2.HealthCheckRequest,
                                         "unary_unary", seed=7)

    try:
        asyncio.run(asyncio.wait_for(body(), 100))
    finally:
        talker.close()


def side_port_servers():
    from talker_service.server.admin import TalkerAdminServicer
    from talker_service.server.admin import side_port as talker_side_port
    from talker_service.server.admin_jobs import AdminJobs
    from vocoder_service.server.admin import VocoderAdminServicer
    from vocoder_service.server.admin import side_port as vocoder_side_port
    from vocoder_service.server.admin_jobs import AdminBridge

    talker = talker_side_port("127.0.0.1", 0, TalkerAdminServicer(AdminJobs(), 5.0))
    vocoder = vocoder_side_port("127.0.0.1", 0, VocoderAdminServicer(AdminBridge(4), 5.0, max_frames=64))
    return {"TalkerAdmin": talker, "VocoderAdmin": vocoder}


SIDE_METHODS = [
    ("TalkerAdmin", "GetStats", admin_pb2.GetStatsRequest, "unary_unary"),
    ("TalkerAdmin", "GenerateCodes", admin_pb2.GenerateCodesRequest, "unary_stream"),
    ("VocoderAdmin", "GetStats", admin_pb2.GetStatsRequest, "unary_unary"),
    ("VocoderAdmin", "Decode", admin_pb2.DecodeRequest, "unary_unary"),
]


def test_side_ports_refuse_malformed_bytes_invalid_argument():
    servers = side_port_servers()
    for server in servers.values():
        server.start()

    async def body():
        for seed, (service, method, message_class, shape) in enumerate(SIDE_METHODS):
            port = servers[service].port
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                await expect_all_invalid(channel, f"/tts.internal.v1.{service}/{method}", message_class, shape,
                                         seed=100 + seed)
        # still answering: no model is loaded in this test, so a valid call reaches the servicer
        # and is told so
        for service, method, message in (("TalkerAdmin", "GenerateCodes", admin_pb2.GenerateCodesRequest(text="Hi")),
                                         ("VocoderAdmin", "Decode", admin_pb2.DecodeRequest(codes=[1] * 16,
                                                                                           num_frames=1))):
            async with grpc.aio.insecure_channel(f"127.0.0.1:{servers[service].port}") as channel:
                call = (channel.unary_stream if method == "GenerateCodes" else channel.unary_unary)(
                    f"/tts.internal.v1.{service}/{method}", request_serializer=type(message).SerializeToString)
                with pytest.raises(grpc.aio.AioRpcError) as info:
                    reply = call(message, timeout=10)
                    if method == "GenerateCodes":
                        async for _ in reply:
                            pass
                    else:
                        await reply
                assert info.value.code() == grpc.StatusCode.UNAVAILABLE, info.value
                assert "still loading" in info.value.details()

    try:
        asyncio.run(asyncio.wait_for(body(), 100))
    finally:
        for server in servers.values():
            server.stop(0.5)
