"""A real talker process and a real vocoder process (tiny checkpoint, CPU) on loopback, driven by a
gateway stand-in over ZeroMQ. The talker also lists a vocoder endpoint where nothing listens:
requests must go to the healthy one. The last test kills the vocoder."""
from __future__ import annotations

import time

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from checkpoint.files import resolve_model_dir
from process_support import TalkerProcess, VocoderProcess, dead_port, free_port
from protos import wire
from protos.tts.internal.v1 import admin_pb2, admin_pb2_grpc, common_pb2
from protos.tts.v1 import config_pb2
from talker_service.generate import SynthesisRequest
from talker_service.model import SamplingParams
from test_talker_process_support import GatewayStandIn, ids_of, start_fields, tiny_synth, wait_healthy_vocoders
from test_vocoder_process_support import one_cpu_thread

WAIT_S = 30.0
ATOL = 2e-5


@pytest.fixture(scope="module")
def synth():
    yield from tiny_synth()


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    resolve_model_dir("tiny")
    work = tmp_path_factory.mktemp("talker")
    vocoder = VocoderProcess(work, ["--model", "tiny", "--device", "cpu", "--cpu-threads", "1", "--bind",
                                    "tcp://127.0.0.1:*", "--grpc-port", "0", "--grpc-host", "127.0.0.1",
                                    "--heartbeat-interval-ms", "200", "--talker-timeout-s", "30",
                                    "--first-chunk-frames", "2", "--steady-chunk-frames", "4", "--max-wait-ms", "50"])
    talker = None
    # The dead port stays bound for the whole module: a port only probed free could be handed to the
    # talker's own bind to port 0, and the talker would then take itself for a healthy vocoder.
    with dead_port() as unused_port:
        try:
            codes_endpoint = vocoder.wait_ready(WAIT_S * 2)["codes_endpoint"]
            dead_endpoint = f"tcp://127.0.0.1:{unused_port}"
            grpc_port = free_port()
            talker = TalkerProcess(work, ["--model", "tiny", "--device", "cpu", "--cpu-threads", "1", "--bind",
                                          "tcp://127.0.0.1:*", "--vocoders", f"{dead_endpoint},{codes_endpoint}",
                                          "--grpc-host", "127.0.0.1", "--grpc-port", str(grpc_port), "--max-slots", "4",
                                          "--max-seq-len", "256", "--heartbeat-interval-ms", "200",
                                          "--vocoder-timeout-s", "1.0", "--gateway-timeout-s", "1.5",
                                          # as on CUDA (its default there): step N+1 queued before N is read
                                          "--async-decode", "on"])
            info = talker.wait_ready(WAIT_S * 2)
            channel = grpc.insecure_channel(f"127.0.0.1:{info['grpc_port']}")
            gateway = GatewayStandIn(info["requests_endpoint"])
            wait_healthy_vocoders(gateway, talker, 1, WAIT_S)   # the talker must have heard the live vocoder
            yield dict(vocoder=vocoder, talker=talker, gateway=gateway, channel=channel, info=info)
            gateway.close()
            channel.close()
        finally:
            if talker is not None:
                talker.kill()
            vocoder.kill()


def offline(synth, text_ids, seed, max_frames, streaming=True, min_frames=2):
    request = SynthesisRequest(text_ids=list(text_ids), voice="vivian", language="english",
                               non_streaming_mode=not streaming,
                               sampling=SamplingParams(seed=seed, max_new_tokens=max_frames + 1,
                                                       min_new_tokens=min_frames))
    with one_cpu_thread():
        codes = synth.generate_codes([request])[0]
        return codes, synth.decode(codes)


def test_health_serving_and_generate_codes_over_grpc(stack, synth):
    health = health_pb2_grpc.HealthStub(stack["channel"]).Check(health_pb2.HealthCheckRequest(), timeout=5)
    assert health.status == health_pb2.HealthCheckResponse.SERVING
    admin = admin_pb2_grpc.TalkerAdminStub(stack["channel"])
    config = config_pb2.SynthesisConfig(speaker=config_pb2.SpeakerVoice(name="vivian"), language="english",
                                        text_mode=config_pb2.TEXT_MODE_STREAMING,
                                        sampling=config_pb2.SamplingParams(seed=5, max_frames=8))
    responses = list(admin.GenerateCodes(admin_pb2.GenerateCodesRequest(text="Hello there.", config=config),
                                         timeout=WAIT_S))
    codes = np.concatenate([np.asarray(r.codes, dtype=np.int64).reshape(-1, 16) for r in responses])
    assert responses[-1].is_final and responses[-1].seed == 5
    expected, _ = offline(synth, ids_of(synth, "Hello there."), 5, 8)
    assert np.array_equal(codes, expected.numpy())


def test_min_frames_over_grpc_gives_fixed_length_and_must_not_exceed_max_frames(stack, synth):
    # The tiny checkpoint never samples EOS, so this proves the wiring end to end, not the masking;
    # test_talker_start_reader.py checks that min_frames reaches SamplingParams on both paths.
    admin = admin_pb2_grpc.TalkerAdminStub(stack["channel"])

    def generate(min_frames: int, max_frames: int):
        config = config_pb2.SynthesisConfig(
            speaker=config_pb2.SpeakerVoice(name="vivian"), language="english",
            text_mode=config_pb2.TEXT_MODE_STREAMING,
            sampling=config_pb2.SamplingParams(seed=6, min_frames=min_frames, max_frames=max_frames))
        return list(admin.GenerateCodes(admin_pb2.GenerateCodesRequest(text="Hi.", config=config), timeout=WAIT_S))

    responses = generate(24, 24)
    codes = np.concatenate([np.asarray(r.codes, dtype=np.int64).reshape(-1, 16) for r in responses])
    expected, _ = offline(synth, ids_of(synth, "Hi."), 6, 24, min_frames=24)
    assert codes.shape == (24, 16) and np.array_equal(codes, expected.numpy())
    with pytest.raises(grpc.RpcError) as info:
        generate(25, 24)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "min_frames" in info.value.details()


