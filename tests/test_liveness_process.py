"""Request liveness across the talker -> vocoder link, with the real processes (tiny, CPU).

The vocoder's talker timeout is short (1.5 s). A request whose talker waits for streamed text
longer than that must still complete with the offline audio (the talker's heartbeats keep it
alive), while killing the talker must fail its open request at the gateway with UNAVAILABLE.
"""
from __future__ import annotations

import time

import numpy as np
import pytest

from checkpoint.files import resolve_model_dir
from process_support import TalkerProcess, VocoderProcess
from protos import wire
from protos.tts.internal.v1 import common_pb2
from talker_service.generate import SynthesisRequest
from talker_service.model import SamplingParams
from test_talker_process_support import GatewayStandIn, ids_of, start_fields, tiny_synth, wait_healthy_vocoders
from test_vocoder_process_support import one_cpu_thread

pytestmark = pytest.mark.timeout(180)
WAIT_S = 30.0
TALKER_TIMEOUT_S = 1.5
PARK_S = 3 * TALKER_TIMEOUT_S
ATOL = 2e-5
SAMPLES_PER_FRAME = 1920


@pytest.fixture(scope="module")
def synth():
    yield from tiny_synth()


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    resolve_model_dir("tiny")
    work = tmp_path_factory.mktemp("liveness")
    vocoder = VocoderProcess(work, ["--model", "tiny", "--device", "cpu", "--cpu-threads", "1", "--bind",
                                    "tcp://127.0.0.1:*", "--grpc-port", "0", "--grpc-host", "127.0.0.1",
                                    "--heartbeat-interval-ms", "200", "--talker-timeout-s", str(TALKER_TIMEOUT_S),
                                    "--first-chunk-frames", "1", "--steady-chunk-frames", "4", "--max-wait-ms", "50"])
    talker = gateway = None
    try:
        codes_endpoint = vocoder.wait_ready(WAIT_S * 2)["codes_endpoint"]
        talker = TalkerProcess(work, ["--model", "tiny", "--device", "cpu", "--cpu-threads", "1", "--bind",
                                      "tcp://127.0.0.1:*", "--vocoders", codes_endpoint, "--grpc-host", "127.0.0.1",
                                      "--grpc-port", "0", "--max-slots", "4", "--max-seq-len", "256",
                                      "--heartbeat-interval-ms", "200", "--vocoder-timeout-s", "1.0"])
        info = talker.wait_ready(WAIT_S * 2)
        gateway = GatewayStandIn(info["requests_endpoint"])
        wait_healthy_vocoders(gateway, talker, 1, WAIT_S)
        yield dict(vocoder=vocoder, talker=talker, gateway=gateway)
    finally:
        if gateway is not None:
            gateway.close()
        if talker is not None:
            talker.kill()
        vocoder.kill()


def wait_first_audio(gateway: GatewayStandIn, request_id: str) -> None:
    """The vocoder stream is open (audio came) before the request parks: the park is then real."""
    deadline = time.monotonic() + WAIT_S
    while not (request_id in gateway.received and gateway.received[request_id].chunks):
        assert time.monotonic() < deadline, f"no audio for {request_id} within {WAIT_S} s"
        assert request_id not in gateway.received or gateway.received[request_id].error is None, \
            gateway.received[request_id].error
        gateway.pump(50)


def wait_audio_samples(gateway: GatewayStandIn, request_id: str, num_samples: int) -> None:
    deadline = time.monotonic() + WAIT_S
    while (got := gateway.received.get(request_id)) is None or len(got.audio()) < num_samples:
        assert time.monotonic() < deadline, f"{request_id}: not {num_samples} samples within {WAIT_S} s"
        assert got is None or got.error is None, got.error
        gateway.pump(50)
    assert len(got.audio()) == num_samples and not got.chunks[-1].is_final


def test_request_parked_past_the_talker_timeout_still_completes(stack, synth):
    gateway = stack["gateway"]
    text = ids_of(synth, "The quick brown fox jumps over the lazy dog.")
    leading = text[:3]
    gateway.start("parked", **start_fields(synth, 31, 16, leading, complete=False))
    gateway.reply("parked", wire.MessageType.ACK, WAIT_S)
    # Streaming text: the prefill takes t1 and each decode step one more text token, so the leading
    # text makes exactly len(leading) frames before the talker parks; wait until all their audio
    # is here (the vocoder decodes a partial chunk after --max-wait-ms), however slow the machine.
    wait_audio_samples(gateway, "parked", len(leading) * SAMPLES_PER_FRAME)
    num_chunks = len(gateway.received["parked"].chunks)
    park_until = time.monotonic() + PARK_S            # an LLM pausing: no text, so no frames either
    while time.monotonic() < park_until:
        gateway.pump(50)
    got = gateway.received["parked"]
    assert got.error is None, got.error
    assert len(got.chunks) == num_chunks and not got.chunks[-1].is_final   # really parked, still open
    gateway.text("parked", 0, text[3:])
    gateway.end("parked", 1)
    got = gateway.wait_done(["parked"], WAIT_S)["parked"]
    assert got.error is None, got.error
    request = SynthesisRequest(text_ids=text, voice="vivian", language="english", non_streaming_mode=False,
                               sampling=SamplingParams(seed=31, max_new_tokens=17))
    with one_cpu_thread():
        codes = synth.generate_codes([request])[0]
        pcm = synth.decode(codes)
    audio = got.audio()
    assert len(audio) == len(pcm) == codes.shape[0] * SAMPLES_PER_FRAME > 0
    assert np.abs(audio - pcm).max() <= ATOL


def test_killed_talker_fails_its_open_request_unavailable(stack, synth):
    gateway = stack["gateway"]
    gateway.start("doomed", **start_fields(synth, 32, 200, ids_of(synth, "Hello there"), complete=False))
    gateway.reply("doomed", wire.MessageType.ACK, WAIT_S)
    wait_first_audio(gateway, "doomed")
    killed_s = time.monotonic()
    stack["talker"].kill()
    got = gateway.wait_done(["doomed"], WAIT_S)["doomed"]
    elapsed_s = time.monotonic() - killed_s
    assert got.error is not None and got.error.code == common_pb2.STATUS_CODE_UNAVAILABLE, got
    assert "talker sent nothing" in got.error.message and "no heartbeats" in got.error.message
    assert TALKER_TIMEOUT_S * 0.8 <= elapsed_s <= TALKER_TIMEOUT_S + 10.0
