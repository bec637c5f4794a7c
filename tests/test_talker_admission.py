"""The talker's admission (talker_service/server/admission.py): queued requests start their prefill
only into free vocoder slots, and wait (at most a hold time) while a vocoder reports late chunks;
rules on a fake clock, then the engine (tiny checkpoint, CPU) holding an arrival while the limit is 0.
The vocoder side: late chunks counted over the last second for its heartbeats."""
from __future__ import annotations

import numpy as np
import pytest
import zmq

from checkpoint.files import resolve_model_dir
from protos.tts.internal.v1 import common_pb2
from talker_service.engine import TalkerEngine
from talker_service.engine.config import EngineConfig
from talker_service.engine.runner import ModelRunner
from talker_service.server.admission import Admission
from talker_service.server.vocoders import VocoderLinks
from test_talker_engine_support import ENGINE_DEFAULTS, Collector, add, text_ids
from test_vocoder_process_support import one_cpu_thread
from vocoder_service.engine.chunk_policy import ChunkPolicy
from vocoder_service.engine.config import VocoderEngineConfig
from vocoder_service.engine.engine import VocoderEngine


@pytest.fixture()
def links():
    context = zmq.Context()
    vocoders = VocoderLinks(context, ["tcp://127.0.0.1:1", "tcp://127.0.0.1:2"], snd_hwm=10, timeout_s=3.0)
    yield vocoders
    for link in vocoders.links:
        link.socket.close(linger=0)
    context.term()


def beat(links: VocoderLinks, index: int, now_s: float, used: int, late: int = 0, total: int = 8) -> None:
    links.heartbeat(links.links[index], common_pb2.Heartbeat(peer_id=f"v{index}", incarnation=1, load=common_pb2.Load(
        num_slots_total=total, num_slots_used=used, num_late_chunks_recent=late)), now_s)


def test_a_request_starts_only_into_a_free_slot_of_its_own_vocoder(links):
    clock = [100.0]
    routed = {"a": links.links[0], "b": links.links[0], "c": links.links[1], "admin": None}
    admission = Admission(links, routed.get, lambda: 99.9, hold_s=0.0, clock=lambda: clock[0])
    admission.begin()
    assert admission.could_start("a")                 # its vocoder not heard from yet: no bound from it
    beat(links, 0, 100.0, used=7)                     # one slot free on vocoder 0
    beat(links, 1, 100.0, used=8)                     # vocoder 1 full
    admission.begin()
    assert admission.take("a") and links.links[0].admitted == {"a"}
    assert not admission.could_start("b")             # a's slot is spoken for until a's stream opens
    assert not admission.take("c")                    # c waits for its own vocoder, whatever 0 has
    assert admission.take("admin")                    # not routed to a vocoder: no gate
    links.links[0].opened("a", 1)                     # a's stream opened (handle 1): the vocoder holds its slot
    assert links.links[0].admitted == set() and not admission.could_start("b")
    beat(links, 0, 100.1, used=6)                     # two free at the next heartbeat
    admission.begin()
    assert admission.take("b")
    clock[0] = 105.0                                  # vocoder 1 silent past its timeout: not held here
    admission.begin()
    assert admission.could_start("c")


def test_late_chunks_hold_arrivals_for_at_most_the_hold_time(links):
    clock = [100.0]
    arrived = [None]
    routed = {"a": links.links[0]}
    admission = Admission(links, routed.get, lambda: arrived[0], hold_s=0.5, clock=lambda: clock[0])
    beat(links, 0, 100.0, used=0, late=3)
    admission.begin()
    assert admission.could_start("a") and admission.num_holds == 0   # nothing waits: nothing to hold
    arrived[0] = 99.9
    admission.begin()
    assert not admission.could_start("a") and admission.is_holding and admission.num_holds == 1
    clock[0] = 100.45                                 # waited 0.55 s: starts whatever the vocoder says
    admission.begin()
    assert admission.could_start("a") and not admission.is_holding
    clock[0], arrived[0] = 100.5, 100.4
    beat(links, 0, 100.5, used=0, late=0)             # the vocoder caught up: no hold
    admission.begin()
    assert admission.could_start("a") and admission.num_holds == 1
    # off (hold 0): late chunks never hold
    beat(links, 0, 100.5, used=0, late=5)
    off = Admission(links, routed.get, lambda: 100.4, hold_s=0.0, clock=lambda: clock[0])
    off.begin()
    assert off.could_start("a")


