"""The per-step prefill plan (pure Python): chunking, the padded token budget, shapes within the
captured set, arrival order, progress."""
from __future__ import annotations

import random

import pytest

from talker_service.engine import EngineConfig
from talker_service.engine.prefill_plan import CONTINUED, FRESH, PrefillJob, PrefillShapes, plan_step

SHAPES = PrefillShapes(prompt_buckets=(1, 2, 4), length_buckets=(16, 32, 64), token_budget=128)


def forwards(plan) -> dict[str, list[int]]:
    groups = {FRESH: [], CONTINUED: []}
    for job, n in plan:
        groups[job.kind].append(n)
    return groups


def run_to_end(jobs, shapes, max_steps=1000):
    """Apply plans until every job is done -> the plans."""
    plans = []
    for _ in range(max_steps):
        live = [j for j in jobs if j.remaining]
        if not live:
            return plans
        plan = plan_step(live, shapes)
        plans.append([(j, j.kind, j.done, n) for j, n in plan])
        for job, n in plan:
            job.done += n
    raise AssertionError("jobs never finished")


def test_a_long_prompt_is_split_into_chunks_of_the_largest_bucket():
    job = PrefillJob("a", 150)
    plans = run_to_end([job], SHAPES)
    assert [[(kind, start, n) for _, kind, start, n in plan] for plan in plans] == [
        [(FRESH, 0, 64)], [(CONTINUED, 64, 64)], [(CONTINUED, 128, 22)]]


def test_prompts_that_arrive_together_share_a_forward_within_the_budget():
    jobs = [PrefillJob(i, n) for i, n in enumerate((10, 30, 12, 40))]
    plan = plan_step(jobs, SHAPES)
    # all 40 positions would make it 4 x 64 = 256 > 128: the last prompt takes 32 now (a smaller
    # length bucket that fits) and its last 8 positions next step
    assert [n for _, n in plan] == [10, 30, 12, 32]
    assert SHAPES.cost(forwards(plan)[FRESH]) == 4 * 32 == 128
    plan = plan_step([PrefillJob("x", 60), PrefillJob("y", 100), PrefillJob("z", 5)], SHAPES)
    assert [n for _, n in plan] == [60, 64]              # 2 x 64 = 128: z waits for the next step


def test_fresh_and_continued_chunks_share_the_budget():
    cont = PrefillJob("c", 200, done=64)
    plan = plan_step([cont, PrefillJob("f", 20)], SHAPES)
    assert [(j.kind, n) for j, n in plan] == [(CONTINUED, 64), (FRESH, 20)]   # 64 + 32 <= 128
    plan = plan_step([cont, PrefillJob("f", 20), PrefillJob("g", 50)], SHAPES)
    assert sum(SHAPES.cost(g) for g in forwards(plan).values()) <= 128


@pytest.mark.parametrize("seed", range(20))
def test_random_bursts_stay_within_the_budget_and_the_captured_shapes(seed):
    rng = random.Random(seed)
    config = EngineConfig(max_slots=16, max_seq_len=512, max_prefill_batch=rng.choice((1, 4, 8)),
                          prefill_chunk_tokens=rng.choice((16, 64, 128)), prefill_token_budget=256)
    shapes = PrefillShapes.from_config(config)
    allowed = set(shapes.all())
    jobs = [PrefillJob(i, rng.randint(1, 400)) for i in range(rng.randint(1, 30))]
    for plan in run_to_end(jobs, shapes):
        assert plan, "a step with prefill work must make progress"
        order = [jobs.index(j) for j, *_ in plan]
        assert order == sorted(order), "chunks are taken in arrival order"
        groups = {FRESH: [], CONTINUED: []}
        for _, kind, _, n in plan:
            groups[kind].append(n)
        assert sum(shapes.cost(g) for g in groups.values()) <= config.prefill_token_budget
        for kind, lens in groups.items():
            if lens:
                assert (kind, shapes.prompt_bucket(len(lens)), shapes.length_bucket(max(lens))) in allowed
                assert len(lens) <= config.max_prefill_batch


def test_config_checks_of_the_prefill_settings():
    with pytest.raises(ValueError, match="prefill_token_budget .* must be >= prefill_chunk_tokens"):
        EngineConfig(prefill_chunk_tokens=512, prefill_token_budget=256)
    with pytest.raises(ValueError, match="prefill_token_buckets"):
        EngineConfig(prefill_chunk_tokens=64, prefill_token_buckets=(8, 128))
    assert EngineConfig(max_seq_len=100).prefill_length_buckets() == [16, 32, 64, 100]
    assert EngineConfig(prefill_chunk_tokens=8, prefill_token_buckets=(4,)).prefill_length_buckets() == [4, 8]
