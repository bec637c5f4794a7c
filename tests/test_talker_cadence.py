"""The talker's cadence guard (talker_service/engine/cadence.py): a step prefills arrivals only as
far as the running streams' slack allows; on a fake clock, rules first, then the engine (tiny
checkpoint, CPU) holding an arrival back while a running stream is short of audio."""
from __future__ import annotations

import pytest

from checkpoint.files import resolve_model_dir
from talker_service.engine import TalkerEngine
from talker_service.engine.cadence import FRAME_S, CadenceGuard
from talker_service.engine.config import EngineConfig
from talker_service.engine.runner import ModelRunner
from test_talker_engine_support import ENGINE_DEFAULTS, Collector, add, text_ids
from test_vocoder_process_support import one_cpu_thread


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    with one_cpu_thread():
        yield


def test_the_budget_is_what_the_smallest_slack_leaves():
    guard = CadenceGuard(margin_s=0.02, max_hold_s=0.5)
    assert guard.token_budget([], 1024, 0.0) == 1024                 # nothing running: no bound
    assert guard.token_budget([0.3], 1024, 0.0) == 1024              # no rate measured yet
    guard.observe_decode(0.01)
    guard.observe_prefill(padded_tokens=100, elapsed_s=0.01)         # 0.1 ms a position
    # slack 60 ms - two 10 ms decode steps - 20 ms margin = 20 ms: 200 positions
    assert guard.token_budget([0.5, 0.06, 2.0], 1024, 0.0) == pytest.approx(200, abs=1)
    assert guard.token_budget([0.03], 1024, 0.0) == 0                # short of audio: arrivals wait
    assert guard.token_budget([-1.0], 1024, 0.5) == 1024             # ... at most max_hold_s
    assert guard.token_budget([5.0], 1024, 0.0) == 1024              # far ahead: the whole budget
    assert CadenceGuard.slack_s(first_frame_s=1.0, num_frames=3, now_s=1.1) == pytest.approx(3 * FRAME_S - 0.1)


def make_engine(clock, **overrides) -> TalkerEngine:
    config = EngineConfig(max_slots=4, max_seq_len=128, **{**ENGINE_DEFAULTS, "cadence_margin_ms": 20.0, **overrides})
    return TalkerEngine(ModelRunner.from_checkpoint(resolve_model_dir("tiny"), config), clock=lambda: clock[0])


def test_an_arrival_waits_while_a_running_stream_is_short_of_audio_then_starts():
    clock = [10.0]   # (a request's first_frame_s of 0 reads as none yet)
    engine = make_engine(clock)
    got = Collector()
    add(engine, "running", text_ids(1, 8), 1, max_new_tokens=40, min_new_tokens=40)
    got.take(engine.step())                          # prefilled: its first frame at t = 0
    assert got.frames["running"]
    engine.cadence.s_per_token = 1e-3                # 1 ms a padded position: a 16-position prompt 16 ms
    engine.cadence.decode_s = 0.0
    clock[0] += len(got.frames["running"]) * FRAME_S - 0.03   # 30 ms of audio left: under the 20 ms margin + 16
    add(engine, "arrival", text_ids(2, 8), 2)
    got.take(engine.step())
    assert "arrival" not in got.frames and engine.stats.num_cadence_holds == 1
    assert "running" in got.frames                   # the running stream still got its frame
    for _ in range(3):                               # clock still: each step adds 80 ms of audio ahead
        got.take(engine.step())
    assert "arrival" in got.frames                   # enough slack now: prefilled
    assert engine.stats.num_cadence_holds == 1


def test_an_arrival_waits_no_longer_than_the_hold_limit():
    clock = [10.0]   # (a request's first_frame_s of 0 reads as none yet)
    engine = make_engine(clock, cadence_max_hold_ms=200.0)
    got = Collector()
    add(engine, "running", text_ids(3, 8), 3, max_new_tokens=40, min_new_tokens=40)
    got.take(engine.step())
    engine.cadence.s_per_token = 1.0                 # no prefill ever fits the slack
    add(engine, "arrival", text_ids(4, 8), 4)
    for step in range(3):
        clock[0] += 0.05
        got.take(engine.step())
        assert "arrival" not in got.frames, step
    clock[0] += 0.06                                 # 210 ms after it arrived
    got.take(engine.step())
    assert "arrival" in got.frames and engine.stats.num_cadence_holds == 3


def test_off_by_default():
    assert EngineConfig().cadence_margin_ms == 0.0
