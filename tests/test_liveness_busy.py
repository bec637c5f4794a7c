"""Busy is not dead (issue #16), with the real processes (tiny, CPU).

Every step of one side takes over 1.5 s (the test hook `--debug-step-delay-s`), longer than its
peer's timeout for it (1 s): before heartbeats had a thread of their own, the talker took such a
vocoder for a dead one (and the vocoder such a talker) and failed every stream on it. Now every
stream completes with the offline audio, while a frozen vocoder (SIGSTOP) is still found within
the timeout.
"""
from __future__ import annotations

import os
import signal
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

pytestmark = pytest.mark.timeout(240)
WAIT_S = 60.0
PEER_TIMEOUT_S = 1.0
STEP_DELAY_S = 1.5
ATOL = 2e-5
NUM_FRAMES = 8


@pytest.fixture(scope="module")
def synth():
    yield from tiny_synth()


@pytest.fixture(scope="module", params=["slow-vocoder", "slow-talker"])
def stack(request, tmp_path_factory):
    resolve_model_dir("tiny")
    work = tmp_path_factory.mktemp("busy")
    slow = ["--debug-step-delay-s", str(STEP_DELAY_S)]
    vocoder = VocoderProcess(work, ["--model", "tiny", "--device", "cpu", "--cpu-threads", "1", "--bind",
                                    "tcp://127.0.0.1:*", "--grpc-port", "0", "--grpc-host", "127.0.0.1",
                                    "--heartbeat-interval-ms", "200", "--talker-timeout-s", str(PEER_TIMEOUT_S),
                                    *(slow if request.param == "slow-vocoder" else []),
                                    "--first-chunk-frames", "1", "--steady-chunk-frames", "8", "--max-wait-ms", "50"])
    talker = gateway = None
    try:
        codes_endpoint = vocoder.wait_ready(WAIT_S)["codes_endpoint"]
        talker = TalkerProcess(work, ["--model", "tiny", "--device", "cpu", "--cpu-threads", "1", "--bind",
                                      "tcp://127.0.0.1:*", "--vocoders", codes_endpoint, "--grpc-host", "127.0.0.1",
                                      "--grpc-port", "0", "--max-slots", "4", "--max-seq-len", "256",
                                      "--heartbeat-interval-ms", "200", "--vocoder-timeout-s", str(PEER_TIMEOUT_S),
                                      *(slow if request.param == "slow-talker" else [])])
        info = talker.wait_ready(WAIT_S)
        gateway = GatewayStandIn(info["requests_endpoint"])
        wait_healthy_vocoders(gateway, talker, 1, WAIT_S)
        yield dict(vocoder=vocoder, talker=talker, gateway=gateway, slow=request.param)
    finally:
        if gateway is not None:
            gateway.close()
        if talker is not None:
            talker.kill()
        os.kill(vocoder.proc.pid, signal.SIGCONT) if vocoder.child.is_alive() else None
        vocoder.kill()


def test_slow_decode_steps_fail_no_stream(stack, synth):
    gateway = stack["gateway"]
    texts = {f"{stack['slow']}-a": "Hello there.", f"{stack['slow']}-b": "A second voice, made slowly."}
    for seed, (rid, text) in enumerate(texts.items(), start=41):
        gateway.start(rid, **start_fields(synth, seed, NUM_FRAMES, ids_of(synth, text)))
    started_s = time.monotonic()
    done = gateway.wait_done(list(texts), WAIT_S)
    elapsed_s = time.monotonic() - started_s
    assert elapsed_s > 2 * STEP_DELAY_S, "the steps were not slow: the test proves nothing"
    for seed, (rid, text) in enumerate(texts.items(), start=41):
        got = done[rid]
        assert got.error is None, (rid, got.error, stack["vocoder"].log_tail(), stack["talker"].log_tail())
        request = SynthesisRequest(text_ids=ids_of(synth, text), voice="vivian", language="english",
                                   non_streaming_mode=False,
                                   sampling=SamplingParams(seed=seed, max_new_tokens=NUM_FRAMES + 1))
        with one_cpu_thread():
            pcm = synth.decode(synth.generate_codes([request])[0])
        audio = got.audio()
        assert len(audio) == len(pcm) > 0
        assert np.abs(audio - pcm).max() <= ATOL


@pytest.mark.parametrize("stack", ["slow-vocoder"], indirect=True)
def test_a_frozen_vocoder_still_fails_its_streams_unavailable(stack, synth):
    gateway, vocoder = stack["gateway"], stack["vocoder"]
    gateway.start("frozen", **start_fields(synth, 43, 200, ids_of(synth, "Hello there"), complete=False))
    gateway.reply("frozen", wire.MessageType.ACK, WAIT_S)
    os.kill(vocoder.proc.pid, signal.SIGSTOP)
    stopped_s = time.monotonic()
    try:
        got = gateway.wait_done(["frozen"], WAIT_S)["frozen"]
    finally:
        os.kill(vocoder.proc.pid, signal.SIGCONT)
    elapsed_s = time.monotonic() - stopped_s
    assert got.error is not None and got.error.code == common_pb2.STATUS_CODE_UNAVAILABLE, got
    assert "went silent" in got.error.message
    assert elapsed_s <= PEER_TIMEOUT_S + 10.0, elapsed_s   # found by its silence, with a margin a loaded machine keeps
