"""DecoderRunner over the real (tiny, random) decoder, driven through the engine on CPU.

Streamed audio must equal `Code2Wav.decode` of the whole utterance (fp32: differences only from
summation order, < 2e-5 on outputs of O(0.3)); padding a step to a larger (batch, frames) shape,
as graph replay does, must not change any real row or any real slot's state.
"""
from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from checkpoint.files import resolve_model_dir
from vocoder_service.runtime import graphs as runtime_graphs
from vocoder_service.codec import Code2Wav
from vocoder_service.engine.chunk_policy import ChunkPolicy
from vocoder_service.engine.config import VocoderEngineConfig
from vocoder_service.engine.engine import ErrorOut, VocoderEngine
from vocoder_service.runtime.runner import DecoderRunner
from test_vocoder_process_support import offline_pcm, one_cpu_thread, random_codes

ATOL = 2e-5
SPF = 1920


@pytest.fixture(scope="module")
def model():
    with one_cpu_thread():
        yield Code2Wav.from_pretrained(resolve_model_dir("tiny"), "cpu", torch.float32)




def test_engine_stream_equals_offline_for_interleaved_requests_with_context(model):
    runner = DecoderRunner(model, max_slots=4)
    clock = [0.0]
    config = VocoderEngineConfig(max_slots=4, chunk=ChunkPolicy(2, 5, max_wait_ms=30.0), samples_per_frame=SPF)
    engine = VocoderEngine(runner, config, clock=lambda: clock[0])
    # (context frames, generated frames); "b" sends its last context rows and first audio rows in one entry
    plan = {"a": (0, 9), "b": (4, 7), "c": (0, 3), "d": (6, 5)}
    codes = {rid: random_codes(i, ctx + gen) for i, (rid, (ctx, gen)) in enumerate(plan.items())}
    sent = {rid: 0 for rid in plan}
    seqs = {rid: 0 for rid in plan}
    rng = random.Random(7)
    outs: dict[str, list] = {}
    for rid in plan:
        engine.open(rid)
    while any(sent[rid] < len(codes[rid]) for rid in plan) or engine.has_work():
        for rid, (ctx, _) in plan.items():
            if sent[rid] == len(codes[rid]) or rng.random() < 0.3:
                continue
            k = min(rng.randint(1, 4), len(codes[rid]) - sent[rid])
            num_context = min(max(ctx - sent[rid], 0), k)
            engine.add_frames(rid, seqs[rid], codes[rid][sent[rid]:sent[rid] + k], num_context_frames=num_context,
                              is_final=sent[rid] + k == len(codes[rid]))
            sent[rid] += k
            seqs[rid] += 1
        clock[0] += 0.01
        for out in engine.step():
            assert not isinstance(out, ErrorOut), out
            outs.setdefault(out.request_id, []).append(out)
    assert engine.num_active == 0 and engine.slots.num_free == 4
    assert max(runner.stats.batch_size_histogram) > 1, "the interleaving never batched two requests"
    for rid, (ctx, gen) in plan.items():
        chunks = outs[rid]
        assert [c.seq for c in chunks] == list(range(len(chunks))) and chunks[-1].is_final
        got = np.concatenate([c.pcm for c in chunks])
        want = offline_pcm(model, codes[rid])[ctx * SPF:]
        assert got.shape == want.shape == (gen * SPF,)
        np.testing.assert_allclose(got, want, rtol=0, atol=ATOL, err_msg=rid)


