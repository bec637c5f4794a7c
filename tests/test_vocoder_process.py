"""A real vocoder process (tiny checkpoint, CPU) on loopback, driven by a talker stand-in over ZeroMQ.

One process serves the whole module (start-up costs seconds); every test leaves no live request
behind, which the admin stats confirm. The last test stops the process with SIGTERM.
"""
from __future__ import annotations

import random
import signal
import time

import grpc
import numpy as np
import pytest
import torch
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from checkpoint.files import resolve_model_dir
from process_support import VocoderProcess, free_port
from protos import wire
from protos.tts.internal.v1 import admin_pb2, admin_pb2_grpc, common_pb2, talker_pb2, vocoder_pb2
from test_vocoder_process_support import (TalkerStandIn, entry, frames_message, offline_pcm, one_cpu_thread,
                                         random_codes)
from vocoder_service.codec import Code2Wav

SPF = 1920
ATOL = 2e-5
TALKER_TIMEOUT_S = 2.0
MAX_SLOTS = 3
WAIT_S = 30.0


@pytest.fixture(scope="module")
def model():
    with one_cpu_thread():
        yield Code2Wav.from_pretrained(resolve_model_dir("tiny"), "cpu", torch.float32)


@pytest.fixture(scope="module")
def vocoder(tmp_path_factory):
    resolve_model_dir("tiny")  # generate the cached checkpoint here, not inside the process's start-up
    grpc_port = free_port()
    proc = VocoderProcess(tmp_path_factory.mktemp("vocoder"), [
        "--model", "tiny", "--device", "cpu", "--cpu-threads", "1", "--bind", "tcp://127.0.0.1:*",
        "--grpc-host", "127.0.0.1", "--grpc-port", str(grpc_port), "--max-slots", str(MAX_SLOTS),
        "--first-chunk-frames", "2", "--steady-chunk-frames", "4", "--max-wait-ms", "50",
        "--talker-timeout-s", str(TALKER_TIMEOUT_S), "--heartbeat-interval-ms", "200", "--drain-timeout-s", "2",
    ])
    try:
        # Fast reconnects: the default backoff (1 s and growing) would sleep through the loading phase.
        channel = grpc.insecure_channel(f"127.0.0.1:{grpc_port}", options=[
            ("grpc.initial_reconnect_backoff_ms", 50), ("grpc.min_reconnect_backoff_ms", 50),
            ("grpc.max_reconnect_backoff_ms", 100)])
        proc.health_seen = wait_health_serving(channel, WAIT_S * 3, proc)
        proc.wait_ready(WAIT_S)
        proc.channel = channel
        yield proc
        channel.close()
    finally:
        proc.kill()


def wait_health_serving(channel, timeout_s: float, proc: VocoderProcess) -> list[str]:
    """Poll health until SERVING; returns the distinct statuses seen on the way."""
    stub, seen = health_pb2_grpc.HealthStub(channel), []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.proc.poll() is not None:
            raise RuntimeError(f"vocoder exited:\n{proc.log_tail()}")
        try:
            status = health_pb2.HealthCheckResponse.ServingStatus.Name(
                stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=1.0).status)
        except grpc.RpcError as exc:
            status = f"rpc {exc.code().name}"
        if not seen or seen[-1] != status:
            seen.append(status)
        if status == "SERVING":
            return seen
        time.sleep(0.02)
    raise TimeoutError(f"health never SERVING (saw {seen}):\n{proc.log_tail()}")


@pytest.fixture
def talker(vocoder):
    stand_in = TalkerStandIn(vocoder.info["codes_endpoint"])
    stand_in.next_from_vocoder(wire.MessageType.HEARTBEAT, WAIT_S)  # the vocoder greets a new peer at once
    try:
        yield stand_in
        assert_no_live_requests(vocoder)
    finally:
        stand_in.close()


def stats(vocoder, reset: bool = False) -> admin_pb2.VocoderStats:
    return admin_pb2_grpc.VocoderAdminStub(vocoder.channel).GetStats(admin_pb2.GetStatsRequest(reset=reset), timeout=WAIT_S)


def assert_no_live_requests(vocoder) -> None:
    deadline = time.monotonic() + WAIT_S
    while (used := stats(vocoder).load.num_slots_used) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert used == 0, f"{used} slots still held"




