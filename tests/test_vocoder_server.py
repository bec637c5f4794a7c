"""The vocoder server loop in-process (real sockets on loopback, the test thread pumps the loop).

Covers the paths a subprocess test cannot steer: a gateway that stops reading, draining on stop,
talkers interfering with each other's requests, and route/slot bookkeeping over many requests.
"""
from __future__ import annotations


import numpy as np
import pytest

from protos import wire
from protos.tts.internal.v1 import common_pb2
from test_vocoder_process_support import TalkerStandIn, entry, pump, random_codes, runner_factory  # noqa: F401 (a fixture)
from vocoder_service.server.config import VocoderServiceConfig
from vocoder_service.server.loop import VocoderServer

WAIT_S = 20.0
SPF = 1920


@pytest.fixture
def server_and_talkers(runner_factory):
    """make(**config overrides) -> (server, [talker, ...]); everything is closed afterwards."""
    made = []

    def make(num_talkers: int = 1, **overrides):
        settings = dict(bind="tcp://127.0.0.1:*", max_slots=2, first_chunk_frames=2, steady_chunk_frames=4,
                        max_wait_ms=20.0, heartbeat_interval_ms=100, drain_timeout_s=600.0, use_graphs=False)
        settings.update(overrides)
        config = VocoderServiceConfig(**settings)
        server = VocoderServer(config, runner_factory(config.max_slots), "tiny")
        talkers = [TalkerStandIn(server.endpoint, name=f"talker-{i}") for i in range(num_talkers)]
        made.append((server, talkers))
        pump(server, lambda: len(server.peers) == num_talkers)
        return server, talkers

    yield make
    for server, talkers in made:
        for talker in talkers:
            talker.close()
        if not server.context.closed:
            server.close()


def error_for(server: VocoderServer, talker: TalkerStandIn, request_id: str) -> common_pb2.Error:
    """Pump the loop until `talker` holds an ERROR about `request_id`."""
    found = []

    def arrived() -> bool:
        found.extend(h for t, h in talker.drain_dealer() if t == wire.MessageType.ERROR and h.request_id == request_id)
        return bool(found)

    pump(server, arrived)
    return found[0]



def test_a_gateway_that_stops_reading_fails_only_its_request(server_and_talkers):
    server, [talker] = server_and_talkers(pcm_snd_hwm=1)
    dead_gateway = "tcp://127.0.0.1:1"   # nothing listens: the PUSH queues one message, then EAGAIN
    # 10 frames -> chunks of 2, 4, 4: the second fails, and the third must never be attempted.
    talker.send_frames([(entry("stuck", 0, 10, reply_to=dead_gateway, final=True), random_codes(0, 10)),
                        (entry("fine", 0, 6, reply_to=talker.reply_to, final=True), random_codes(1, 6))])
    error = error_for(server, talker, "stuck")
    assert error.code == common_pb2.STATUS_CODE_UNAVAILABLE and "not sent" in error.message
    pump(server, lambda: talker.is_done("fine"))
    assert talker.received["fine"].error is None and talker.received["fine"].audio().shape == (6 * SPF,)
    assert server.engine.num_active == 0 and not server.intake.routes
    assert server.stats.num_pcm_send_failures == 1


def test_stop_drains_live_streams_then_fails_the_rest(server_and_talkers):
    server, [talker] = server_and_talkers()
    talker.send_frames([(entry("finishing", 0, 2, reply_to=talker.reply_to), random_codes(0, 4)[:2]),
                        (entry("stalled", 0, 2, reply_to=talker.reply_to), random_codes(1, 2))])
    pump(server, lambda: server.engine.num_active == 2)
    server.request_stop()
    assert not server.should_exit()                        # draining starts, streams are live
    talker.send_frames([(entry("late", 0, 1, reply_to=talker.reply_to), random_codes(0, 1))])
    talker.send_frames([(entry("finishing", 1, 2, final=True), random_codes(0, 4)[2:])])
    refused = error_for(server, talker, "late")
    assert refused.code == common_pb2.STATUS_CODE_UNAVAILABLE and "draining" in refused.message
    talker.drain_dealer()
    assert talker.vocoder_draining                         # the heartbeat sent at drain start says so
    pump(server, lambda: talker.is_done("finishing"))
    assert not server.should_exit()                        # "stalled" is live and the drain has time left
    # "stalled" never ends: the drain times out. Its start moves back by the timeout instead of the
    # test waiting it out, so the timeout can be long enough that "finishing" never races it.
    server.draining_since_s -= server.config.drain_timeout_s
    assert server.should_exit()
    server.close()
    at_gateway = talker.collect(["finishing", "stalled"], WAIT_S)
    assert at_gateway["finishing"].error is None and at_gateway["finishing"].chunks[-1].is_final
    assert at_gateway["stalled"].error.code == common_pb2.STATUS_CODE_UNAVAILABLE


def test_talkers_cannot_touch_each_others_requests(server_and_talkers):
    server, [owner, other] = server_and_talkers(num_talkers=2)
    owner.send_frames([(entry("mine", 0, 2, reply_to=owner.reply_to), random_codes(0, 4)[:2])])
    pump(server, lambda: "mine" in server.engine.streams)
    # Streams are named by per-link handles: the owner's handle means nothing on another talker's
    # link, so the other talker cannot even address the request (nor name it back from the vocoder).
    mine = owner.handles["mine"]
    other.send_frames([(entry("mine", 1, 2, final=True, handle=mine), random_codes(9, 2))])
    refused = error_for(server, other, "")
    assert refused.code == common_pb2.STATUS_CODE_NOT_FOUND and f"unknown stream handle {mine}" in refused.message
    other.send(wire.MessageType.ABORT, common_pb2.Abort(request_id="mine", reason=common_pb2.STATUS_CODE_CANCELLED))
    for _ in range(5):
        server.run_once()
    assert "mine" in server.engine.streams                 # neither the frames nor the abort landed
    owner.send_frames([(entry("mine", 1, 2, final=True), random_codes(0, 4)[2:])])
    pump(server, lambda: owner.is_done("mine"))
    assert owner.received["mine"].error is None and owner.received["mine"].audio().shape == (4 * SPF,)
    owner.send(wire.MessageType.ABORT, common_pb2.Abort(request_id="mine"))   # after the end: a no-op
    for _ in range(3):
        server.run_once()
    assert server.engine.stats["aborted"] == 0 and not server.intake.routes