def test_padding_rows_never_disturb_real_slots(model):
    padded = DecoderRunner(model, max_slots=4)
    padded.capture_graphs([4], [8], budget_bytes=1, emulate=True)   # every step padded to (4, 8)
    clean = DecoderRunner(model, max_slots=4)                        # same padding, zero scratch state
    clean.capture_graphs([4], [8], budget_bytes=1, emulate=True)
    reference = DecoderRunner(model, max_slots=4)                    # no padding at all
    # Junk in the scratch slot (where padding rows point) must not reach any real row.
    scratch = padded.decoder.scratch_slot
    gen = torch.Generator().manual_seed(0)
    for pool in padded.decoder.pools.values():
        pool[scratch] = torch.randn(pool[scratch].shape, generator=gen) * 100
    scratch_before = {k: p[scratch].clone() for k, p in padded.decoder.pools.items()}
    x, y = random_codes(10, 7), random_codes(11, 9)
    steps = [  # (slots, [(stream, start, length)]) with t = max length
        ([0], [(x, 0, 3)]),
        ([0, 2], [(x, 3, 2), (y, 0, 5)]),
        ([2], [(y, 5, 4)]),
        ([0], [(x, 5, 2)]),
    ]
    streamed = {0: [], 2: []}
    for slots, rows in steps:
        t = max(length for _, _, length in rows)
        batch = np.zeros((len(rows), 16, t), np.int64)
        for i, (stream, start, length) in enumerate(rows):
            batch[i, :, :length] = stream[start:start + length].T
        lengths = np.array([length for _, _, length in rows])
        idle = [s for s in range(4) if s not in slots]
        untouched = {k: p[idle].clone() for k, p in padded.decoder.pools.items()}
        got = padded.decode(batch, np.array(slots), lengths)
        # Same shapes: bit-identical whatever the scratch slot holds. Unpadded: equal up to summation order.
        assert np.array_equal(got, clean.decode(batch, np.array(slots), lengths))
        np.testing.assert_allclose(got, reference.decode(batch, np.array(slots), lengths), rtol=0, atol=ATOL)
        for key, pool in padded.decoder.pools.items():
            assert torch.equal(pool[idle], untouched[key]), f"idle slots {idle} changed in {key}"
        for i, slot in enumerate(slots):
            streamed[slot].append(got[i, : lengths[i] * SPF])
    for key, pool in padded.decoder.pools.items():
        assert torch.equal(pool[scratch], scratch_before[key]), f"padding rows moved the scratch state {key}"
    assert padded.decoder.positions.tolist() == [7, 0, 9, 0, 0]
    assert padded.stats.num_graph_steps == 4 and padded.stats.num_eager_steps == 0
    np.testing.assert_allclose(np.concatenate(streamed[0]), offline_pcm(model, x), rtol=0, atol=ATOL)
    np.testing.assert_allclose(np.concatenate(streamed[2]), offline_pcm(model, y), rtol=0, atol=ATOL)


def test_uncaptured_shapes_run_eagerly_and_are_counted(model):
    runner = DecoderRunner(model, max_slots=4)
    runner.capture_graphs([2], [4], budget_bytes=1, emulate=True)
    runner.decode(random_codes(1, 3).T[None], np.array([0]), np.array([3]))           # (1, 3) -> (2, 4) graph
    three = np.stack([random_codes(s, 2).T for s in (2, 3, 4)])                          # (3, 2): no graph
    runner.decode(three, np.array([1, 2, 3]), np.array([2, 2, 2]))
    stats = runner.stats
    assert (stats.num_graph_steps, stats.num_eager_steps) == (1, 1) and stats.hit_rate == 0.5
    assert stats.uncaptured_shapes == {(3, 2): 1}
    assert stats.batch_size_histogram == {1: 1, 3: 1} and stats.step_time.summary()["count"] == 2


def test_bad_steps_raise_before_touching_state(model):
    runner = DecoderRunner(model, max_slots=2)
    before = {k: p.clone() for k, p in runner.decoder.pools.items()}
    two = np.zeros((2, 16, 2), np.int64)
    for slots, lengths, message in [([0, 0], [2, 2], "duplicate slots"), ([0, 1], [0, 2], "lengths must lie"),
                                    ([0, 2], [2, 2], "slot out of range")]:
        with pytest.raises(ValueError, match=message):
            runner.decode(two, np.array(slots), np.array(lengths))
    assert all(torch.equal(p, before[k]) for k, p in runner.decoder.pools.items())
    assert runner.stats.num_eager_steps == 0