def test_health_goes_serving_and_reflection_lists_services(vocoder):
    assert vocoder.health_seen[-1] == "SERVING" and "NOT_SERVING" in vocoder.health_seen, vocoder.health_seen
    stub = reflection_pb2_grpc.ServerReflectionStub(vocoder.channel)
    [reply] = list(stub.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]),
                                             timeout=WAIT_S))
    names = {s.name for s in reply.list_services_response.service}
    assert {"tts.internal.v1.VocoderAdmin", "grpc.health.v1.Health"} <= names, names


def test_three_concurrent_requests_stream_their_offline_audio(vocoder, talker, model):
    plan = {"req-a": (0, 8), "req-b": (5, 6), "req-c": (0, 3)}   # (context frames, generated frames)
    codes = {rid: random_codes(i, ctx + gen) for i, (rid, (ctx, gen)) in enumerate(plan.items())}
    sent, seqs, rng = {rid: 0 for rid in plan}, {rid: 0 for rid in plan}, random.Random(3)
    while any(sent[rid] < len(codes[rid]) for rid in plan):   # one FramesChunk per "talker step"
        batch = []
        for rid, (ctx, gen) in plan.items():
            if sent[rid] == len(codes[rid]):
                continue
            k = ctx + 1 if seqs[rid] == 0 and ctx else min(rng.randint(1, 3), len(codes[rid]) - sent[rid])
            final = sent[rid] + k == len(codes[rid])
            e = entry(rid, seqs[rid], k, context=min(max(ctx - sent[rid], 0), k), final=final,
                      reply_to=talker.reply_to if seqs[rid] == 0 else "",
                      summary=vocoder_pb2.GenerationSummary(num_frames=gen) if final else None)
            batch.append((e, codes[rid][sent[rid]:sent[rid] + k]))
            sent[rid] += k
            seqs[rid] += 1
        talker.send_frames(batch)
        time.sleep(rng.random() * 0.02)
    got = talker.collect(list(plan), WAIT_S)
    for rid, (ctx, gen) in plan.items():
        chunks = got[rid].chunks
        assert got[rid].error is None, got[rid].error
        assert [c.seq for c in chunks] == list(range(len(chunks)))
        assert [c.sample_offset for c in chunks] == list(np.cumsum([0] + [c.num_samples for c in chunks[:-1]]))
        assert chunks[-1].is_final and chunks[-1].generation.num_frames == gen
        assert all(c.sample_rate_hz == 24000 and c.timings.batch_size >= 1 for c in chunks if c.num_samples)
        np.testing.assert_allclose(got[rid].audio(), offline_pcm(model, codes[rid])[ctx * SPF:], rtol=0, atol=ATOL,
                                   err_msg=rid)


def test_malformed_messages_are_rejected_without_disturbing_others(vocoder, talker, model):
    good = random_codes(20, 6)
    talker.send_frames([(entry("good", 0, 3, reply_to=talker.reply_to), good[:3])])
    errors = {}

    def expect_error(label: str) -> common_pb2.Error:
        errors[label] = talker.next_from_vocoder(wire.MessageType.ERROR, WAIT_S)
        return errors[label]

    talker.send_raw([b"NOPE", b""])
    assert expect_error("tag").request_id == "" and "unknown message type" in errors["tag"].message
    # A FRAMES header promising 4 rows of codes over a 10-byte frame: the request it opens gets the error.
    header, arrays = frames_message("t", [(entry("bad-size", 0, 4, reply_to=talker.reply_to), good[:4])], {},
                                    lambda: 99)
    frames = wire.encode(wire.MessageType.FRAMES, header, arrays)
    talker.send_raw([*(bytes(f) for f in frames[:-1]), b"\0" * 10])
    assert expect_error("size").request_id == "bad-size" and "bytes" in errors["size"].message
    talker.send(wire.MessageType.START, talker_pb2.Start(request_id="wrong-link"))
    assert "not accepted" in expect_error("start").message
    talker.send_frames([(entry("never-opened", 3, 1), good[:1])])
    assert expect_error("unknown").code == common_pb2.STATUS_CODE_NOT_FOUND
    talker.send_frames([(entry("bad-codes", 0, 1, reply_to=talker.reply_to), np.full((1, 16), 4000))])
    assert expect_error("codes").code == common_pb2.STATUS_CODE_INVALID_ARGUMENT
    talker.send_frames([(entry("gappy", 0, 2, reply_to=talker.reply_to), good[:2])])
    talker.send_frames([(entry("gappy", 2, 1), good[:1])])
    assert expect_error("gap").code == common_pb2.STATUS_CODE_DATA_LOSS and errors["gap"].request_id == "gappy"
    talker.send_frames([(entry("good", 1, 3, final=True), good[3:])])
    got = talker.collect(["good", "bad-codes", "gappy"], WAIT_S)
    np.testing.assert_allclose(got["good"].audio(), offline_pcm(model, good), rtol=0, atol=ATOL)
    # Requests that had opened get their ERROR at the gateway too (nothing else would end them there).
    assert got["bad-codes"].error.code == common_pb2.STATUS_CODE_INVALID_ARGUMENT
    assert got["gappy"].error.code == common_pb2.STATUS_CODE_DATA_LOSS


