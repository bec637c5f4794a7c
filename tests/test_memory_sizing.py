"""Slots sized from GPU memory (issue #11): fake device figures give the expected slots."""
from __future__ import annotations

import pytest

from checkpoint.files import resolve_model_dir
from launcher.main import memory_share, stream_limit
from service_common.memory_sizing import (GIB, MAX_AUTO_SLOTS, SOLO_FRACTION, VOCODER_RESERVE_BYTES,
                                          graph_budget_within, queue_for, shared_gpu_fractions, slots_that_fit)
from talker_service.server.config import TalkerServiceConfig
from talker_service.server.sizing import RESERVE_BYTES, kv_bytes_per_slot, sized_config, weight_bytes
from vocoder_service.server.config import VocoderServiceConfig

MIB = 2**20
H200_BYTES = 141 * GIB


def test_slots_fill_the_share_less_weights_and_reserve():
    sizing = slots_that_fit(total_bytes=100 * GIB, free_bytes=100 * GIB, fraction=0.5, fixed_bytes=10 * GIB,
                            bytes_per_slot=1 * GIB)
    assert sizing.num_slots == 40 and sizing.budget_bytes == 50 * GIB


def test_auto_fraction_is_the_solo_share_and_the_cap_holds():
    sizing = slots_that_fit(total_bytes=H200_BYTES, free_bytes=H200_BYTES, fraction=0.0, fixed_bytes=0,
                            bytes_per_slot=64 * MIB)
    assert sizing.budget_bytes == int(H200_BYTES * SOLO_FRACTION) and sizing.num_slots == MAX_AUTO_SLOTS


def test_memory_another_process_holds_is_not_counted_on():
    sizing = slots_that_fit(total_bytes=100 * GIB, free_bytes=30 * GIB, fraction=0.6, fixed_bytes=10 * GIB,
                            bytes_per_slot=1 * GIB)
    assert sizing.num_slots == 20   # 30 GiB free, not the 60 GiB share


def test_no_slot_fits_is_a_clear_error():
    with pytest.raises(ValueError, match="not one slot fits.*gpu_memory_fraction"):
        slots_that_fit(total_bytes=10 * GIB, free_bytes=10 * GIB, fraction=0.5, fixed_bytes=5 * GIB,
                       bytes_per_slot=1 * GIB)
    with pytest.raises(ValueError, match="gpu_memory_fraction must be in"):
        slots_that_fit(total_bytes=10 * GIB, free_bytes=10 * GIB, fraction=1.0, fixed_bytes=0, bytes_per_slot=1)


def test_queue_follows_the_slots_unless_set():
    assert queue_for(8, 0) == 64 and queue_for(256, 0) == 256 and queue_for(256, 10) == 10


def test_talker_on_cuda_is_sized_from_memory_and_cpu_keeps_its_small_default():
    model_dir = resolve_model_dir("tiny")
    config = TalkerServiceConfig(vocoders="tcp://127.0.0.1:1", device="cuda", gpu_memory_fraction=0.6)
    per_slot = kv_bytes_per_slot(model_dir, config.max_seq_len, "bfloat16")
    fixed = weight_bytes(model_dir, "bfloat16") + RESERVE_BYTES
    total = int((fixed + 6 * per_slot) / 0.6) + 1
    sized = sized_config(config, model_dir, total_bytes=total, free_bytes=total)
    assert sized.max_slots == 6 and sized.max_queued == 64
    cpu = sized_config(TalkerServiceConfig(vocoders="tcp://127.0.0.1:1"), model_dir)
    assert (cpu.max_slots, cpu.max_queued) == (8, 64)
    pinned = TalkerServiceConfig(vocoders="tcp://127.0.0.1:1", device="cuda", max_slots=3, max_queued=5)
    assert sized_config(pinned, model_dir) is pinned   # nothing measured when both are set


def test_kv_slot_bytes_follow_the_checkpoint_config():
    model_dir = resolve_model_dir("tiny")
    from talker_service.model.loader import read_talker_config
    cfg = read_talker_config(model_dir)
    assert kv_bytes_per_slot(model_dir, 100, "float32") == 2 * cfg.num_hidden_layers * cfg.num_key_value_heads \
        * cfg.head_dim * 100 * 4


def test_vocoder_slots_and_graph_budget():
    assert VocoderServiceConfig(device="cuda").resolved_max_slots() == MAX_AUTO_SLOTS
    assert VocoderServiceConfig().resolved_max_slots() == 64
    assert VocoderServiceConfig(max_slots=12, device="cuda").resolved_max_slots() == 12
    budget = graph_budget_within(total_bytes=100 * GIB, free_bytes=80 * GIB, held_bytes=5 * GIB, fraction=0.3)
    assert budget == 25 * GIB - VOCODER_RESERVE_BYTES
    with pytest.raises(ValueError, match="no GPU memory left for decoder graphs"):
        graph_budget_within(total_bytes=10 * GIB, free_bytes=10 * GIB, held_bytes=3 * GIB, fraction=0.3)


def test_launcher_splits_one_gpu_and_sizes_the_gateway_from_the_talker():
    fractions = shared_gpu_fractions()
    assert fractions["talker"] + fractions["vocoder"] <= SOLO_FRACTION
    assert memory_share("cuda", "talker") == ["--gpu-memory-fraction", str(fractions["talker"])]
    assert memory_share("cpu", "vocoder") == []
    assert stream_limit({"max_slots": 256, "max_queued": 256}) == ["--max-streams", "512"]
    assert stream_limit({}) == []
