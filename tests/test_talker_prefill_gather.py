"""Prefill gathering (talker_service/engine/prefill_gather.py): under load, arrivals spread in time
wait to be prefilled together. On a fake clock: the rule first, then the engine (tiny checkpoint,
CPU) holding arrivals while streams decode, prefilling them in one step once enough are ready or
the oldest waited long enough, and never holding under a light load; the holds as GetStats and
/metrics report them."""
from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from checkpoint.files import resolve_model_dir
from protos.tts.internal.v1 import admin_pb2
from service_common.metrics import BusyClock
from talker_service.engine import TalkerEngine
from talker_service.engine.config import EngineConfig
from talker_service.engine.prefill_gather import PrefillGather
from talker_service.engine.runner import ModelRunner
from talker_service.server.metrics import TalkerMetrics
from talker_service.server.stats import talker_stats
from test_talker_engine_support import ENGINE_DEFAULTS, Collector, add, text_ids
from test_vocoder_process_support import one_cpu_thread


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    with one_cpu_thread():
        yield


def test_ready_arrivals_wait_for_a_batch_or_the_wait_limit_only_under_load():
    gather = PrefillGather(wait_s=0.05, min_batch=3, min_decoding=2)
    assert gather.should_hold(num_decoding=2, ready_arrivals_s=[1.0], now_s=1.01)           # one ready, busy
    assert gather.should_hold(2, [1.0, 1.02], 1.04)                                          # two of three
    assert not gather.should_hold(2, [1.0, 1.02, 1.03], 1.04)                                # a batch is ready
    assert not gather.should_hold(2, [1.0, 1.02], 1.05)                                      # the oldest waited 50 ms
    assert not gather.should_hold(1, [1.0], 1.01)                                            # light load: at once
    assert not gather.should_hold(2, [], 1.01)                                               # nothing to hold
    assert not PrefillGather(0.0, 3, 0).should_hold(5, [1.0], 1.0)                           # off


def make_engine(clock, **overrides) -> TalkerEngine:
    config = EngineConfig(max_slots=6, max_seq_len=128, **{**ENGINE_DEFAULTS, "prefill_gather_ms": 50.0,
                                                            "prefill_gather_batch": 3,
                                                            "prefill_gather_min_decoding": 1, **overrides})
    return TalkerEngine(ModelRunner.from_checkpoint(resolve_model_dir("tiny"), config), clock=lambda: clock[0])


def started(got: Collector, names) -> set:
    return {name for name in names if got.frames.get(name)}


def test_arrivals_during_decoding_are_prefilled_together():
    clock = [10.0]
    engine = make_engine(clock)
    got = Collector()
    add(engine, "running", text_ids(1, 8), 1, max_new_tokens=60, min_new_tokens=60)
    got.take(engine.step())                          # no one decodes yet: prefilled at once
    assert started(got, ["running"]) == {"running"} and engine.stats.num_gather_holds == 0
    arrivals = ["a", "b", "c"]
    for i, name in enumerate(arrivals):
        add(engine, name, text_ids(10 + i, 8), 10 + i)
        clock[0] += 0.01
        got.take(engine.step())
        # the first two wait (the running stream still gets its frame every step) ...
        assert started(got, arrivals) == (set() if i < 2 else set(arrivals)), i
    # ... and the third makes a batch: all three are prefilled in the same step
    assert engine.stats.num_gather_holds == 2
    assert len(got.frames["running"]) >= 4


def test_a_lone_arrival_waits_no_longer_than_the_gather_limit():
    clock = [10.0]
    engine = make_engine(clock)
    got = Collector()
    add(engine, "running", text_ids(2, 8), 2, max_new_tokens=60, min_new_tokens=60)
    got.take(engine.step())
    add(engine, "lone", text_ids(3, 8), 3)
    for _ in range(4):
        clock[0] += 0.012                            # 48 ms after it arrived: still waiting
        got.take(engine.step())
        assert not got.frames.get("lone")
    clock[0] += 0.003                                # 51 ms
    got.take(engine.step())
    assert got.frames.get("lone") and engine.stats.num_gather_holds == 4