def test_capture_goes_smallest_first_and_stops_at_the_budget(model, monkeypatch):
    made: list[tuple[int, int]] = []

    class FakeStep:
        def __init__(self, decoder, batch_size, num_frames, pool=None, body=None, cudnn_benchmark=False):
            self.batch_size, self.num_frames = batch_size, num_frames
            self.replay_ms = None   # not timed (as in emulation)
            made.append((batch_size, num_frames))

    class FakeMemory:  # 1 kB per row-frame captured
        def __init__(self, device):
            pass

        def reserved_growth(self):
            return 1000 * sum(b * t for b, t in made)

        allocated_growth = reserved_growth

    monkeypatch.setattr(runtime_graphs, "CapturedStep", FakeStep)
    monkeypatch.setattr(runtime_graphs, "_DeviceMemory", FakeMemory)
    table = runtime_graphs.GraphTable(DecoderRunner(model, max_slots=4).decoder, emulate=True)
    report = table.capture([1, 2, 4, 8], [2, 4], budget_bytes=12_000)   # 8 > max_slots: dropped
    # after 2x2 the pool holds 10 kB for a largest shape of 4 row-frames, so 2x4 (8) is predicted to
    # take it to 20 kB: left out before it overshoots the budget, not after (it would reach 18 kB)
    assert report.captured == [(1, 2), (1, 4), (2, 2)]
    assert report.skipped == [(2, 4), (4, 2), (4, 4)] and report.graph_memory_bytes == 10_000
    assert report.reserved_after == {"1x2": 2_000, "1x4": 6_000, "2x2": 10_000}   # the growth curve
    assert (table.find(1, 3).batch_size, table.find(1, 3).num_frames) == (1, 4)
    assert (table.find(2, 1).batch_size, table.find(2, 1).num_frames) == (2, 2)
    assert table.find(3, 2) is None and table.find(1, 5) is None and table.find(2, 3) is None


def test_capture_growth_is_predicted_from_the_largest_shape_so_far():
    assert runtime_graphs.predicted_growth(0, 0, 50) == 0                      # nothing captured yet
    assert runtime_graphs.predicted_growth(6_000, 4, 4) == 6_000               # no larger than the largest
    assert runtime_graphs.predicted_growth(6_000, 4, 2) == 6_000
    assert runtime_graphs.predicted_growth(6_000, 4, 10) == 15_000             # in proportion to row-frames


def test_a_runner_fault_fails_the_requests_of_that_batch_and_serving_goes_on(model):
    class FaultyOnce(DecoderRunner):
        def launch(self, codes, slots, lengths):   # what the engine calls (decode() is launch().wait())
            if codes.shape[2] == 4 and not getattr(self, "faulted", False):   # the first 4-frame chunk
                self.faulted = True
                raise RuntimeError("simulated device fault")
            return super().launch(codes, slots, lengths)

    runner = FaultyOnce(model, max_slots=2)
    engine = VocoderEngine(runner, VocoderEngineConfig(max_slots=2, chunk=ChunkPolicy(2, 4, max_wait_ms=0.0),
                                                       samples_per_frame=SPF))
    engine.open("hit")
    # two streams open: quick first chunks of 1 frame, then each stream's last frames as one chunk
    engine.add_frames("hit", 0, random_codes(70, 5), is_final=True)     # chunks 1, then 4: the 4 faults
    engine.open("spared")
    engine.add_frames("spared", 0, random_codes(71, 3), is_final=True)  # chunks 1, 2: never a 4
    outs = engine.step()                                                 # hit 1 + spared 1 (one batch)
    outs += engine.step()                                                # hit 4 + spared 2, merged: both fail
    assert sorted(o.request_id for o in outs if isinstance(o, ErrorOut)) == ["hit", "spared"]
    engine.open("next")
    engine.add_frames("next", 0, random_codes(71, 3), is_final=True)
    outs = engine.step() + engine.step()                                 # the loop goes on for new requests
    assert not any(isinstance(o, ErrorOut) for o in outs) and outs[-1].is_final
    assert engine.num_active == 0 and engine.slots.num_free == 2 and engine.stats["failed"] == 2
    np.testing.assert_allclose(np.concatenate([o.pcm for o in outs]), offline_pcm(model, random_codes(71, 3)),
                               rtol=0, atol=ATOL)


