"""The talker decode step through the graph table (emulate mode on CPU: the same static buffers,
padding rows and bucket lookup as CUDA graph replay, with the step run eagerly).

The graph path must give every request exactly the codes it gets from the plain eager step with
no padding, whatever its batch mates and padding rows.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from test_talker_engine import CASES, alone
from test_talker_engine_support import Collector, add, make_engine, text_ids
from test_vocoder_process_support import one_cpu_thread

GRAPHED = dict(decode_graphs="emulate", batch_buckets=(2, 4))


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    with one_cpu_thread():
        yield


@pytest.fixture(scope="module")
def eager():
    return make_engine(max_slots=4, decode_graphs="off", pad_to_buckets=False)


def run_staggered(engine) -> Collector:
    got = Collector()
    arrivals = {0: [0, 1], 2: [2], 3: [3, 4], 7: [5]}   # step -> cases arriving; 6 requests share 4 slots
    for tick in range(200):
        for i in arrivals.get(tick, []):
            n, seed, greedy, streaming, spk = CASES[i]
            add(engine, i, text_ids(i, n), seed, greedy=greedy, streaming=streaming, speaker=spk)
        if tick > max(arrivals) and not engine.has_work():
            break
        got.take(engine.step())
    return got


def test_graph_path_codes_equal_eager_for_staggered_requests_with_padding(eager):
    expected = {i: alone(eager, f"a{i}", text_ids(i, n), seed, greedy=greedy, streaming=streaming, speaker=spk)
                for i, (n, seed, greedy, streaming, spk) in enumerate(CASES)}
    assert eager.runner.graphs is None and eager.runner.graph_stats.num_graph_steps == 0
    graphed = make_engine(max_slots=4, **GRAPHED)
    got = run_staggered(graphed)
    for i, codes in expected.items():
        assert len(codes) > 2
        assert np.array_equal(got.codes(i), codes), f"request {i}: graph path differs from eager"
    stats = graphed.runner.graph_stats
    assert stats.num_graphs == 2                                     # one per batch bucket (2, 4), no context axis
    assert stats.num_graph_steps == graphed.stats.num_decode_steps > 0
    assert stats.num_eager_steps == 0 and stats.hit_rate == 1.0
    assert stats.num_padding_rows > 0                                # a batch of 3 ran in the bucket of 4
    assert set(stats.shape_histogram) == {2, 4}, f"both batch buckets should be used, got {stats.shape_histogram}"
    assert sum(stats.shape_histogram.values()) == stats.num_graph_steps
    graphed.scheduler.check_invariants()


def decode_alone(config: dict, num_steps: int) -> tuple[np.ndarray, torch.Tensor, torch.Tensor, object]:
    """One sampled request stepped alone at the runner level -> codes [steps, 16], its KV rows, codec embed."""
    engine = make_engine(max_slots=4, **config)
    got = Collector()
    add(engine, "r", text_ids(7, 5), 21, max_new_tokens=num_steps + 2, min_new_tokens=num_steps + 2)
    got.take(engine.step())            # prefill + first decode
    slot = next(iter(engine.scheduler.running.values())).slot
    for _ in range(num_steps):
        got.take(engine.step())
    runner = engine.runner
    cache = runner.model.cache
    return got.codes("r"), cache.k[:, slot].clone(), runner.codec_embeds[slot].clone(), runner


def test_padding_rows_never_disturb_a_real_slot():
    want_codes, want_k, want_embed, _ = decode_alone(dict(decode_graphs="off", pad_to_buckets=False), 6)
    # batch bucket 4 only: each one-row step runs with 3 padding rows on the scratch slot
    codes, k, embed, runner = decode_alone(dict(decode_graphs="emulate", batch_buckets=(4,)), 6)
    assert runner.graph_stats.num_padding_rows == 3 * runner.graph_stats.num_graph_steps > 0
    assert np.array_equal(codes, want_codes)          # seeded sampling: same codes alone and padded
    # the slot's keys match to float rounding (GEMM rows of a batch of 4 vs 1 round differently);
    # a padding row writing into it would differ by O(1)
    torch.testing.assert_close(k, want_k, rtol=0, atol=1e-5)
    torch.testing.assert_close(embed, want_embed, rtol=0, atol=1e-5)
    # bitwise equal to the eager step padded the same way: the graph path adds nothing of its own
    _, eager_k, eager_embed, _ = decode_alone(dict(decode_graphs="off", pad_to_buckets=True, batch_buckets=(4,)), 6)
    assert torch.equal(k, eager_k) and torch.equal(embed, eager_embed)
    scratch_k = runner.model.cache.k[:, runner.scratch_slot, :, 0]
    assert scratch_k.abs().sum() > 0, "padding rows should have written the scratch slot"


def test_batches_above_graph_max_batch_run_eagerly_and_are_counted(eager):
    expected = {i: alone(eager, f"b{i}", text_ids(i, n), seed, greedy=greedy, streaming=streaming, speaker=spk)
                for i, (n, seed, greedy, streaming, spk) in enumerate(CASES)}
    engine = make_engine(max_slots=4, graph_max_batch=2, **GRAPHED)
    got = run_staggered(engine)
    for i, codes in expected.items():
        assert np.array_equal(got.codes(i), codes), f"request {i}: mixed graph/eager path differs"
    stats = engine.runner.graph_stats
    assert stats.num_graphs == 1                                     # batch (2,) only
    assert stats.num_graph_steps > 0 and stats.num_eager_steps > 0
    assert stats.num_graph_steps + stats.num_eager_steps == engine.stats.num_decode_steps
    assert 0.0 < stats.hit_rate < 1.0
    summary = stats.summary()
    assert summary["num_eager_steps"] == stats.num_eager_steps and "bs4" in summary["shape_histogram"]