def test_talker_to_vocoder_audio_equals_offline_synthesizer(stack, synth):
    gateway = stack["gateway"]
    whole = ids_of(synth, "The quick brown fox jumps over the lazy dog.")
    other = ids_of(synth, "Good morning.")
    # "drip": streaming text, one token per TEXT message; "whole": everything in START, non-streaming
    gateway.start("drip", **start_fields(synth, 21, 14, text_ids=whole[:1], complete=False))
    gateway.start("whole", **start_fields(synth, 22, 10, text_ids=other, streaming=False))
    for seq, token in enumerate(whole[1:]):
        gateway.text("drip", seq, [token])
        gateway.pump(10)
    gateway.end("drip", len(whole) - 1)
    assert gateway.reply("drip", wire.MessageType.ACK, WAIT_S).vocoder_id
    got = gateway.wait_done(["drip", "whole"], WAIT_S)
    for rid, ids, seed, frames, streaming in (("drip", whole, 21, 14, True), ("whole", other, 22, 10, False)):
        assert got[rid].error is None, got[rid].error
        codes, pcm = offline(synth, ids, seed, frames, streaming)
        audio = got[rid].audio()
        assert len(audio) == len(pcm) == codes.shape[0] * 1920 > 0
        assert np.abs(audio - pcm).max() <= ATOL
        summary = got[rid].chunks[-1].generation
        assert summary.num_frames == codes.shape[0] and summary.num_text_tokens == len(ids)


def test_protocol_faults_fail_only_the_request_named(stack, synth):
    gateway = stack["gateway"]
    gateway.send(wire.MessageType.ABORT, common_pb2.Abort(request_id="never-started"))   # ignored
    gateway.text("ghost", 0, [5])
    assert gateway.reply("ghost", wire.MessageType.ERROR, WAIT_S).code == common_pb2.STATUS_CODE_NOT_FOUND
    ids = ids_of(synth, "Hi.")
    gateway.start("dup", **start_fields(synth, 1, 6, text_ids=ids))
    gateway.start("dup", **start_fields(synth, 1, 6, text_ids=ids))
    assert gateway.reply("dup", wire.MessageType.ERROR, WAIT_S).code == common_pb2.STATUS_CODE_ALREADY_EXISTS
    gateway.received["dup"].error = None   # that error refused the second START only
    got = gateway.wait_done(["dup"], WAIT_S)["dup"]
    assert got.chunks and got.chunks[-1].is_final   # the original request went on and finished
    gateway.start("late-text", **start_fields(synth, 2, 200, text_ids=ids, complete=False))
    gateway.end("late-text", 0)
    gateway.text("late-text", 0, [7])
    error = gateway.reply("late-text", wire.MessageType.ERROR, WAIT_S)
    assert error.code == common_pb2.STATUS_CODE_FAILED_PRECONDITION and "after END" in error.message


def talker_stats(stack) -> admin_pb2.TalkerStats:
    return admin_pb2_grpc.TalkerAdminStub(stack["channel"]).GetStats(admin_pb2.GetStatsRequest(), timeout=5)


def test_gone_gateway_gets_its_requests_aborted(stack, synth):
    lost = GatewayStandIn(stack["info"]["requests_endpoint"], name="gateway-that-dies")
    try:
        lost.start("orphan", **start_fields(synth, 3, 200, text_ids=ids_of(synth, "Hello"), complete=False))
        lost.reply("orphan", wire.MessageType.ACK, WAIT_S)
    finally:
        lost.close()   # no more heartbeats from it
    aborted_before = talker_stats(stack).requests.num_aborted
    deadline = time.monotonic() + WAIT_S
    while (stats := talker_stats(stack)).requests.num_aborted == aborted_before:
        assert time.monotonic() < deadline, "the gone gateway's request was never aborted"
        stack["gateway"].pump(100)
    assert stats.load.num_slots_used == 0 and not any(g.peer_id == "gateway-that-dies" for g in stats.gateways)


def test_dead_vocoder_fails_its_requests_unavailable(stack, synth):
    gateway = stack["gateway"]
    # no text yet: nothing is ever sent to the vocoder, so only its missing heartbeats reveal the death
    gateway.start("waiting", **start_fields(synth, 4, 200, complete=False))
    gateway.reply("waiting", wire.MessageType.ACK, WAIT_S)
    stack["vocoder"].kill()
    error = gateway.reply("waiting", wire.MessageType.ERROR, WAIT_S)
    assert error.code == common_pb2.STATUS_CODE_UNAVAILABLE and "went silent" in error.message
    gateway.start("after", **start_fields(synth, 5, 6, text_ids=ids_of(synth, "Hi.")))
    error = gateway.reply("after", wire.MessageType.ERROR, WAIT_S)
    assert error.code == common_pb2.STATUS_CODE_UNAVAILABLE and "no healthy vocoder" in error.message
    assert talker_stats(stack).load.num_slots_used == 0
