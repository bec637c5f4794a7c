"""The decoder's graph table (vocoder_service/runtime/graphs.py): shape choice and padding.

On CPU the table is built with `emulate=True`: each captured step runs the step body eagerly on
the same static, padded buffers that a CUDA graph would read, so these tests cover everything but
the capture call itself (that runs on the GPU in benchmarks/bench_decoder.py, through the runner).
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from test_decoder_fixtures import random_codes, single_thread, tiny_code2wav  # noqa: F401 (single_thread: autouse fixture)
from vocoder_service.codec import StreamingDecoder
from vocoder_service.runtime.graphs import GraphTable, cudnn_benchmark_set_to
from vocoder_service.runtime.runner import DecoderRunner

SPF = 1920
BUDGET_BYTES = 1 << 30   # emulation allocates no device memory: every shape is captured


@pytest.fixture(scope="module")
def model():
    return tiny_code2wav()


def emulated_table(decoder: StreamingDecoder, batch_sizes: list[int], frame_sizes: list[int]) -> GraphTable:
    table = GraphTable(decoder, emulate=True)
    report = table.capture(batch_sizes, frame_sizes, BUDGET_BYTES)
    assert not report.skipped
    return table


def test_shape_choice_and_limits(model):
    table = emulated_table(StreamingDecoder(model, max_slots=4), batch_sizes=[4, 1, 2], frame_sizes=[5, 2])
    assert len(table) == 6
    assert table.covering_shape(1, 1) == (1, 2)
    assert table.covering_shape(3, 3) == (4, 5)
    assert table.covering_shape(2, 5) == (2, 5)
    # Beyond the largest captured shape no graph covers the call: the runner runs it eagerly.
    assert table.covering_shape(5, 1) is None
    assert table.covering_shape(1, 6) is None
    with pytest.raises(ValueError, match=r"a \(3, 6\) step does not fit the \(4, 5\) graph"):
        table.find(4, 5).run(np.zeros((3, 16, 6), np.int64), np.arange(3), np.full(3, 6))


def test_a_graph_that_replays_slower_than_a_bigger_covering_one_is_passed_over(model):
    table = emulated_table(StreamingDecoder(model, max_slots=4), batch_sizes=[1, 2, 4], frame_sizes=[2, 4])
    times = {(1, 2): 3.0, (2, 2): 93.0, (1, 4): 3.2, (4, 2): 7.5, (2, 4): 6.9, (4, 4): 8.0}
    for shape, ms in times.items():   # what capture measures on a GPU (emulation measures nothing)
        table.steps[shape].replay_ms = ms
    table._lookup.clear()
    assert table.covering_shape(2, 2) == (2, 4)      # 6.9 ms: the least padding within 1.25x of the fastest
    assert table.covering_shape(2, 1) == (2, 4)
    assert table.covering_shape(1, 1) == (1, 2)      # 3.0 and 3.2 ms are alike: least padding wins
    assert table.covering_shape(3, 2) == (4, 2)      # 7.5 and 8.0 ms: least padding wins
    assert table.covering_shape(4, 4) == (4, 4)


def test_without_replay_times_the_least_padding_covers_a_call(model):
    table = emulated_table(StreamingDecoder(model, max_slots=4), batch_sizes=[1, 2, 4], frame_sizes=[2, 4])
    assert all(step.replay_ms is None for step in table.steps.values())
    assert table.covering_shape(2, 2) == (2, 2)
    assert table.covering_shape(3, 3) == (4, 4)


def test_padded_shapes_stream_exactly_and_never_touch_other_slots(model):
    codes = {0: random_codes(1, 9, seed=61)[0], 3: random_codes(1, 6, seed=62)[0]}
    reference = {slot: model.decode(c.unsqueeze(0))[0] for slot, c in codes.items()}
    decoder = StreamingDecoder(model, max_slots=5)
    table = emulated_table(decoder, batch_sizes=[1, 4], frame_sizes=[2, 5])
    scratch = decoder.scratch_slot
    scratch_before = {k: pool[scratch].clone() for k, pool in decoder.pools.items()}
    # (slots in row order, frames per row, the (B, T) it must replay): rows padded to B=4, frames to 2 or 5.
    schedule = [([3], [1], (1, 2)), ([0, 3], [2, 2], (4, 2)), ([0], [4], (1, 5)), ([3, 0], [3, 3], (4, 5))]
    done = {0: 0, 3: 0}
    streamed = {0: [], 3: []}
    for slots, sizes, shape in schedule:
        width = max(sizes)
        chunk = torch.full((len(slots), 16, width), 7)   # junk codes past each row's length
        for row, (slot, size) in enumerate(zip(slots, sizes)):
            chunk[row, :, :size] = codes[slot][:, done[slot] : done[slot] + size]
        step = table.find(len(slots), width)
        assert (step.batch_size, step.num_frames) == shape
        pcm = step.run(chunk.numpy(), np.array(slots), np.array(sizes))
        assert pcm.shape == (len(slots), width * SPF)
        for row, (slot, size) in enumerate(zip(slots, sizes)):
            streamed[slot].append(torch.from_numpy(pcm[row, : size * SPF]).clone())
            done[slot] += size
    for slot in codes:
        assert done[slot] == codes[slot].shape[1]
        assert (torch.cat(streamed[slot]) - reference[slot]).abs().max().item() <= 1e-4
    for unused in (1, 2, 4):  # padding rows went to the scratch slot (index 5), never here
        assert decoder.positions[unused] == 0
        assert all(torch.count_nonzero(pool[unused]) == 0 for pool in decoder.pools.values())
    # Padding rows have length 0: the scratch slot's state and position never move either.
    assert decoder.positions[scratch] == 0
    assert all(torch.equal(pool[scratch], scratch_before[k]) for k, pool in decoder.pools.items())


def test_rejected_call_leaves_state_untouched(model):
    runner = DecoderRunner(model, max_slots=2)
    runner.capture_graphs([2], [2], BUDGET_BYTES, emulate=True)
    runner.decode(random_codes(1, 2, seed=3).numpy(), np.array([0]), np.array([2]))
    assert runner.last_step_is_graph
    before = {k: v.clone() for k, v in runner.decoder.pools.items()}
    positions = runner.decoder.positions.clone()
    with pytest.raises(ValueError, match="duplicate slots"):
        runner.decode(random_codes(2, 2, seed=4).numpy(), np.array([1, 1]), np.array([2, 2]))
    with pytest.raises(ValueError, match="does not fit"):   # a step too big for its graph, called directly
        runner.graphs.find(2, 2).run(random_codes(2, 3, seed=5).numpy(), np.array([0, 1]), np.array([3, 3]))
    assert all(torch.equal(before[k], runner.decoder.pools[k]) for k in before)
    assert torch.equal(positions, runner.decoder.positions)


def test_cudnn_benchmark_only_for_shapes_at_or_above_the_threshold(model):
    decoder = StreamingDecoder(model, max_slots=4)
    table = GraphTable(decoder, emulate=True, cudnn_benchmark_min_row_frames=8)
    report = table.capture([1, 4], [2, 5], BUDGET_BYTES)
    assert report.cudnn_benchmarked == [(4, 2), (4, 5)]   # 1x2, 1x5 stay on heuristic picks
    assert table.uses_cudnn_benchmark(2, 4) and not table.uses_cudnn_benchmark(1, 7)
    off = GraphTable(decoder, emulate=True).capture([1, 4], [2, 5], BUDGET_BYTES)
    assert off.cudnn_benchmarked == [] and len(off.captured) == 4
    assert torch.backends.cudnn.benchmark is False   # the process-wide flag is left as it was


def test_cudnn_benchmark_is_set_only_inside_and_restored_after_an_error():
    assert torch.backends.cudnn.benchmark is False
    with cudnn_benchmark_set_to(True):
        assert torch.backends.cudnn.benchmark is True
    assert torch.backends.cudnn.benchmark is False
    with pytest.raises(RuntimeError, match="capture failed"):
        with cudnn_benchmark_set_to(True):
            raise RuntimeError("capture failed")
    assert torch.backends.cudnn.benchmark is False
