"""Graph-table lookup, KV sizing arithmetic, config checks and the max-context error (CPU)."""
from __future__ import annotations

import numpy as np
import pytest

from talker_service.engine import EngineConfig
from talker_service.engine.config import decode_batch_buckets, kv_slots_that_fit
from talker_service.server.config import TalkerServiceConfig
from test_talker_engine_support import make_engine
from test_vocoder_process_support import one_cpu_thread


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    with one_cpu_thread():
        yield


@pytest.fixture(scope="module")
def runner():
    return make_engine(max_slots=8, max_seq_len=64, decode_graphs="emulate").runner


def test_find_picks_the_smallest_covering_batch(runner):
    table = runner.graphs
    assert table.batch_sizes == [1, 2, 4, 8]
    assert len(table) == 4 and runner.graph_stats.num_graphs == 4     # one graph per batch bucket, no context axis
    for batch, bucket in {1: 1, 2: 2, 3: 4, 5: 8, 8: 8}.items():
        assert table.find(batch).batch_size == bucket, batch
    assert table.find(9) is None


def test_static_buffers_hold_padding_rows_after_a_step(runner):
    graph = runner.graphs.find(3)
    rows = np.array([[0, 1, 2], [3, 4, 5], [0, 0, 0], [runner.vocab.tts_pad_id] * 3], dtype=np.int64)
    codes = graph.run(rows)
    assert tuple(codes.shape) == (3, 16)
    index_rows = graph.index_rows.cpu().numpy()
    assert np.array_equal(index_rows[:, :3], rows)
    assert np.array_equal(index_rows[:, 3], runner.padding_row()) and runner.padding_row()[0] == runner.scratch_slot


def test_decode_past_max_context_is_a_clear_error(runner):
    with pytest.raises(ValueError, match="outside the talker context of 64 positions"):
        runner.decode([0, 1], [10, 64], [1, 1], [runner.vocab.tts_pad_id] * 2)
    with pytest.raises(ValueError, match="needs 1..8 slots"):
        runner.decode([], [], [], [])


def test_default_decode_buckets_are_finer_above_128_rows():
    assert EngineConfig(max_slots=256).buckets() == [1, 2, 4, 8, 16, 32, 64, 128, 160, 192, 224, 256]
    assert EngineConfig(max_slots=8).buckets() == [1, 2, 4, 8]
    assert decode_batch_buckets(200) == [1, 2, 4, 8, 16, 32, 64, 128, 160, 192, 200]
    assert decode_batch_buckets(512)[-8:] == [160, 192, 224, 256, 320, 384, 448, 512]
    assert EngineConfig(max_slots=256, batch_buckets=(64,)).buckets() == [64, 256]   # configured: as given
    with pytest.raises(ValueError, match="async_decode must be auto, on or off, got 'sometimes'"):
        TalkerServiceConfig(async_decode="sometimes")
    assert EngineConfig().is_async_decode("cuda") and not EngineConfig().is_async_decode("cpu")
    assert EngineConfig(async_decode=True).is_async_decode("cpu")


def test_kv_slots_that_fit():
    mib = 2**20
    assert kv_slots_that_fit(256, mib, 1000 * mib, 0.5, 1) == 256          # plenty: as configured
    assert kv_slots_that_fit(256, mib, 100 * mib, 0.5, 1) == 49            # 50 rows, one is scratch
    assert kv_slots_that_fit(4, 10 * mib, 100 * mib, 0.9, 0) == 4
    with pytest.raises(ValueError, match="KV cache does not fit"):
        kv_slots_that_fit(8, 100 * mib, 150 * mib, 0.9, 1)


def test_config_checks():
    with pytest.raises(ValueError, match=r"context_buckets \(16,\) is no longer supported.*one decode graph per batch"):
        EngineConfig(max_slots=4, max_seq_len=64, context_buckets=(16,))
    assert EngineConfig().graph_mode("cpu") == "off" and EngineConfig().graph_mode("cuda") == "capture"
    assert EngineConfig(decode_graphs="emulate", pad_to_buckets=False).is_padding("cpu")
    for bad in (dict(context_buckets=(0,)), dict(max_seq_len=64, context_buckets=(128,)),
                dict(decode_graphs="sometimes"), dict(kv_memory_fraction=1.5), dict(graph_max_batch=-1)):
        with pytest.raises(ValueError, match="invalid talker engine config"):
            EngineConfig(**bad)
    with pytest.raises(ValueError, match="needs a CUDA device"):
        EngineConfig(decode_graphs="capture").graph_mode("cpu")


def test_kv_cache_sized_from_free_memory_shrinks_slots(monkeypatch):
    import torch

    from talker_service.engine.runner import size_kv_cache

    model = make_engine(max_slots=2, max_seq_len=32).runner.model
    cfg = model.config
    bytes_per_slot = 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * 64 * cfg.head_dim * 4   # fp32
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (10 * bytes_per_slot, 20 * bytes_per_slot))
    config = EngineConfig(max_slots=16, max_seq_len=64, batch_buckets=(4, 8, 16), kv_memory_fraction=0.5)
    sized = size_kv_cache(model, config, num_extra_slots=1)
    assert sized.max_slots == 4 and sized.batch_buckets == (4,) and sized.max_seq_len == 64
    assert model.cache.max_slots == 5 and model.cache.max_seq_len == 64
