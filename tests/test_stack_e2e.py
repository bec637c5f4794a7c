"""The three real processes on loopback (tiny checkpoint, CPU), started by `python -m launcher`.

Covers: streamed text in -> audio out; audio equal to the offline Synthesizer for the same seed;
slow text still gives audio before it ends; cancel frees talker and vocoder state; bad input;
reflection list/describe; health and a clean SIGTERM shutdown; the frame budget that follows the
text (unary and streamed), max_frames over the context refused, the unary audio limit.
"""
from __future__ import annotations

import asyncio
import json
import time

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from async_support import run
from client import TtsClient, make_config
from process_support import LauncherProcess
from protos.tts.internal.v1 import admin_pb2, admin_pb2_grpc
from protos.tts.v1 import config_pb2, tts_pb2

pytestmark = pytest.mark.timeout(120)
MAX_FRAMES = 12
SEED = 4242
RUN_S = 60.0   # run()'s bound per call: a real stack on CPU is slower than the in-process fakes


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    work = tmp_path_factory.mktemp("stack")
    launcher = LauncherProcess(work, ["--grpc-port", "0", "--health-timeout-s", "90", "--drain-grace-s", "2",
                                      "--vocoder-arg=--cpu-threads=1", "--talker-arg=--cpu-threads=1"])
    try:
        info = dict(launcher.wait_ready(100))
        info["proc"], info["work"] = launcher.proc, work
        yield info
    finally:
        launcher.stop(40)


def config(**kw) -> config_pb2.SynthesisConfig:
    return make_config("vivian", language="english", encoding=config_pb2.AUDIO_ENCODING_FLOAT32, seed=SEED,
                       max_frames=MAX_FRAMES, **kw)


def pcm_of(responses) -> np.ndarray:
    return np.frombuffer(b"".join(r.audio.audio for r in responses if r.HasField("audio")), "<f4")


@pytest.fixture(scope="module")
def offline(stack):
    from talker_service.generate import Synthesizer
    synth = Synthesizer.from_pretrained("tiny")

    def synthesize(text: str, non_streaming: bool) -> np.ndarray:
        # The offline API follows the official max_new_tokens, whose last step yields no frame
        # (N gives N - 1 frames); SamplingParams.max_frames counts frames.
        sampling = synth.sampling_params(seed=SEED, max_new_tokens=MAX_FRAMES + 1)
        pcm, _ = synth.synthesize(text, voice="vivian", language="english", sampling=sampling,
                                  non_streaming_mode=non_streaming)
        return pcm
    return synthesize


def test_unary_audio_equals_the_offline_api_for_the_same_seed(stack, offline):
    text = "Hello from the gateway."

    async def body():
        async with TtsClient(stack["grpc_target"]) as client:
            return await client.synthesize(text, config(), timeout_s=60)

    response = run(body(), RUN_S)
    got = np.frombuffer(response.audio, "<f4")
    want = offline(text, non_streaming=True)
    assert response.start.text_mode == config_pb2.TEXT_MODE_NON_STREAMING
    assert response.summary.num_frames == MAX_FRAMES and got.shape == want.shape
    np.testing.assert_allclose(got, want, atol=1e-4)


def test_streamed_words_give_audio_equal_to_offline_streaming_mode(stack, offline):
    text = "Streaming text arrives one word at a time."

    async def words():
        for i, word in enumerate(text.split(" ")):
            yield word if i == 0 else " " + word
            await asyncio.sleep(0.02)

    async def body():
        async with TtsClient(stack["grpc_target"]) as client:
            return [r async for r in client.stream(words(), config(), timeout_s=60)]

    responses = run(body(), RUN_S)
    assert responses[0].HasField("start") and responses[-1].HasField("summary")
    got = pcm_of(responses)
    np.testing.assert_allclose(got, offline(text, non_streaming=False), atol=1e-4)


def test_slow_text_yields_audio_before_the_text_ends(stack):
    async def body():
        async with TtsClient(stack["grpc_target"]) as client:
            call = client.stub.StreamSynthesize(timeout=60)
            await call.write(tts_pb2.StreamSynthesizeRequest(config=config()))
            await call.read()  # start
            await call.write(tts_pb2.StreamSynthesizeRequest(text="This sentence is long enough to start "))
            first = await asyncio.wait_for(call.read(), 30)
            await call.write(tts_pb2.StreamSynthesizeRequest(text="speaking."))
            await call.done_writing()
            rest = []
            while (r := await call.read()) is not grpc.aio.EOF:
                rest.append(r)
            return first, rest

    first, rest = run(body(), RUN_S)
    assert first.HasField("audio") and len(first.audio.audio) > 0
    assert rest[-1].HasField("summary")


def _stats(port: int, stub_class, target_host="127.0.0.1"):
    with grpc.insecure_channel(f"{target_host}:{port}") as channel:
        return stub_class(channel).GetStats(admin_pb2.GetStatsRequest(), timeout=5)


