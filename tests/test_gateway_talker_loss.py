"""A talker killed under the gateway (two fake talkers on loopback, real gRPC, real ZeroMQ).

The gateway's heartbeat timeout is set to 60 s here, far past each test's own timeout, so a stream
that ends UNAVAILABLE can only have been ended by the link-closed path (the DEALER's socket monitor),
not by the talker's silence. Proves: only the killed talker's streams end, with UNAVAILABLE naming
it; the other talker's stream finishes whole; new streams go to the survivor; a stream still
collecting its text in the gateway moves to the survivor instead of failing; the talker restarted
on its address takes work again once it heartbeats; the `tts_healthy_talkers` gauge follows. And
the choice among live talkers: a draining one finishes its streams and gets no new ones (the
requests held for it move); the least loaded is picked, equals in turn.
"""
from __future__ import annotations

import asyncio
import contextlib
import time

import grpc
import numpy as np
import pytest

from async_support import run, until
from test_gateway_support import FakeTalker, running_gateway, tokens_from_pcm
from test_gateway_stream import audio_of, collect, model_dir, req, speaker_config  # noqa: F401 - fixture
from checkpoint.files import resolve_model_dir
from gateway.text_tokenizer import TextTokenizer
from protos.tts.v1 import config_pb2, tts_pb2_grpc

pytestmark = pytest.mark.timeout(60)
NEVER_SILENT_MS = 60_000   # heartbeat loss can not fire within a test
FLOAT32 = config_pb2.AudioFormat(encoding=config_pb2.AUDIO_ENCODING_FLOAT32)   # samples carry the token ids


@pytest.fixture
def talkers():
    pair = [FakeTalker(peer_id="talker-a"), FakeTalker(peer_id="talker-b")]
    yield pair
    for fake in pair:
        fake.close()


def healthy_gauge(gw) -> float:
    return gw.metrics.registry.get_sample_value("tts_healthy_talkers")


@contextlib.asynccontextmanager
async def gateway_on(talkers, model_dir, tmp_path, **overrides):
    """A gateway on both fake talkers, once it counts both healthy: (gateway, its gRPC stub)."""
    async with running_gateway(model_dir, [t.endpoint for t in talkers], tmp_path, **overrides) as gw:
        await until(lambda: len(gw.backend.healthy_talkers()) == len(talkers), "every talker healthy")
        async with grpc.aio.insecure_channel(f"127.0.0.1:{gw.port}") as channel:
            yield gw, tts_pb2_grpc.TextToSpeechStub(channel)


async def open_stream(stub):
    """A streaming-text call, started: (call, request id)."""
    call = stub.StreamSynthesize(timeout=30)
    await call.write(req(config=speaker_config(audio_format=FLOAT32)))
    return call, (await call.read()).start.request_id


async def finish(call, text: str) -> list:
    await call.write(req(text=text))
    await call.write(req(end={}))
    await call.done_writing()
    out = []
    while (r := await call.read()) is not grpc.aio.EOF:
        out.append(r)
    return out


def test_killed_talker_ends_only_its_streams_and_the_survivor_takes_new_ones(model_dir, talkers, tmp_path):
    a, b = talkers
    tok = TextTokenizer.from_dir(model_dir)
    events = []

    async def body():
        async with gateway_on(talkers, model_dir, tmp_path, peer_timeout_ms=NEVER_SILENT_MS) as (gw, stub):
            on_a, id_a = await open_stream(stub)      # ties go to the first talker listed
            on_b, id_b = await open_stream(stub)      # then the less loaded one
            assert id_a in a.requests and id_b in b.requests
            a.close()                                  # the process dies: its sockets close
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await on_a.read()
            events.append(("a failed", info.value.code(), info.value.details()))
            await until(lambda: [t.peer_id for t in gw.backend.healthy_talkers()] == ["talker-b"],
                        "talker-a out of rotation")
            events.append(("b finished", await finish(on_b, "Hello there world.")))
            new = await collect(stub, [req(config=speaker_config()), req(text="Fresh words."), req(end={})])
            events.append(("new finished", new))
            return new[0].start.request_id

    new_id = run(body())
    (_, code, details), (_, on_b), (_, new) = events
    assert code == grpc.StatusCode.UNAVAILABLE
    assert "talker-a" in details and a.endpoint in details and "connection closed" in details
    assert on_b[-1].HasField("summary")
    assert tokens_from_pcm(np.frombuffer(audio_of(on_b), "<f4")) == [i % 1000 for i in tok.target_ids("Hello there world.")]
    assert new[-1].HasField("summary") and new_id in b.requests