def test_a_step_queues_every_batch_before_reading_any_and_a_read_fault_fails_only_its_batch(model):
    """Two streams at different ramp stages decode as two batches (2 and 4 frames) in one step: both
    are launched before either is read back; a fault when the second is read fails only its stream,
    and the first stream's audio still equals the offline decode."""
    class Logged(DecoderRunner):
        log: list = []

        def launch(self, codes, slots, lengths):
            pending, log, t = super().launch(codes, slots, lengths), self.log, codes.shape[2]
            log.append(("launch", t))

            class Read:
                is_graph = pending.is_graph

                def wait(self):
                    log.append(("read", t))
                    if t == 4:
                        raise RuntimeError("simulated fault reading the 4-frame batch back")
                    return pending.wait()
            return Read()

    runner = Logged(model, max_slots=2)
    # launches cost nothing in the merge model: the 2- and 4-frame chunks stay two batches
    engine = VocoderEngine(runner, VocoderEngineConfig(max_slots=2, chunk=ChunkPolicy(2, 4, max_wait_ms=0.0,
                                                                                   quick_first_max_streams=0),
                                                       samples_per_frame=SPF, launch_cost_row_frames=0.0),
                          clock=lambda: 0.0)   # still time: "late" is a full 160 ms ahead, so its next chunk is 4
    engine.open("late")
    engine.add_frames("late", 0, random_codes(72, 6), is_final=False)
    first = engine.step()                                                # late: chunk of 2
    engine.open("early")
    engine.add_frames("early", 0, random_codes(73, 2), is_final=True)
    Logged.log.clear()
    outs = engine.step()                                                 # early 2 frames + late 4 frames
    assert Logged.log == [("launch", 2), ("launch", 4), ("read", 2), ("read", 4)]
    errors = [o for o in outs if isinstance(o, ErrorOut)]
    assert [e.request_id for e in errors] == ["late"] and "simulated fault" in errors[0].message
    early = [o for o in outs if not isinstance(o, ErrorOut)]
    assert [o.request_id for o in early] == ["early"] and early[0].is_final
    assert len(first) == 1 and engine.num_active == 0
    np.testing.assert_allclose(early[0].pcm, offline_pcm(model, random_codes(73, 2)), rtol=0, atol=ATOL)


def _bad_steps():
    ok = np.zeros((2, 16, 3), np.int64)
    big = ok.copy()
    big[1, 4, 2] = 5000
    negative = ok.copy()
    negative[0, 0, 1] = -3
    padded_bad = ok.copy()
    padded_bad[1, 2, 2] = 5000        # beyond row 1's length 2: never decoded, so accepted
    return [
        (np.zeros((2, 15, 3), np.int64), [0, 1], [3, 3]),   # codebooks
        (np.zeros((0, 16, 3), np.int64), [], []),           # empty batch
        (np.zeros((2, 16, 0), np.int64), [0, 1], [1, 1]),   # empty chunk
        (ok, [0, 1, 2], [3, 3]),                            # batch mismatch
        (ok, [0, 9], [3, 3]), (ok, [1, 1], [3, 3]),         # slot range, duplicates
        (ok, [0, 1], [0, 3]), (ok, [0, 1], [3, 4]),         # lengths
        (big, [0, 1], [3, 3]), (negative, [0, 1], [3, 3]),  # code values
        (padded_bad, [0, 1], [3, 2]),                       # fine
    ]


@pytest.mark.parametrize("case", range(len(_bad_steps())))
def test_host_array_checks_match_the_tensor_checks(case):
    """The runner checks numpy arrays (check_step_arrays); it must accept and refuse exactly what the
    decoder's tensor check does, with the same message."""
    from vocoder_service.codec.validation import check_step, check_step_arrays

    codes, slots, lengths = _bad_steps()[case]
    slots, lengths = np.array(slots, np.int64), np.array(lengths, np.int64)
    outcomes = []
    for check, wrap in ((check_step, torch.from_numpy), (check_step_arrays, np.asarray)):
        try:
            check(wrap(codes), wrap(slots), wrap(lengths), 16, 2048, 4)
            outcomes.append(None)
        except ValueError as exc:
            outcomes.append(str(exc))
    assert outcomes[0] == outcomes[1]
    assert (outcomes[0] is None) == (case == len(_bad_steps()) - 1)


def test_host_array_checks_refuse_float_codes_instead_of_truncating(model):
    runner = DecoderRunner(model, max_slots=2)
    with pytest.raises(ValueError, match="codes must have an integer dtype"):
        runner.decode(np.full((1, 16, 2), 1.5), np.array([0]), np.array([2]))