class OnlyFirst:
    """A gate that lets `allowed` requests start (the engine's view of server/admission.py)."""

    def __init__(self, allowed: set) -> None:
        self.allowed, self.taken = allowed, []

    def begin(self) -> None:
        pass

    def could_start(self, request_id) -> bool:
        return request_id in self.allowed

    def take(self, request_id) -> bool:
        if request_id in self.allowed:
            self.taken.append(request_id)
            return True
        return False


def test_the_engine_starts_only_what_the_gate_lets_through_and_does_not_spin_while_it_holds():
    with one_cpu_thread():
        config = EngineConfig(max_slots=4, max_seq_len=128, **ENGINE_DEFAULTS)
        engine = TalkerEngine(ModelRunner.from_checkpoint(resolve_model_dir("tiny"), config))
        engine.admission = gate = OnlyFirst(set())
        got = Collector()
        add(engine, "first", text_ids(1, 8), 1, max_new_tokens=4, min_new_tokens=4)
        add(engine, "second", text_ids(2, 8), 2, max_new_tokens=4, min_new_tokens=4)
        assert not engine.has_runnable()              # queued and ready, but nothing may start: no busy loop
        assert engine.admit() == [] and engine.oldest_ready_arrival_s() is not None
        assert engine.describe_queue() == "talker: 4 of 4 slots free, 2 queued (2 with the text to start), 0 prefills under way"
        gate.allowed = {"second"}                     # the second's vocoder has room, the first's not
        assert engine.has_runnable() and engine.admit() == ["second"] and gate.taken == ["second"]
        engine.admission = None
        for _ in range(12):
            got.take(engine.step())
        assert set(got.frames) == {"first", "second"}


def test_the_vocoder_counts_audible_late_chunks_over_the_last_second():
    clock = [0.0]

    class Runner:
        codebook_size = 2048

        def reset(self, slots):
            pass

        def decode(self, codes, slots, lengths):
            return np.zeros((codes.shape[0], codes.shape[2] * 4), np.float32)

    config = VocoderEngineConfig(max_slots=4, samples_per_frame=4, sample_rate_hz=50,
                                 chunk=ChunkPolicy(2, 8, quick_first_max_streams=0))
    engine = VocoderEngine(Runner(), config, clock=lambda: clock[0])
    engine.open("a")
    engine.add_frames("a", 0, np.ones((2, 16), np.int64))
    engine.step()                                     # 160 ms of audio from t = 0
    clock[0] = 0.165                                  # 5 ms late: under the audible bound, not counted
    engine.add_frames("a", 1, np.ones((1, 16), np.int64))
    engine.step()
    assert engine.deadline_stats["late_chunks"] == 1 and engine.num_late_recent() == 0
    clock[0] = 0.5                                    # 255 ms late
    engine.add_frames("a", 2, np.ones((1, 16), np.int64))
    engine.step()
    assert engine.num_late_recent() == 1
    clock[0] = 1.6                                    # a second later it no longer counts
    assert engine.num_late_recent() == 0


def test_a_long_wait_is_logged_with_what_holds_it(links, caplog):
    clock = [100.0]
    arrived = [None]
    routed = {"a": links.links[0]}
    admission = Admission(links, routed.get, lambda: arrived[0], hold_s=0.0, clock=lambda: clock[0],
                          describe_talker=lambda: "talker: 3 of 4 slots free")
    beat(links, 0, 100.0, used=8)                     # vocoder 0 full
    links.links[0].opened("x", 7)                     # and one of our opens it has not counted
    caplog.set_level("INFO", logger="talker_service.server.admission")
    arrived[0] = 100.0
    for t in (100.0, 100.1, 100.2):                   # under the log threshold: nothing
        clock[0] = t
        admission.begin()
    assert admission.num_wait_logs == 0
    for t in (100.3, 100.4, 100.5, 100.9):            # past it: once, then not again within a second
        clock[0] = t
        admission.begin()
    assert admission.num_wait_logs == 1
    clock[0] = 101.4
    admission.begin()
    assert admission.num_wait_logs == 2
    text = [r.getMessage() for r in caplog.records if "has waited" in r.getMessage()]
    assert len(text) == 2 and "has waited 300 ms" in text[0] and "talker: 3 of 4 slots free" in text[0]
    assert "vocoder v0: -1 free of 8" in text[0] and "8 used, 1 of our opens not counted yet" in text[0]
    arrived[0] = None                                 # nothing ready waits: quiet
    clock[0] = 103.0
    admission.begin()
    assert admission.num_wait_logs == 2
