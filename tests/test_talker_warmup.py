"""The talker's warm-up before SERVING (issue #10): it runs on every model type, leaves no trace,
and changes no later output."""
from __future__ import annotations

import pytest

from checkpoint.files import resolve_model_dir
from talker_service.engine import EngineConfig, ModelRunner, TalkerEngine
from talker_service.server.warmup import WARMUP_TEXT_TOKENS, warm_up, warmup_prompts
from test_talker_engine_support import Collector, add, make_engine, run_until_idle, text_ids

pytestmark = pytest.mark.timeout(300)


def codes_of(engine: TalkerEngine):
    collector = Collector()
    for i in range(3):
        add(engine, f"r{i}", text_ids(50 + i, 6 + 5 * i), seed=90 + i)
    run_until_idle(engine, collector)
    return {rid: collector.codes(rid) for rid in ("r0", "r1", "r2")}


def test_warm_up_changes_no_output_and_resets_the_counters():
    cold = make_engine()
    want = codes_of(cold)
    warm = make_engine()
    elapsed_s = warm_up(warm, warm.config.max_text_tokens)
    assert elapsed_s > 0 and not warm.has_work()
    assert warm.stats.num_started == warm.stats.num_finished == 0
    assert warm.stats.prefill_time.summary()["count"] == 0 and not warm.stats.batch_size_histogram
    assert warm.runner.graph_stats.num_eager_steps == warm.runner.graph_stats.num_graph_steps == 0
    got = codes_of(warm)
    assert got.keys() == want.keys()
    for rid in want:
        assert (got[rid] == want[rid]).all(), rid


@pytest.mark.parametrize("model", ["tiny-base", "tiny-voice-design", "tiny-custom-voice"])
def test_every_model_type_warms_up_alone_and_batched(model):
    engine = TalkerEngine(ModelRunner.from_checkpoint(resolve_model_dir(model), EngineConfig(max_slots=4,
                                                                                              max_seq_len=128)))
    prompts = warmup_prompts(engine)
    assert [len(ids) for _, ids in prompts] == list(WARMUP_TEXT_TOKENS)
    seen = []
    step = engine.step

    def counting_step():
        outs = step()
        seen.extend(outs)
        return outs

    engine.step = counting_step
    warm_up(engine, 4096)
    finals = [o for o in seen if getattr(o, "is_final", False)]
    assert len(finals) == len(WARMUP_TEXT_TOKENS) + min(len(WARMUP_TEXT_TOKENS), engine.config.max_prefill_batch)