def test_holds_reach_get_stats_and_metrics():
    # the engine's gather holds as they happen; the other two counters as the engine and the
    # server's admission hold them (their rules: test_talker_cadence.py, test_talker_admission.py)
    clock = [10.0]
    engine = make_engine(clock)
    add(engine, "running", text_ids(6, 8), 6, max_new_tokens=60, min_new_tokens=60)
    engine.step()
    add(engine, "waits", text_ids(7, 8), 7)
    for _ in range(3):
        clock[0] += 0.01
        engine.step()
    engine.stats.num_cadence_holds = 5
    engine.admission = SimpleNamespace(num_holds=2)
    nobody = SimpleNamespace(status=lambda now_s: [], stats_proto=lambda reset: admin_pb2.VoiceEncodingStats())
    stats = talker_stats(engine, nobody, nobody, nobody, peer_id="t", model="tiny", uptime_s=1.0,
                         now_s=clock[0], reset=True)
    assert (stats.admission_holds.num_gather_holds, stats.admission_holds.num_cadence_holds,
            stats.admission_holds.num_deadline_holds) == (3, 5, 2)
    metrics = TalkerMetrics()
    metrics.attach(SimpleNamespace(engine=engine, busy=BusyClock(), latest_load=engine.load(),
                                   stop_requested=threading.Event()))
    values = {s.name: s.value for family in metrics.collect() for s in family.samples}
    assert (values["qwen3_tts_talker_gather_holds_total"], values["qwen3_tts_talker_cadence_holds_total"],
            values["qwen3_tts_talker_deadline_holds_total"]) == (3, 5, 2)
    # a stats reset clears latency windows, never these counts
    assert talker_stats(engine, nobody, nobody, nobody, peer_id="t", model="tiny", uptime_s=1.0, now_s=clock[0],
                        reset=False).admission_holds.num_gather_holds == 3


def test_under_a_light_load_an_arrival_is_prefilled_at_once():
    clock = [10.0]
    engine = make_engine(clock, prefill_gather_min_decoding=2)   # one stream decoding is a light load
    got = Collector()
    add(engine, "running", text_ids(4, 8), 4, max_new_tokens=60, min_new_tokens=60)
    got.take(engine.step())
    add(engine, "next", text_ids(5, 8), 5)
    got.take(engine.step())
    assert got.frames.get("next") and engine.stats.num_gather_holds == 0


def test_on_by_default_only_under_load_and_checked():
    # the defaults (gapless7): 60 ms or 8 ready, from 128 decoding streams, so 64 streams never wait
    c = EngineConfig()
    gather = PrefillGather(c.prefill_gather_ms / 1e3, c.prefill_gather_batch, c.prefill_gather_min_decoding)
    assert gather.should_hold(128, [1.0], 1.01) and not gather.should_hold(127, [1.0], 1.01)
    assert not gather.should_hold(256, [1.0], 1.0 + c.prefill_gather_ms / 1e3)
    assert not gather.should_hold(256, [1.0] * c.prefill_gather_batch, 1.01)
    assert EngineConfig(prefill_gather_ms=0.0).prefill_gather_ms == 0.0      # --prefill-gather-ms 0: off
    with pytest.raises(ValueError, match="prefill_gather_batch"):
        EngineConfig(prefill_gather_batch=0)
    with pytest.raises(ValueError, match="prefill_gather_ms"):
        EngineConfig(prefill_gather_ms=-1.0)


def test_the_service_flags_default_to_the_engines_gathering():
    from talker_service.server.config import TalkerServiceConfig
    engine = TalkerServiceConfig(vocoders="tcp://127.0.0.1:5701").engine_config()
    default = EngineConfig()
    assert (engine.prefill_gather_ms, engine.prefill_gather_batch, engine.prefill_gather_min_decoding) == (
        default.prefill_gather_ms, default.prefill_gather_batch, default.prefill_gather_min_decoding)