def test_stream_collecting_its_text_moves_to_the_survivor_and_a_restarted_talker_rejoins(model_dir, talkers, tmp_path):
    a, b = talkers
    port_a = int(a.endpoint.rsplit(":", 1)[1])
    tok = TextTokenizer.from_dir(model_dir)

    async def body():
        async with gateway_on(talkers, model_dir, tmp_path, peer_timeout_ms=NEVER_SILENT_MS) as (gw, stub):
            # whole-text mode: the gateway holds the request (no START) until the text ends
            call = stub.StreamSynthesize(timeout=30)
            await call.write(req(config=speaker_config(text_mode=config_pb2.TEXT_MODE_NON_STREAMING, audio_format=FLOAT32)))
            await call.write(req(text="Held in the gateway. "))
            await until(lambda: any(box.talker.peer_id == "talker-a" for box in gw.backend.mailboxes.values()),
                        "the held request assigned to talker-a")
            a.close()
            await until(lambda: [t.peer_id for t in gw.backend.healthy_talkers()] == ["talker-b"],
                        "talker-a out of rotation")
            gauges = [healthy_gauge(gw)]
            held = await finish(call, "Then it ends.")
            restarted = FakeTalker(peer_id="talker-a", port=port_a)   # compose restarts it on its address
            try:
                await until(lambda: len(gw.backend.healthy_talkers()) == 2, "talker-a back in rotation")
                gauges.append(healthy_gauge(gw))
                # two streams at once: the least-loaded pick puts one on each talker
                first, first_id = await open_stream(stub)
                second, second_id = await open_stream(stub)
                ends = [await finish(first, "Back again."), await finish(second, "Done.")]
                return held, ends, {first_id, second_id}, set(restarted.requests), gauges
            finally:
                restarted.close()

    held, ends, new_ids, on_restarted, gauges = run(body())
    assert gauges == [1.0, 2.0]
    held_id = held[0].start.request_id
    assert held[-1].HasField("summary") and held_id in b.requests and held_id not in a.requests
    assert tokens_from_pcm(np.frombuffer(audio_of(held), "<f4")) == [
        i % 1000 for i in tok.target_ids("Held in the gateway. Then it ends.")]
    assert all(end[-1].HasField("summary") for end in ends)
    assert len(new_ids & on_restarted) == 1 and len(new_ids & set(b.requests)) == 1


def test_draining_talker_finishes_its_streams_and_the_held_ones_move(model_dir, talkers, tmp_path):
    """A talker that drains (SIGTERM, a rollout) gets no new work: its started stream finishes whole,
    a request the gateway still holds for it starts on the other talker, new streams go there too."""
    a, b = talkers

    async def body():
        async with gateway_on(talkers, model_dir, tmp_path) as (gw, stub):
            held = stub.StreamSynthesize(timeout=30)                     # a (first of equals), held
            await held.write(req(config=speaker_config(text_mode=config_pb2.TEXT_MODE_NON_STREAMING,
                                                       audio_format=FLOAT32)))
            await until(lambda: len(gw.backend.mailboxes) == 1, "the held request open")
            on_b, _ = await open_stream(stub)                            # b: less loaded
            on_a, on_a_id = await open_stream(stub)                      # a: equals, a's turn
            with a._lock:
                a.is_draining = True
            await until(lambda: [t.peer_id for t in gw.backend.healthy_talkers()] == ["talker-b"],
                        "talker-a draining")
            outcomes = [await finish(on_a, "Still here."), await finish(held, "Held, then sent."),
                        await finish(on_b, "Done.")]
            new = await collect(stub, [req(config=speaker_config()), req(text="New."), req(end={})])
            return on_a_id, outcomes, new

    on_a_id, (on_a, held, on_b), new = run(body())
    assert on_a_id in a.requests and all(out[-1].HasField("summary") for out in (on_a, held, on_b))
    assert held[0].start.request_id in b.requests and held[0].start.request_id not in a.requests
    assert new[-1].HasField("summary") and new[0].start.request_id in b.requests
    assert set(a.requests) == {on_a_id}


def test_pick_takes_the_least_loaded_talker_and_goes_round_among_equals():
    """By load first (heartbeat load, or this gateway's own stream count when higher); among equals
    the next one after the last pick, so streams arriving one at a time spread over the talkers."""
    from gateway.backend import Backend

    async def body():
        backend = Backend(("tcp://127.0.0.1:1", "tcp://127.0.0.1:2", "tcp://127.0.0.1:3"), "tcp://127.0.0.1:*")
        try:
            for i, talker in enumerate(backend.talkers):   # as after a heartbeat over a live link
                talker.peer_id, talker.is_connected, talker.num_healthy_vocoders = f"t{i}", True, 1
                talker.last_seen_s = time.monotonic() + 60.0
                talker.load.num_slots_total = 4
            alone = [backend.pick_talker().peer_id for _ in range(4)]          # one at a time: nothing open
            boxes = [backend.open_mailbox(f"r{i}", backend.pick_talker()) for i in range(3)]   # a burst
            burst = [box.talker.peer_id for box in boxes]
            backend.talkers[1].load.num_slots_used = 3                        # t1 busy with another gateway's work
            after = [backend.pick_talker().peer_id for _ in range(2)]
            return alone, burst, after
        finally:
            await backend.stop()

    alone, burst, after = run(body(), 10)
    assert alone == ["t0", "t1", "t2", "t0"]
    assert sorted(burst) == ["t0", "t1", "t2"]
    assert after == ["t2", "t0"]