def test_requests_beyond_capacity_are_refused_and_credits_come_back(vocoder, talker):
    rids = [f"cap-{i}" for i in range(MAX_SLOTS)]
    talker.send_frames([(entry(rid, 0, 1, reply_to=talker.reply_to), random_codes(30 + i, 1)) for i, rid in enumerate(rids)])
    talker.send_frames([(entry("one-too-many", 0, 1, reply_to=talker.reply_to), random_codes(40, 1))])
    refusal = talker.next_from_vocoder(wire.MessageType.ERROR, WAIT_S)
    assert (refusal.request_id, refusal.code) == ("one-too-many", common_pb2.STATUS_CODE_RESOURCE_EXHAUSTED)
    deadline = time.monotonic() + WAIT_S
    while talker.last_load is None or talker.last_load.num_slots_used < MAX_SLOTS:   # credits hit zero
        talker.next_from_vocoder(wire.MessageType.HEARTBEAT, max(0.1, deadline - time.monotonic()))
    talker.send_frames([(entry(rid, 1, 0, final=True), np.zeros((0, 16))) for rid in rids])
    got = talker.collect(rids, WAIT_S)
    assert all(got[rid].error is None and got[rid].chunks[-1].is_final for rid in rids)
    while talker.last_load.num_slots_used:                                            # and come back
        talker.next_from_vocoder(wire.MessageType.HEARTBEAT, max(0.1, deadline - time.monotonic()))
    assert talker.last_load.num_slots_total == MAX_SLOTS and stats(vocoder).requests.num_refused >= 1


def test_silent_talker_fails_its_request_at_the_gateway_after_the_timeout(vocoder, talker):
    started = time.monotonic()
    talker.send_frames([(entry("silent", 0, 2, reply_to=talker.reply_to), random_codes(50, 2))])
    got = talker.collect(["silent"], TALKER_TIMEOUT_S + WAIT_S)["silent"]
    elapsed_s = time.monotonic() - started
    assert got.error is not None and got.error.code == common_pb2.STATUS_CODE_UNAVAILABLE, got
    assert "talker sent nothing" in got.error.message and elapsed_s >= TALKER_TIMEOUT_S * 0.9
    # audio before the silence still came (a lone stream: a 1-frame first chunk, then the rest)
    assert got.chunks and sum(c.num_samples for c in got.chunks) == 2 * SPF


def test_admin_decode_equals_offline_and_rejects_bad_input(vocoder, model):
    stub = admin_pb2_grpc.VocoderAdminStub(vocoder.channel)
    codes = random_codes(60, 7)
    want = offline_pcm(model, codes)[3 * SPF:]
    for chunk_frames in (0, 2):
        reply = stub.Decode(admin_pb2.DecodeRequest(codes=codes.ravel().tolist(), num_frames=7, num_context_frames=3,
                                                    chunk_frames=chunk_frames), timeout=WAIT_S)
        assert reply.num_samples == 4 * SPF and reply.sample_rate_hz == 24000
        np.testing.assert_allclose(np.frombuffer(reply.pcm, "<f4"), want, rtol=0, atol=ATOL,
                                   err_msg=f"chunk_frames={chunk_frames}")
    with pytest.raises(grpc.RpcError) as exc:
        stub.Decode(admin_pb2.DecodeRequest(codes=codes.ravel().tolist(), num_frames=6), timeout=WAIT_S)
    assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "num_frames 6" in exc.value.details()
    snapshot = stats(vocoder)
    assert snapshot.requests.num_started >= 1 and snapshot.step_time.count > 0 and snapshot.num_frames_decoded > 0
    assert snapshot.graphs.num_eager_steps > 0 and snapshot.graphs.hit_rate == 0.0   # CPU: no graphs
    assert_no_live_requests(vocoder)


def test_sigterm_stops_the_process_cleanly(vocoder):
    vocoder.proc.send_signal(signal.SIGTERM)
    assert vocoder.proc.wait(timeout=WAIT_S) == 0, vocoder.log_tail()
    assert "vocoder loop stopped" in vocoder.log_tail()
