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


def test_queued_requests_start_only_into_free_vocoder_slots(links):
    clock = [100.0]
    admission = Admission(links, lambda: 99.9, hold_s=0.0, clock=lambda: clock[0])
    assert admission.limit() is None                  # no vocoder heard from yet: no bound from them
    beat(links, 0, 100.0, used=6)
    assert admission.limit() == 2
    beat(links, 1, 100.0, used=8)                     # full: it adds nothing
    assert admission.limit() == 2
    links.links[0].opened("a")                        # a stream opened since the heartbeat
    assert admission.limit() == 1
    links.links[0].opened("b")
    assert admission.limit() == 0                     # the queue waits for the next heartbeat's slots
    beat(links, 0, 100.1, used=5)
    assert admission.limit() == 3


def test_late_chunks_hold_arrivals_for_at_most_the_hold_time(links):
    clock = [100.0]
    arrived = [None]
    admission = Admission(links, lambda: arrived[0], hold_s=0.5, clock=lambda: clock[0])
    beat(links, 0, 100.0, used=0, late=3)
    assert admission.limit() == 8 and admission.num_holds == 0   # nothing waits: nothing to hold
    arrived[0] = 99.9
    assert admission.limit() == 0 and admission.is_holding and admission.num_holds == 1
    clock[0] = 100.45                                 # waited 0.55 s: starts whatever the vocoder says
    assert admission.limit() == 8 and not admission.is_holding
    clock[0], arrived[0] = 100.5, 100.4
    beat(links, 0, 100.5, used=0, late=0)             # the vocoder caught up: no hold
    assert admission.limit() == 8 and admission.num_holds == 1
    # off (hold 0): late chunks never hold
    beat(links, 0, 100.5, used=0, late=5)
    assert Admission(links, lambda: 100.4, hold_s=0.0, clock=lambda: clock[0]).limit() == 8


def test_the_engine_starts_no_prefill_while_the_limit_is_zero():
    with one_cpu_thread():
        config = EngineConfig(max_slots=4, max_seq_len=128, **ENGINE_DEFAULTS)
        engine = TalkerEngine(ModelRunner.from_checkpoint(resolve_model_dir("tiny"), config))
        limit = [0]
        engine.admission_limit = lambda: limit[0]
        got = Collector()
        add(engine, "held", text_ids(1, 8), 1, max_new_tokens=4, min_new_tokens=4)
        add(engine, "second", text_ids(2, 8), 2, max_new_tokens=4, min_new_tokens=4)
        assert not engine.has_runnable()              # queued and ready, but nothing may start: no busy loop
        assert engine.admit() == [] and engine.oldest_ready_arrival_s() is not None
        limit[0] = 1                                  # one slot freed at a vocoder: one starts
        assert engine.has_runnable() and engine.admit() == ["held"]
        limit[0] = None
        for _ in range(12):
            got.take(engine.step())
        assert set(got.frames) == {"held", "second"}


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
