"""Warm-up of the request path (engine/request_warmup.py): synthetic requests of each prompt kind
the model takes run through the engine before SERVING, leave nothing behind (no slot, no queued
request, zeroed counters) and change no later request's codes; the server runs it when warm-up is
on."""
from __future__ import annotations

import numpy as np
import pytest

from checkpoint.files import resolve_model_dir
from talker_service.engine import EngineConfig, ModelRunner, TalkerEngine
from talker_service.engine.request_warmup import synthetic_prompts, warm_up_requests
from talker_service.server.app import load_engine
from talker_service.server.config import TalkerServiceConfig
from test_talker_engine_support import Collector, add, make_engine, run_until_idle, text_ids
from test_vocoder_process_support import one_cpu_thread

CONFIG = dict(max_slots=4, decode_graphs="emulate", max_prefill_batch=2, prefill_chunk_tokens=32,
              prefill_token_budget=64)


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    with one_cpu_thread():
        yield


def engine_of(model: str) -> TalkerEngine:
    config = EngineConfig(max_seq_len=128, warm_up=False, **CONFIG)
    return TalkerEngine(ModelRunner.from_checkpoint(resolve_model_dir(model), config))


@pytest.mark.parametrize("model, kinds", [("tiny-custom-voice", 2), ("tiny-voice-design", 1), ("tiny-base", 2)])
def test_each_prompt_kind_runs_and_nothing_is_left_behind(model, kinds):
    engine = engine_of(model)
    prompts = synthetic_prompts(engine)
    assert len(prompts) == kinds
    if model == "tiny-base":   # an x-vector clone and an in-context clone
        assert [p.is_icl for p in prompts] == [False, True]
    assert warm_up_requests(engine) == kinds
    assert not engine.has_work() and len(engine.scheduler.free_slots) == engine.config.max_slots
    stats, graphs = engine.stats, engine.runner.graph_stats
    assert stats.num_started == stats.num_frames_generated == stats.num_decode_steps == 0
    assert graphs.num_graph_steps == graphs.num_prefill_graph_steps == graphs.num_prefill_eager_steps == 0
    assert graphs.warm_up_s > 0


def test_later_requests_get_the_codes_of_a_cold_engine():
    """The warm-up used real slots and their sampler state: a request after it, on any slot, still
    gets exactly the codes it gets from an engine that never warmed up."""
    results = []
    for warm in (True, False):
        engine = make_engine(warm_up=False, **CONFIG)
        if warm:
            warm_up_requests(engine)
        got = Collector()
        for i in range(3):
            add(engine, i, text_ids(i, 6 + i), 11 + i, max_new_tokens=10)
        run_until_idle(engine, got)
        results.append(got)
    for i in range(3):
        assert len(results[0].codes(i)) > 0 and np.array_equal(results[0].codes(i), results[1].codes(i)), i


@pytest.mark.parametrize("warm_up, expect_runs", [("on", True), ("off", False)])
def test_the_server_warms_the_request_path_when_warm_up_is_on(warm_up, expect_runs, monkeypatch):
    calls = []
    import talker_service.server.app as app
    real = app.warm_up_requests
    monkeypatch.setattr(app, "warm_up_requests", lambda engine: calls.append(real(engine)))
    engine, _ = load_engine(TalkerServiceConfig(model="tiny", device="cpu", vocoders="tcp://127.0.0.1:5701", max_slots=2, max_seq_len=128,
                                                warm_up=warm_up))
    assert bool(calls) == expect_runs
    assert not engine.has_work() and engine.stats.num_started == 0
