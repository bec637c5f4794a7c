"""Gateway StreamSynthesize / Synthesize against a fake talker on loopback (real gRPC, real ZeroMQ)."""
from __future__ import annotations

import asyncio
import io

import grpc
import numpy as np
import pytest
import soundfile

from async_support import run
from test_gateway_support import FakeTalker, running_gateway, tokens_from_pcm
from checkpoint.files import resolve_model_dir
from gateway.text_tokenizer import TextTokenizer
from client.stream_write import exchange
from protos.tts.internal.v1 import common_pb2
from protos.tts.v1 import config_pb2, tts_pb2, tts_pb2_grpc

pytestmark = pytest.mark.timeout(60)
TEXT = "Hello world. This is a streaming test, with several words!"
LATE_DEADLINE_S = 3.0


@pytest.fixture(scope="module")
def model_dir():
    return resolve_model_dir("tiny")


@pytest.fixture
def talker():
    fake = FakeTalker()
    yield fake
    fake.close()


def speaker_config(**kw) -> config_pb2.SynthesisConfig:
    kw.setdefault("language", "English")
    cfg = config_pb2.SynthesisConfig(speaker=config_pb2.SpeakerVoice(name="Vivian"), **kw)
    cfg.sampling.seed = 1234
    return cfg


def req(**kw) -> tts_pb2.StreamSynthesizeRequest:
    return tts_pb2.StreamSynthesizeRequest(**kw)


async def collect(stub, messages, timeout_s: float = 10.0):
    # exchange(), not a request iterator: grpc.aio would report a write racing the server's refusal as
    # INTERNAL (see client/stream_write.py).
    return [r async for r in exchange(stub.StreamSynthesize(timeout=timeout_s), messages)]


async def read_all(call) -> list:
    out = []
    while (r := await call.read()) is not grpc.aio.EOF:
        out.append(r)
    return out


def audio_of(responses) -> bytes:
    return b"".join(r.audio.audio for r in responses if r.HasField("audio"))


def test_streamed_text_comes_back_as_audio_in_order(model_dir, talker, tmp_path):
    words = TEXT.split(" ")
    expected_ids = TextTokenizer.from_dir(model_dir).target_ids(TEXT)

    async def body():
        async with running_gateway(model_dir, [talker.endpoint], tmp_path) as gw:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{gw.port}") as channel:
                stub = tts_pb2_grpc.TextToSpeechStub(channel)
                call = stub.StreamSynthesize(timeout=10)
                await call.write(req(config=speaker_config(audio_format=config_pb2.AudioFormat(
                    encoding=config_pb2.AUDIO_ENCODING_FLOAT32))))
                start = await call.read()
                for i, word in enumerate(words[:-1]):
                    await call.write(req(text=word + " "))
                first_audio = await call.read()      # audio arrives while the text is still open
                assert first_audio.HasField("audio")
                await call.write(req(text=words[-1]))
                await call.done_writing()
                rest = [first_audio] + await read_all(call)
                sample = gw.metrics.registry.get_sample_value
                names = [f.name.removesuffix("_ms") for f in tts_pb2.ServerTimings.DESCRIPTOR.fields]
                stages = {n: (sample("tts_stage_seconds_count", {"stage": n}),
                              sample("tts_stage_seconds_sum", {"stage": n})) for n in names}
                lateness = {key: sample(f"tts_chunk_lateness_seconds_{key}", labels) for key, labels in
                            (("count", {}), ("sum", {}), ("bucket", {"le": "0.0"}))}
                return start, rest, stages, lateness

    start, responses, stages, lateness = run(body())
    # every chunk after the first is measured against its playback deadline; the summary's stalls
    # are those same chunks' lateness (the longest one is in the histogram's sum)
    summary = responses[-1].summary
    num_chunks = sum(1 for r in responses if r.HasField("audio"))
    assert lateness["count"] == num_chunks - 1 > 0
    # the longest stall is the largest of the late chunks' lateness: at least their mean, at most their sum
    num_late, longest_s = lateness["count"] - lateness["bucket"], summary.longest_stall_ms / 1e3   # le=0: in time
    if num_late == 0:
        assert longest_s == 0 and lateness["sum"] == 0
    else:
        assert lateness["sum"] / num_late - 1e-9 <= longest_s <= lateness["sum"] + 1e-9
    assert summary.num_stalls <= lateness["count"] - lateness["bucket"]
    # /metrics has the per-stage histograms: one observation per stage for the one request,
    # its sum the summary's own timing
    timings = responses[-1].summary.timings
    assert set(stages) == {"queue", "prefill", "first_frame", "vocoder_first_chunk", "vocoder_decode", "encode",
                           "voice_encode", "admit", "second_frame"}
    # the gateway's part before the first-audio clock: the talker's START/ACK round trip at least (the
    # client sends its first word only after the start message)
    assert timings.admit_ms > 0
    for stage, (count, total_s) in stages.items():
        assert count == 1, stage
        assert total_s == pytest.approx(getattr(timings, stage + "_ms") / 1e3), stage
    assert stages["encode"][1] > 0
    assert start.start.voice.name == "vivian" and start.start.seed == 1234
    assert start.start.text_mode == config_pb2.TEXT_MODE_STREAMING
    assert start.start.audio_format.sample_rate_hz == 24000
    chunks = [r.audio for r in responses if r.HasField("audio")]
    assert [c.sequence_number for c in chunks] == list(range(len(chunks)))
    offsets = np.cumsum([0] + [c.num_samples for c in chunks])[:-1]
    assert [c.sample_offset for c in chunks] == list(offsets)
    pcm = np.frombuffer(audio_of(responses), "<f4")
    assert tokens_from_pcm(pcm) == [i % 1000 for i in expected_ids]
    assert responses[-1].HasField("summary")
    summary = responses[-1].summary
    assert summary.num_text_tokens == len(expected_ids)
    assert summary.audio_s == pytest.approx(len(expected_ids) * 1920 / 24000)
    assert summary.time_to_first_audio_ms > 0 and summary.real_time_factor > 0
    (fake_req,) = talker.requests.values()
    assert fake_req.start.speaker.speaker_codec_id == 3065 and fake_req.start.language_codec_id == 2050
    assert fake_req.start.sampling.seed == 1234 and fake_req.abort is None


