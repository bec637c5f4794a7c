"""Warm-up before SERVING: every shape serving can use (decode buckets, graphed or eager; prefill
(kind, prompts, positions) shapes) runs once while the runner is built, derived from the config
serving uses, and leaves no trace in the counters or in any request's codes."""
from __future__ import annotations

import numpy as np
import pytest

from talker_service.engine import EngineConfig, TalkerEngine
from talker_service.engine.warmup import serving_shapes, shapes_run
from test_talker_engine import CASES
from test_talker_engine_support import Collector, add, make_engine, run_until_idle, text_ids
from test_vocoder_process_support import one_cpu_thread

# graphs only up to batch 2: decode buckets 4 and 8 run eagerly, and must be warmed too
CONFIG = dict(max_slots=8, decode_graphs="emulate", graph_max_batch=2, max_prefill_batch=4,
              prefill_chunk_tokens=32, prefill_token_budget=64)


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    with one_cpu_thread():
        yield


@pytest.fixture(scope="module")
def warmed_engine():
    return make_engine(warm_up=True, **CONFIG)


def test_warm_up_runs_every_shape_the_config_allows(warmed_engine):
    runner = warmed_engine.runner
    warmed = runner.warmed_shapes
    assert serving_shapes(runner) <= warmed
    # derived independently from the config: every decode batch size and every prefill forward
    # the plan can form (n prompts, longest chunk m, within the budget) has its shape warmed
    config, shapes = runner.config, runner.prefill_shapes
    for n in range(1, config.max_slots + 1):
        assert ("decode", runner.bucket_for(n)) in warmed, n
    for n in range(1, config.max_prefill_batch + 1):
        for m in range(1, config.max_prefill_chunk() + 1):
            if shapes.prompt_bucket(n) * shapes.length_bucket(m) <= config.prefill_token_budget:
                for kind in ("fresh", "continued"):
                    assert ("prefill", kind, shapes.prompt_bucket(n), shapes.length_bucket(m)) in warmed, (n, m)
    stats = runner.graph_stats
    assert stats.num_warm_up_shapes == len(warmed) and stats.warm_up_s > 0
    # the warm-up's own steps are not counted as serving
    assert stats.num_graph_steps == stats.num_eager_steps == stats.num_prefill_graph_steps == 0
    assert not stats.shape_histogram and not stats.prefill_shape_histogram


def test_serving_meets_only_warmed_shapes_and_codes_are_unchanged(warmed_engine):
    """Staggered arrivals, a burst, chunked long prompts: every shape served was warmed, and each
    request gets the codes it gets from an engine that never warmed up."""
    cold = make_engine(warm_up=False, **CONFIG)
    assert cold.runner.warmed_shapes == set()
    results = []
    for engine in (warmed_engine, cold):
        got = Collector()
        arrivals = {0: [0, 1], 2: [2, 3, 4, 5], 5: [6, 7, 8], 6: [9]}
        for tick in range(400):
            for i in arrivals.get(tick, []):
                n, seed, greedy, streaming, spk = CASES[i % len(CASES)]
                length = n if i < 6 else 40 + 7 * i              # long non-streaming prompts: chunked
                add(engine, i, text_ids(i, length), seed + i, greedy=greedy, streaming=streaming and i < 6,
                    speaker=spk, max_new_tokens=14)
            if tick > max(arrivals) and not engine.has_work():
                break
            got.take(engine.step())
        results.append(got)
    for i in range(10):
        assert len(results[0].codes(i)) > 0 and np.array_equal(results[0].codes(i), results[1].codes(i)), i
    runner = warmed_engine.runner
    served = shapes_run(runner)
    assert served <= runner.warmed_shapes, f"served but never warmed: {served - runner.warmed_shapes}"
    assert any(s[:2] == ("prefill", "continued") for s in served), "the long prompts should have been chunked"
    assert runner.graph_stats.num_eager_steps > 0, "batches above graph_max_batch should have run eagerly"


def test_warm_up_defaults_to_cuda_only_and_skips_unpadded_runners():
    assert EngineConfig().is_warm_up("cuda") and not EngineConfig().is_warm_up("cpu")
    assert EngineConfig(warm_up=True).is_warm_up("cpu") and not EngineConfig(warm_up=False).is_warm_up("cuda")
    unpadded = make_engine(warm_up=True, decode_graphs="off", pad_to_buckets=False)
    assert unpadded.runner.warmed_shapes == set() and serving_shapes(unpadded.runner) == set()
    engine = TalkerEngine(unpadded.runner)
    got = Collector()
    add(engine, "r", text_ids(1, 4), 3)
    run_until_idle(engine, got)
    assert len(got.codes("r")) > 0
