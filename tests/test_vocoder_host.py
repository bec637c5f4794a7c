"""Host-side hot path of the vocoder: buffer lifetimes, frame gathering, graph-aware planning, host timings.

A stub step body that writes into one static output (as a captured graph does) makes any aliasing
between decode calls visible on CPU.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from benchmarks.bench_vocoder_host import StubStep
from benchmarks.bench_vocoder_service import build_random_decoder
from vocoder_service.engine import batcher as batch_planner
from vocoder_service.engine.batcher import ReadyRow, plan_batches
from vocoder_service.engine.chunk_policy import ChunkPolicy, batch_buckets
from vocoder_service.engine.config import VocoderEngineConfig
from vocoder_service.engine.engine import VocoderEngine
from vocoder_service.engine.stream_state import StreamState
from vocoder_service.runtime.runner import DecoderRunner

BATCH, FRAMES = 4, 3


@pytest.fixture(scope="module")
def stub_runner():
    runner = DecoderRunner(build_random_decoder("tiny", "cpu", torch.float32), BATCH)
    stub = StubStep(BATCH, FRAMES * runner.samples_per_frame, torch.device("cpu"))
    runner.capture_graphs([BATCH], [FRAMES], budget_bytes=1 << 30, emulate=True, body=stub)
    assert runner.graphs.covering_shape(BATCH, FRAMES) == (BATCH, FRAMES)
    return runner


def test_decode_result_survives_the_next_decode(stub_runner):
    """The stub reuses one output buffer; the runner's result must still be the caller's own memory."""
    codes = np.zeros((2, 16, FRAMES), np.int64)
    codes[:, 0, 0] = [7, 9]
    first = stub_runner.decode(codes, np.array([0, 1]), np.array([FRAMES, FRAMES]))
    kept = first.copy()
    codes[:, 0, 0] = [100, 200]
    second = stub_runner.decode(codes, np.array([0, 1]), np.array([FRAMES, FRAMES]))
    assert second[:, 0].tolist() == [100, 200]
    np.testing.assert_array_equal(first, kept)
    assert first[:, 0].tolist() == [7, 9]


def test_engine_chunks_stay_valid_across_steps(stub_runner):
    engine = VocoderEngine(stub_runner, VocoderEngineConfig(max_slots=BATCH, chunk=ChunkPolicy(FRAMES, FRAMES, 200.0, quick_first_max_streams=0)))
    for rid in ("a", "b"):
        engine.open(rid)
    kept = []
    for seq, marks in enumerate(([1, 2], [3, 4], [5, 6])):
        for rid, mark in zip(("a", "b"), marks):
            frames = np.ones((FRAMES, 16), np.int64)
            frames[0, 0] = mark
            engine.add_frames(rid, seq, frames)
        kept.extend(engine.step())
    got = {(o.request_id, o.seq): float(o.pcm[0]) for o in kept}
    assert got == {("a", 0): 1, ("b", 0): 2, ("a", 1): 3, ("b", 1): 4, ("a", 2): 5, ("b", 2): 6}
    assert all(o.pcm.dtype == np.float32 and len(o.pcm) == FRAMES * stub_runner.samples_per_frame for o in kept)
    assert {"plan", "gather", "emit"} <= set(engine.host_times.per_call_ms())
    assert {"check", "stage", "launch", "wait"} <= set(stub_runner.stats.as_dict()["host_ms_per_step"])


def test_take_into_many_small_blocks_and_a_split_block():
    stream = StreamState("r", 0, None, None, 0.0, 0.0)
    frames = np.arange(7 * 16).reshape(7, 16)
    stream.pending = [frames[i:i + 1] for i in range(5)] + [frames[5:7]]
    stream.num_pending = 7
    dest = np.full((16, 6), -1, np.int64)
    stream.take_into(dest, "pending", "num_pending")
    np.testing.assert_array_equal(dest, frames[:6].T)
    assert stream.num_pending == 1 and len(stream.pending) == 1
    np.testing.assert_array_equal(stream.pending[0], frames[6:7])


def test_planning_merges_batches_that_replay_the_same_graph():
    policy = ChunkPolicy(2, 25, 200.0)
    rows = [ReadyRow(f"r{i}", i, n, True, False) for i, n in enumerate([2, 2, 2, 4, 4, 8, 16, 25])]
    sizes = batch_buckets(64)
    apart = plan_batches(rows, policy, sizes, 1.0)
    assert len(apart) > 1   # without graph knowledge padding looks costly: groups stay apart
    only_big = plan_batches(rows, policy, sizes, 1.0, covering_shape=lambda bs, t: (64, 25))
    assert len(only_big) == 1 and only_big[0].frames_bucket == 25
    assert sorted(r.request_id for r in only_big[0].rows) == sorted(r.request_id for r in rows)
    # Every shape its own graph: nothing pads, so no group is split (without graph knowledge the
    # three 2-frame rows go as 2 + 1 rather than padded to 4) and nothing extra merges.
    exact = plan_batches(rows, policy, sizes, 1.0, covering_shape=lambda bs, t: (bs, t))
    assert len(exact) == len({policy.bucket_for(r.num_frames) for r in rows}) == len(apart) - 1


def test_planning_never_outgrows_the_largest_graph_of_a_frame_bucket():
    """A memory budget that left the big 25-frame graphs out (only up to 32 rows there) must not
    produce an eager 200-row batch of 25 frames: its activations were never set aside."""
    policy = ChunkPolicy(2, 25, 200.0)
    sizes = batch_buckets(256)
    captured = [(b, t) for b in sizes for t in (2, 4, 8, 16, 25) if b * t <= 800]

    def covering(bs, t):
        fits = [(b, f) for b, f in captured if b >= bs and f >= t]
        return min(fits, key=lambda s: s[0] * s[1]) if fits else None

    assert batch_planner.largest_covered(sizes, 25, covering) == 32
    assert batch_planner.largest_covered(sizes, 2, covering) == 256
    assert batch_planner.largest_covered(sizes, 25, None) == 256             # no graphs: every size
    assert batch_planner.largest_covered(sizes, 25, lambda bs, t: None) == 256   # none covers the bucket
    rows = [ReadyRow(f"s{i}", i, 25, True, False) for i in range(200)]
    rows += [ReadyRow(f"f{i}", 200 + i, 2, True, False) for i in range(40)]
    batches = plan_batches(rows, policy, sizes, 64.0, covering_shape=covering)
    assert sorted(r.request_id for b in batches for r in b.rows) == sorted(r.request_id for r in rows)
    assert all(covering(b.batch_size, b.frames_bucket) is not None for b in batches)
    assert max(b.batch_size for b in batches if b.frames_bucket == 25) == 32
    assert sum(b.batch_size for b in batches if b.frames_bucket == 25) >= 200
    # without graphs the same rows go in batches of up to 256
    assert max(b.batch_size for b in plan_batches(rows, policy, sizes, 64.0)) > 32