def test_flush_is_acknowledged_and_commits_the_partial_word(model_dir, talker, tmp_path):
    async def body():
        async with running_gateway(model_dir, [talker.endpoint], tmp_path) as gw:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{gw.port}") as channel:
                stub = tts_pb2_grpc.TextToSpeechStub(channel)
                return await collect(stub, [req(config=speaker_config()), req(text="Hello wor"),
                                            req(flush=tts_pb2.Flush(flush_id="f1")), req(text="ld"),
                                            req(end=tts_pb2.EndOfInput())])

    responses = run(body())
    (ack,) = [r.flush_ack for r in responses if r.HasField("flush_ack")]
    tok = TextTokenizer.from_dir(model_dir)
    assert ack.flush_id == "f1" and ack.num_text_tokens == len(tok.target_ids("Hello wor"))
    (fake_req,) = talker.requests.values()
    assert fake_req.tokens == tok.target_ids("Hello wor") + tok.encode("ld")


def test_unary_synthesize_returns_a_complete_wav(model_dir, talker, tmp_path):
    async def body():
        async with running_gateway(model_dir, [talker.endpoint], tmp_path) as gw:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{gw.port}") as channel:
                stub = tts_pb2_grpc.TextToSpeechStub(channel)
                cfg = speaker_config(audio_format=config_pb2.AudioFormat(encoding=config_pb2.AUDIO_ENCODING_WAV,
                                                                         sample_rate_hz=16000))
                return await stub.Synthesize(tts_pb2.SynthesizeRequest(config=cfg, text=TEXT), timeout=10)

    response = run(body())
    num_tokens = len(TextTokenizer.from_dir(model_dir).target_ids(TEXT))
    pcm, rate = soundfile.read(io.BytesIO(response.audio), dtype="float32")
    assert rate == 16000 and abs(len(pcm) - num_tokens * 1920 * 16000 // 24000) <= 2
    assert response.start.text_mode == config_pb2.TEXT_MODE_NON_STREAMING
    (fake_req,) = talker.requests.values()
    assert fake_req.start.is_text_complete and len(fake_req.start.text_token_ids) == num_tokens


BAD_INPUTS = [
    ("text before config", [req(text="hi")], "config:"),
    ("repeated config", [req(config=speaker_config()), req(text="Hi there"), req(config=speaker_config())],
     "repeated config"),
    ("empty message", [req(config=speaker_config()), req(text="Hi there"), req()], "empty message"),
    ("repeated config, whole text", [req(config=speaker_config(text_mode=config_pb2.TEXT_MODE_NON_STREAMING)),
                                     req(text="Hi there"), req(config=speaker_config())], "repeated config"),
    ("empty message, whole text", [req(config=speaker_config(text_mode=config_pb2.TEXT_MODE_NON_STREAMING)),
                                   req(text="Hi there"), req()], "empty message"),
    ("unknown voice", [req(config=config_pb2.SynthesisConfig(speaker=config_pb2.SpeakerVoice(name="nobody")))],
     "config.speaker.name"),
    ("wrong voice kind", [req(config=config_pb2.SynthesisConfig(design=config_pb2.DesignVoice(instruct="x")))],
     "config.design"),
    ("no voice", [req(config=config_pb2.SynthesisConfig(language="english"))], "config.voice"),
    ("unknown language", [req(config=speaker_config(language="klingon"))], "config.language"),
    ("unknown encoding", [req(config=speaker_config(audio_format=config_pb2.AudioFormat(encoding=42)))],
     "config.audio_format.encoding"),
    ("rate out of range", [req(config=speaker_config(audio_format=config_pb2.AudioFormat(sample_rate_hz=4000)))],
     "config.audio_format.sample_rate_hz"),
    ("opus rate", [req(config=speaker_config(audio_format=config_pb2.AudioFormat(
        encoding=config_pb2.AUDIO_ENCODING_OGG_OPUS, sample_rate_hz=44100)))], "config.audio_format.sample_rate_hz"),
    ("speed", [req(config=speaker_config(speed=3.0))], "config.speed"),
    ("temperature", [req(config=config_pb2.SynthesisConfig(
        speaker=config_pb2.SpeakerVoice(name="ryan"), sampling=config_pb2.SamplingParams(temperature=0)))],
     "config.sampling.temperature"),
    ("min over max frames", [req(config=config_pb2.SynthesisConfig(
        speaker=config_pb2.SpeakerVoice(name="ryan"), sampling=config_pb2.SamplingParams(min_frames=9, max_frames=8)))],
     "config.sampling.min_frames"),
    ("empty text at end", [req(config=speaker_config()), req(text="   "), req(end=tts_pb2.EndOfInput())], "text:"),
    ("text over limit", [req(config=speaker_config()), req(text="word " * 50)], "over the limit"),
    ("oversized message", [req(config=speaker_config()), req(text="x" * 3000)], "bytes is over the limit"),
    ("registered voice on a custom_voice model", [req(config=config_pb2.SynthesisConfig(registered_voice_id="nope"))],
     "config.registered_voice_id"),
]


def test_every_bad_input_is_refused_naming_the_field_without_disturbing_a_live_stream(model_dir, talker, tmp_path):
    async def body():
        async with running_gateway(model_dir, [talker.endpoint], tmp_path, max_text_chars=200,
                                   max_message_bytes=2000) as gw:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{gw.port}") as channel:
                stub = tts_pb2_grpc.TextToSpeechStub(channel)
                good = stub.StreamSynthesize(timeout=20)
                await good.write(req(config=speaker_config(audio_format=config_pb2.AudioFormat(
                    encoding=config_pb2.AUDIO_ENCODING_FLOAT32))))
                await good.write(req(text="Hello there "))
                outcomes = {}
                for name, messages, _ in BAD_INPUTS:
                    with pytest.raises(grpc.aio.AioRpcError) as info:
                        got = await collect(stub, messages)
                        pytest.fail(f"{name}: not refused, got {got}")
                    outcomes[name] = (info.value.code(), info.value.details())
                await good.write(req(text="world."))
                await good.done_writing()
                return outcomes, await read_all(good)

    outcomes, good = run(body())
    for name, _, needle in BAD_INPUTS:
        code, details = outcomes[name]
        assert code == grpc.StatusCode.INVALID_ARGUMENT, (name, code, details)
        assert needle in details, (name, details)
    assert good[-1].HasField("summary")
    tok = TextTokenizer.from_dir(model_dir)
    assert tokens_from_pcm(np.frombuffer(audio_of(good), "<f4")) == [
        i % 1000 for i in tok.target_ids("Hello there world.")]


def test_capacity_refuses_at_once_and_talker_refusal_is_forwarded(model_dir, tmp_path):
    fake = FakeTalker(num_slots=8)
    try:
        async def body():
            async with running_gateway(model_dir, [fake.endpoint], tmp_path, max_streams=1) as gw:
                async with grpc.aio.insecure_channel(f"127.0.0.1:{gw.port}") as channel:
                    stub = tts_pb2_grpc.TextToSpeechStub(channel)
                    held = stub.StreamSynthesize(timeout=10)
                    await held.write(req(config=speaker_config()))
                    await held.read()
                    with pytest.raises(grpc.aio.AioRpcError) as info:
                        await collect(stub, [req(config=speaker_config())])
                    held.cancel()
                    return info.value

        err = run(body())
        assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "capacity" in err.details()
    finally:
        fake.close()
    full = FakeTalker(refuse_code=common_pb2.STATUS_CODE_RESOURCE_EXHAUSTED)
    try:
        async def refused():
            async with running_gateway(model_dir, [full.endpoint], tmp_path) as gw:
                async with grpc.aio.insecure_channel(f"127.0.0.1:{gw.port}") as channel:
                    # the text is on its way behind START (the gateway does not wait for the ACK to
                    # forward it): the refusal's own status and message, not the talker's answers to that text
                    with pytest.raises(grpc.aio.AioRpcError) as info:
                        await collect(tts_pb2_grpc.TextToSpeechStub(channel), [
                            req(config=speaker_config()), req(text="Hello "), req(text="there."),
                            req(end=tts_pb2.EndOfInput())])
                    return info.value

        err = run(refused())
        assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "all slots busy" in err.details()
    finally:
        full.close()


def test_text_goes_to_the_talker_behind_start_before_its_ack(model_dir, tmp_path):
    """A client that sends its text at once: the gateway forwards it right behind START rather than
    after the talker's ACK (a talker turn and two gateway turns of first audio under load). This
    talker ACKs a streaming START only once its first TEXT came, so a gateway that waited for the
    ACK would time out here."""
    words = TEXT.split(" ")
    held = FakeTalker(hold_ack_for_text=True)
    try:
        async def body():
            async with running_gateway(model_dir, [held.endpoint], tmp_path, ack_timeout_s=5.0) as gw:
                async with grpc.aio.insecure_channel(f"127.0.0.1:{gw.port}") as channel:
                    cfg = speaker_config(audio_format=config_pb2.AudioFormat(encoding=config_pb2.AUDIO_ENCODING_FLOAT32))
                    messages = [req(config=cfg)] + [req(text=w + " ") for w in words[:-1]] + [
                        req(text=words[-1]), req(end=tts_pb2.EndOfInput())]
                    return await collect(tts_pb2_grpc.TextToSpeechStub(channel), messages)

        responses = run(body())
        kinds = [r.WhichOneof("response") for r in responses]
        # the start message still comes first (audio that overtook the ACK waited for it), the summary last
        assert kinds[0] == "start" and kinds[-1] == "summary" and set(kinds[1:-1]) == {"audio"}
        assert held.text_before_ack == [responses[0].start.request_id]
        expected_ids = TextTokenizer.from_dir(model_dir).target_ids(TEXT)
        assert tokens_from_pcm(np.frombuffer(audio_of(responses), "<f4")) == [
            i % 1000 for i in expected_ids]
    finally:
        held.close()


def test_cancel_and_deadline_become_aborts(model_dir, talker, tmp_path):
    async def body():
        async with running_gateway(model_dir, [talker.endpoint], tmp_path) as gw:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{gw.port}") as channel:
                stub = tts_pb2_grpc.TextToSpeechStub(channel)
                call = stub.StreamSynthesize(timeout=10)
                await call.write(req(config=speaker_config()))
                cancelled_id = (await call.read()).start.request_id
                await call.write(req(text="Hello there friend "))
                await call.read()
                call.cancel()
                # the deadline must outlast the gateway's answer to the config (its start message),
                # which took > 0.8 s on a loaded 2-core machine; 3 s keeps a margin and passes by itself
                late = stub.StreamSynthesize(timeout=LATE_DEADLINE_S)
                await late.write(req(config=speaker_config()))
                late_id = (await late.read()).start.request_id
                with pytest.raises(grpc.aio.AioRpcError) as info:
                    await late.read()
                assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
                # Wait for both aborts while the gateway still runs: the client sees its deadline
                # before the server-side handler has sent the abort, and stopping the gateway first
                # would close the talker socket under that send (a flake seen on the 2-core machine).
                await asyncio.to_thread(
                    talker.wait_for, lambda t: all(i in t.requests and t.requests[i].abort for i in (cancelled_id, late_id)))
                return cancelled_id, late_id

    cancelled_id, late_id = run(body())
    assert talker.requests[cancelled_id].abort.reason == common_pb2.STATUS_CODE_CANCELLED
    assert talker.requests[late_id].start.deadline_unix_ms > 0


def test_lost_talker_fails_streams_unavailable_and_health_follows(model_dir, talker, tmp_path):
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    async def body():
        async with running_gateway(model_dir, [talker.endpoint], tmp_path) as gw:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{gw.port}") as channel:
                health = health_pb2_grpc.HealthStub(channel)
                before = (await health.Check(health_pb2.HealthCheckRequest(service=""), timeout=5)).status
                stub = tts_pb2_grpc.TextToSpeechStub(channel)
                call = stub.StreamSynthesize(timeout=10)
                await call.write(req(config=speaker_config()))
                await call.read()
                talker.is_silent = True
                with pytest.raises(grpc.aio.AioRpcError) as info:
                    await call.read()
                after = (await health.Check(health_pb2.HealthCheckRequest(service=""), timeout=5)).status
                return before, info.value, after

    before, err, after = run(body())
    from grpc_health.v1 import health_pb2
    assert before == health_pb2.HealthCheckResponse.SERVING
    assert err.code() == grpc.StatusCode.UNAVAILABLE and "lost" in err.details()
    assert after == health_pb2.HealthCheckResponse.NOT_SERVING


def test_unary_over_the_audio_limit_is_refused_before_the_talker_sees_a_start(model_dir, talker, tmp_path):
    """Limit 150 kB: 16-bit audio at 24 kHz holds 3.1 s, less than the smallest text budget (4 s);
    an explicit max_frames that fits is let through and sent as given, an unset one as 0 (the
    talker's own default)."""
    from service_common.frame_budget import MIN_BUDGET_FRAMES

    async def body():
        async with running_gateway(model_dir, [talker.endpoint], tmp_path, max_unary_audio_bytes=150_000) as gw:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{gw.port}") as channel:
                stub = tts_pb2_grpc.TextToSpeechStub(channel)
                wav = speaker_config(audio_format=config_pb2.AudioFormat(encoding=config_pb2.AUDIO_ENCODING_WAV))
                with pytest.raises(grpc.aio.AioRpcError) as info:
                    await stub.Synthesize(tts_pb2.SynthesizeRequest(config=wav, text="Hi."), timeout=10)
                refused_starts = len(talker.requests)
                capped = speaker_config()
                capped.sampling.max_frames = 30
                ok = await stub.Synthesize(tts_pb2.SynthesizeRequest(config=capped, text="Hi."), timeout=10)
                streamed = await collect(stub, [req(config=speaker_config()), req(text="Hi."),
                                                req(end=tts_pb2.EndOfInput())])
                return info.value, refused_starts, ok, streamed

    err, refused_starts, ok, streamed = run(body())
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and "StreamSynthesize" in err.details()
    assert f"up to {MIN_BUDGET_FRAMES} frames" in err.details() and "max_frames <=" in err.details()
    assert refused_starts == 0
    assert ok.HasField("summary") and streamed[-1].HasField("summary")   # streaming has no such limit
    starts = sorted((r.start.sampling.max_frames for r in talker.requests.values()), reverse=True)
    assert starts == [30, 0]