def test_cancel_mid_stream_frees_talker_and_vocoder_state(stack):
    work = stack["work"]
    talker_port = json.loads((work / "talker.ready.json").read_text())["grpc_port"]
    vocoder_port = json.loads((work / "vocoder.ready.json").read_text())["grpc_port"]

    async def body():
        async with TtsClient(stack["grpc_target"]) as client:
            cfg = config()
            cfg.sampling.max_frames = 2000
            call = client.stub.StreamSynthesize(timeout=60)
            await call.write(tts_pb2.StreamSynthesizeRequest(config=cfg))
            await call.read()
            await call.write(tts_pb2.StreamSynthesizeRequest(text="Keep talking for a long while please."))
            await call.write(tts_pb2.StreamSynthesizeRequest(end=tts_pb2.EndOfInput()))
            await asyncio.wait_for(call.read(), 30)
            call.cancel()

    run(body(), RUN_S)
    deadline = time.monotonic() + 60   # polled: a margin for a loaded machine, no cost when it is not
    while True:
        talker = _stats(talker_port, admin_pb2_grpc.TalkerAdminStub)
        vocoder = _stats(vocoder_port, admin_pb2_grpc.VocoderAdminStub)
        if talker.load.num_slots_used == 0 and vocoder.load.num_slots_used == 0:
            break
        assert time.monotonic() < deadline, (talker.load, vocoder.load)
        time.sleep(0.1)


def test_bad_input_is_refused_and_reflection_and_health_answer(stack):
    from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

    async def bad():
        async with TtsClient(stack["grpc_target"]) as client:
            with pytest.raises(grpc.aio.AioRpcError) as info:
                [r async for r in client.stream(["hi"], make_config("nobody"), timeout_s=10)]
            return info.value

    err = run(bad(), RUN_S)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and "config.speaker.name" in err.details()
    with grpc.insecure_channel(stack["grpc_target"]) as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        replies = list(stub.ServerReflectionInfo(iter([
            reflection_pb2.ServerReflectionRequest(list_services=""),
            reflection_pb2.ServerReflectionRequest(file_containing_symbol="tts.v1.TextToSpeech")]), timeout=10))
        names = {s.name for s in replies[0].list_services_response.service}
        assert {"tts.v1.TextToSpeech", "grpc.health.v1.Health"} <= names
        assert replies[1].file_descriptor_response.file_descriptor_proto
        status = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5).status
        assert status == health_pb2.HealthCheckResponse.SERVING


# ---- the frame budget and the unary audio limit ---------------------------------------------

def budget_config(encoding: int = config_pb2.AUDIO_ENCODING_PCM16, **kw) -> config_pb2.SynthesisConfig:
    """No max_frames: the text's frame budget bounds the audio (the tiny model never ends it)."""
    return make_config("vivian", language="english", encoding=encoding, seed=SEED, **kw)


def test_a_short_text_ends_at_its_text_budget_with_that_finish_reason(stack):
    from service_common.frame_budget import text_budget_frames

    async def body():
        async with TtsClient(stack["grpc_target"]) as client:
            return await client.synthesize("Hi.", budget_config(), timeout_s=90)

    summary = run(body(), 100).summary
    assert summary.finish_reason == tts_pb2.FINISH_REASON_TEXT_BUDGET
    assert summary.num_frames == text_budget_frames(summary.num_text_tokens) <= 60   # seconds, not minutes
    assert 3.0 <= summary.audio_s <= 5.0


def test_a_streamed_text_grows_its_budget_until_the_text_ends(stack):
    from service_common.frame_budget import text_budget_frames
    words = ["Streamed", " text", " keeps", " arriving", " for", " a", " while", " here."]

    async def slow_words():
        for word in words:
            yield word
            await asyncio.sleep(0.05)

    async def body():
        async with TtsClient(stack["grpc_target"]) as client:
            return [r async for r in client.stream(slow_words(), budget_config(), timeout_s=100)]

    summary = run(body(), 110)[-1].summary
    assert summary.finish_reason == tts_pb2.FINISH_REASON_TEXT_BUDGET
    assert summary.num_text_tokens > 4
    assert summary.num_frames == text_budget_frames(summary.num_text_tokens) > text_budget_frames(1)


def test_max_frames_over_the_context_is_refused_naming_the_field_and_limit(stack):
    async def refused(max_frames: int) -> grpc.aio.AioRpcError:
        async with TtsClient(stack["grpc_target"]) as client:
            with pytest.raises(grpc.aio.AioRpcError) as info:
                [r async for r in client.stream(["Hello."], budget_config(max_frames=max_frames), timeout_s=20)]
            return info.value

    over_model = run(refused(10**9), RUN_S)     # the checkpoint's context (gateway)
    assert over_model.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "config.sampling.max_frames" in over_model.details() and "32768" in over_model.details()
    over_talker = run(refused(5000), RUN_S)     # this talker's max_seq_len (2048)
    assert over_talker.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "max_frames 5000" in over_talker.details() and "2048" in over_talker.details()


def test_unary_request_over_the_audio_limit_is_refused_before_any_work(stack):
    talker_port = json.loads((stack["work"] / "talker.ready.json").read_text())["grpc_port"]
    before = _stats(talker_port, admin_pb2_grpc.TalkerAdminStub).requests
    long_text = "This sentence is repeated to make a long text for one reply. " * 8

    async def body():
        async with TtsClient(stack["grpc_target"]) as client:
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await client.synthesize(long_text, budget_config(encoding=config_pb2.AUDIO_ENCODING_FLOAT32),
                                        timeout_s=30)
            return info.value

    err = run(body(), RUN_S)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "StreamSynthesize" in err.details() and "config.sampling.max_frames <=" in err.details()
    # before any work: the talker never heard of it (no start, no refusal), which no timing can say
    after = _stats(talker_port, admin_pb2_grpc.TalkerAdminStub).requests
    assert (after.num_started, after.num_refused) == (before.num_started, before.num_refused)