def test_no_route_or_slot_leaks_over_many_requests(server_and_talkers):
    server, [talker] = server_and_talkers(max_slots=2)
    for i in range(300):
        rid = f"r{i}"
        kind = i % 4
        if kind == 0:    # empty request: opened and closed by one final entry
            talker.send_frames([(entry(rid, 0, 0, reply_to=talker.reply_to, final=True), np.zeros((0, 16)))])
        elif kind == 1:  # aborted by its talker
            talker.send_frames([(entry(rid, 0, 0, reply_to=talker.reply_to), np.zeros((0, 16)))])
            talker.send(wire.MessageType.ABORT, common_pb2.Abort(request_id=rid))
        elif kind == 2:  # sequence gap: fails
            talker.send_frames([(entry(rid, 0, 0, reply_to=talker.reply_to), np.zeros((0, 16)))])
            talker.send_frames([(entry(rid, 5, 0, final=True), np.zeros((0, 16)))])
        else:            # invalid codes on open: fails
            talker.send_frames([(entry(rid, 0, 1, reply_to=talker.reply_to), np.full((1, 16), 3000))])
        pump(server, lambda: server.engine.stats["opened"] == i + 1 and server.engine.num_active == 0)
    pump(server, lambda: talker.is_done("r296") and talker.is_done("r299"))
    assert server.engine.slots.num_free == 2 and not server.intake.routes
    counters = server.engine.stats
    assert (counters["opened"], counters["completed"], counters["aborted"], counters["failed"]) == (300, 75, 75, 150)


def test_heartbeats_name_each_talkers_last_open_that_the_load_counts(server_and_talkers):
    """A talker's opens that wait in the vocoder's socket (a long decode step) are not in the load a
    heartbeat carries: the heartbeat names the last open it does count, per talker, so the talker
    keeps the later ones' slots taken (Load.last_open_handle; talker_service/server/vocoders.py)."""
    server, [a, b] = server_and_talkers(num_talkers=2, max_slots=4)
    beats: dict = {a: [], b: []}

    def heard(used: int) -> bool:
        """Every talker has been sent a heartbeat whose load shows `used` slots taken."""
        for talker, got in beats.items():
            got.extend(h for t, h in talker.drain_dealer() if t == wire.MessageType.HEARTBEAT)
        return all(any(h.load.num_slots_used == used for h in got) for got in beats.values())

    server.broadcast_heartbeat()
    pump(server, lambda: heard(0))
    assert all(h.load.HasField("last_open_handle") and h.load.last_open_handle == 0 for h in beats[a])   # none yet
    a.send_frames([(entry("a1", 0, 2, reply_to=a.reply_to), random_codes(0, 2))])
    a.send_frames([(entry("a2", 0, 2, reply_to=a.reply_to), random_codes(1, 2))])
    pump(server, lambda: {"a1", "a2"} <= set(server.engine.streams))
    server.broadcast_heartbeat()
    pump(server, lambda: heard(2))
    beat_a = next(h for h in beats[a] if h.load.num_slots_used == 2)
    beat_b = next(h for h in beats[b] if h.load.num_slots_used == 2)
    assert beat_a.load.last_open_handle == a.handles["a2"]
    assert beat_b.load.HasField("last_open_handle") and beat_b.load.last_open_handle == 0   # b opened none


def test_a_turn_whose_opens_and_endings_cancel_out_still_names_its_opens(server_and_talkers):
    """Streams ending in the turn that opens arrive leave `used` where it was: the talker, which
    counts its opens as taking a slot until a heartbeat names them, must hear that they are counted
    at once, not at the next periodic heartbeat (it held ready requests ~1 s at 256 streams)."""
    server, [talker] = server_and_talkers(max_slots=4)
    talker.send_frames([(entry("x1", 0, 2, reply_to=talker.reply_to), random_codes(0, 4)[:2])])
    pump(server, lambda: "x1" in server.engine.streams and server.engine.streams["x1"].num_chunks_emitted >= 1)
    for _ in range(3):
        server.run_once()
    talker.drain_dealer()
    assert server.engine.slots.num_used == 1
    # one talker step: x1's last frames and x2's open; one vocoder turn takes both
    talker.send_frames([(entry("x1", 1, 2, final=True), random_codes(0, 4)[2:]),
                        (entry("x2", 0, 2, reply_to=talker.reply_to), random_codes(1, 2))])
    pump(server, lambda: "x1" not in server.engine.streams)
    assert "x2" in server.engine.streams and server.engine.slots.num_used == 1
    beats: list = []

    def named() -> bool:
        beats.extend(h for t, h in talker.drain_dealer() if t == wire.MessageType.HEARTBEAT)
        return any(h.load.last_open_handle == talker.handles["x2"] for h in beats)

    pump(server, named, timeout_s=5.0)   # no periodic heartbeat here: only the turn's credits
    assert [h.load.num_slots_used for h in beats if h.load.last_open_handle == talker.handles["x2"]][0] == 1
