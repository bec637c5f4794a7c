"""The vocoder judges a request by its TALKER's silence, not by the request's own: unit level.

A request parked for longer than the talker timeout (its talker waits for streamed text) must
live while the talker keeps heartbeating; when the talker goes silent its open requests fail
with UNAVAILABLE; ended requests are never expired (they only need decoding).
"""
import numpy as np

from protos.tts.internal.v1 import common_pb2
from test_vocoder_engine import make_engine
from vocoder_service.server.peers import TalkerPeers

TIMEOUT_S = 5.0


def test_parked_request_lives_while_its_talker_is_heard():
    eng, clock = make_engine(max_slots=3, talker_timeout_s=TIMEOUT_S)
    eng.open("parked", talker_id="t1")
    eng.open("orphan", talker_id="t2")
    eng.add_frames("parked", 0, np.ones((2, 16), np.int64))
    eng.add_frames("orphan", 0, np.ones((2, 16), np.int64))
    heard = {"parked": 0.0, "orphan": 0.0}
    for _ in range(30):                      # 30 s without a frame for either request
        clock[0] += 1.0
        heard["parked"] = clock[0]          # t1 heartbeats every second, t2 is silent
        errors = eng.expire(heard.get)
        if errors:
            break
    [error] = errors
    assert error.request_id == "orphan" and error.code == "UNAVAILABLE"
    assert "talker sent nothing" in error.message and "t2" in error.message
    assert clock[0] == 6.0                    # failed at the first check past the timeout, not later
    for _ in range(25):
        clock[0] += 1.0
        heard["parked"] = clock[0]
        assert eng.expire(heard.get) == []
    assert "parked" in eng.streams           # alive after 31 s without frames
    eng.add_frames("parked", 1, np.ones((1, 16), np.int64), is_final=True)
    clock[0] += 60.0                           # an ended request only needs decoding: never expired
    assert eng.expire(heard.get) == [] and eng.expire() == []


def test_unknown_talker_falls_back_to_the_requests_own_frames():
    eng, clock = make_engine(max_slots=2, talker_timeout_s=TIMEOUT_S)
    eng.open("a")
    clock[0] += 3.0
    eng.add_frames("a", 0, np.ones((1, 16), np.int64))   # frames are talker traffic too
    clock[0] += 4.0
    assert eng.expire(lambda rid: None) == []
    clock[0] += 1.5
    [error] = eng.expire(lambda rid: 0.0)                # an older heartbeat never hides newer frames
    assert error.request_id == "a" and "5.5 s" in error.message


def test_peers_remember_last_heard_past_expiry_until_pruned():
    peers = TalkerPeers(default_interval_ms=200)
    assert peers.touch(b"t1", 1.0) is True
    peers.heartbeat(b"t1", common_pb2.Heartbeat(peer_id="talker-1", interval_ms=200), 1.0)
    peers.touch(b"t1", 2.0)
    assert peers.last_heard_s(b"t1") == 2.0
    [gone] = peers.expire(3.0)                # 1 s silent = 5 missed periods: dropped from the registry
    assert gone.peer_id == "talker-1" and len(peers) == 0
    assert peers.last_heard_s(b"t1") == 2.0   # still there for the requests it owns
    peers.prune_heard({b"t1"})
    assert peers.last_heard_s(b"t1") == 2.0
    peers.prune_heard(set())
    assert peers.last_heard_s(b"t1") is None