def test_a_silent_talker_is_lost_once_per_loss_not_on_every_tick(caplog):
    """Silence past peer_timeout_ms: one warning and one UNAVAILABLE per stream that handed it work,
    however many ticks pass before it speaks again; a heartbeat brings it back, and the next
    silence is a new loss, found once again."""
    import logging

    from gateway.backend import Backend
    from protos import wire
    from protos.tts.internal.v1 import common_pb2

    def errors(box) -> list[str]:
        out = []
        while not box.queue.empty():
            event = box.queue.get_nowait()
            assert event.kind == wire.MessageType.ERROR and event.header.code == common_pb2.STATUS_CODE_UNAVAILABLE
            out.append(event.header.message)
        return out

    async def body():
        backend = Backend(("tcp://127.0.0.1:1",), "tcp://127.0.0.1:*", heartbeat_interval_ms=20, peer_timeout_ms=100)
        [talker] = backend.talkers
        talker.peer_id, talker.is_connected, talker.num_healthy_vocoders = "talker-quiet", True, 1
        talker.last_seen_s = time.monotonic() - 1.0        # silent for a second already
        box = backend.open_mailbox("r1", talker)
        box.is_on_talker = True
        tick = asyncio.get_running_loop().create_task(backend._tick())
        try:
            await asyncio.sleep(0.3)                       # ~15 ticks while it stays silent
            first = errors(box)
            backend._on_heartbeat(talker, common_pb2.Heartbeat(peer_id="talker-quiet", num_healthy_vocoders=1))
            is_back = backend.is_usable(talker)
            await until(lambda: not backend.is_usable(talker), "silent again past the timeout")
            await asyncio.sleep(0.2)
            return first, is_back, errors(box)
        finally:
            tick.cancel()
            await asyncio.gather(tick, return_exceptions=True)
            await backend.stop()

    with caplog.at_level(logging.WARNING, logger="gateway.backend"):
        first, is_back, second = run(body(), 10)
    lost = [r.getMessage() for r in caplog.records if "lost" in r.getMessage()]
    assert len(first) == 1 and "talker-quiet" in first[0] and "silent for" in first[0]
    assert is_back and len(second) == 1
    assert len(lost) == 2 and all("talker talker-quiet at tcp://127.0.0.1:1 lost: silent for" in m for m in lost)


def test_a_talker_lost_while_it_encodes_a_voice_fails_the_registration_naming_it(tmp_path):
    """RegisterVoice waits for the talker's encoding; the talker's link closing ends that wait with
    UNAVAILABLE naming it (heartbeat loss is out of reach here: 60 s)."""
    import zmq
    import zmq.asyncio

    from client import TtsClient
    from protos import wire
    from protos.tts.internal.v1 import common_pb2
    from test_gateway_voices import reference_wav

    base_dir = resolve_model_dir("tiny-base")

    async def mute_encoder(router, encodes: asyncio.Event) -> None:
        """A talker that heartbeats and never answers ENCODE_VOICE."""
        while True:
            identity, *frames = await router.recv_multipart()
            msg_type, _, _ = wire.decode(frames)
            if msg_type == wire.MessageType.ENCODE_VOICE:
                encodes.set()
            elif msg_type == wire.MessageType.HEARTBEAT:
                beat = common_pb2.Heartbeat(peer_id="talker-mute", role=common_pb2.PEER_ROLE_TALKER, incarnation=3,
                                            model="tiny-base", num_healthy_vocoders=1,
                                            load=common_pb2.Load(num_slots_total=4))
                await router.send_multipart([identity, *wire.encode(wire.MessageType.HEARTBEAT, beat)])

    async def body():
        context = zmq.asyncio.Context()
        router = context.socket(zmq.ROUTER)
        router.setsockopt(zmq.LINGER, 0)
        endpoint = f"tcp://127.0.0.1:{router.bind_to_random_port('tcp://127.0.0.1')}"
        encodes = asyncio.Event()
        task = asyncio.get_running_loop().create_task(mute_encoder(router, encodes))
        try:
            async with running_gateway(base_dir, [endpoint], tmp_path, model_name="tiny-base",
                                       peer_timeout_ms=NEVER_SILENT_MS) as gw:
                async with TtsClient(f"127.0.0.1:{gw.port}") as client:
                    registration = asyncio.ensure_future(
                        client.register_voice("v", reference_wav(tmp_path), reference_text="Hello there."))
                    await asyncio.wait_for(encodes.wait(), 10)
                    task.cancel()
                    router.close(linger=0)                      # the talker dies mid-encoding
                    with pytest.raises(grpc.aio.AioRpcError) as info:
                        await registration
                    return info.value
        finally:
            task.cancel()
            context.destroy(linger=0)

    err = run(body())
    assert err.code() == grpc.StatusCode.UNAVAILABLE and "talker-mute" in err.details(), err.details()
