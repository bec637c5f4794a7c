"""In-process vocoder engine tests with a stateful fake decoder (exact, causal, cheap).

The fake decoder's frame output depends on every earlier frame of its slot (a running sum), so any
state leak between slots, any padding that advances state, or any lost/duplicated frame changes the
streamed audio versus the offline reference.
"""
import random
import re

import numpy as np
import pytest

from vocoder_service.engine.batcher import ReadyRow, plan_batches
from vocoder_service.engine.chunk_policy import ChunkPolicy, batch_buckets
from vocoder_service.engine.config import VocoderEngineConfig
from vocoder_service.engine.engine import EngineError, VocoderEngine

SPF = 4  # samples per frame for the fake decoder


class FakeRunner:
    codebook_size = 2048

    def __init__(self, max_slots):
        self.state = np.zeros(max_slots)
        self.calls = []

    def reset(self, slots):
        self.state[list(slots)] = 0.0

    def decode(self, codes, slots, lengths):
        bs, _, t = codes.shape
        self.calls.append((bs, t))
        pcm = np.full((bs, t * SPF), np.nan, np.float32)   # padding stays NaN: must never be emitted
        for i in range(bs):
            s = self.state[slots[i]]
            for f in range(lengths[i]):
                s = 0.5 * s + codes[i, :, f].sum()
                pcm[i, f * SPF:(f + 1) * SPF] = s + np.arange(SPF)
            self.state[slots[i]] = s
        return pcm


def offline(codes):
    s, out = 0.0, []
    for f in range(len(codes)):
        s = 0.5 * s + codes[f].sum()
        out.append(s + np.arange(SPF))
    return np.concatenate(out).astype(np.float32) if out else np.zeros(0, np.float32)


def make_engine(max_slots=8, **kw):
    # a frame is 80 ms of audio, as in the real codec (12.5 frames/s): playback deadlines are real
    kw.setdefault("sample_rate_hz", int(SPF * 12.5))
    cfg = VocoderEngineConfig(max_slots=max_slots, samples_per_frame=SPF, **kw)
    clock = [0.0]
    eng = VocoderEngine(FakeRunner(max_slots), cfg, clock=lambda: clock[0])
    return eng, clock


def drain(eng, outs):
    for _ in range(10000):
        if not eng.has_work():
            break
        for o in eng.step():
            outs.setdefault(o.request_id, []).append(o)


def test_chunk_policy_ramp_and_buckets():
    p = ChunkPolicy(first_chunk_frames=2, steady_chunk_frames=25)
    assert [p.chunk_frames(n) for n in range(6)] == [2, 4, 8, 16, 25, 25]
    assert p.frame_buckets() == [1, 2, 4, 8, 16, 25]
    assert p.bucket_for(3) == 4 and p.bucket_for(17) == 25
    assert batch_buckets(48) == [1, 2, 4, 8, 16, 32, 48]
    with pytest.raises(ValueError, match="first_chunk_frames"):
        ChunkPolicy(first_chunk_frames=30, steady_chunk_frames=25)


def test_quick_first_chunk_only_while_few_streams_are_open():
    p = ChunkPolicy(first_chunk_frames=2, steady_chunk_frames=25, quick_first_chunk_frames=1, quick_first_max_streams=2)
    assert [p.chunk_frames(0, n) for n in (1, 2, 3, 64)] == [1, 1, 2, 2]
    assert p.chunk_frames(1, 1) == 4 and p.chunk_frames(0) == 2   # later chunks keep the ramp
    assert ChunkPolicy(2, 25, quick_first_max_streams=0).chunk_frames(0, 1) == 2   # 0: never
    with pytest.raises(ValueError, match="quick_first_chunk_frames"):
        ChunkPolicy(2, 25, quick_first_chunk_frames=3)
    # through the engine: a lone stream's audio starts at its first frame, a crowd's at its second
    eng, _ = make_engine(max_slots=8, chunk=p)
    eng.open("alone")
    eng.add_frames("alone", 0, np.ones((1, 16), np.int64))
    [first] = eng.step()
    assert first.num_frames == 1
    for rid in ("a", "b", "c"):
        eng.open(rid)
        eng.add_frames(rid, 0, np.ones((1, 16), np.int64))
    assert eng.step() == []   # 4 streams open: each waits for its second frame
    for rid in ("a", "b", "c"):
        eng.add_frames(rid, 1, np.ones((1, 16), np.int64))
    assert sorted(o.num_frames for o in eng.step()) == [2, 2, 2]


def test_plan_batches_every_row_once_and_merging_pays():
    p = ChunkPolicy(2, 25)
    rows = [ReadyRow(f"r{i}", i, n, True, False) for i, n in enumerate([1, 2, 2, 25, 25, 16, 3])]
    batches = plan_batches(rows, p, batch_buckets(8), launch_cost_row_frames=64)
    assert sorted(r.request_id for b in batches for r in b.rows) == sorted(r.request_id for r in rows)
    for b in batches:
        assert all(r.num_frames <= b.frames_bucket for r in b.rows) and b.batch_size <= 8
    # with a huge launch cost everything fits in one batch; with zero cost nothing merges and no
    # batch pads rows: each frame bucket's rows go in batch sizes that add up to them exactly
    assert len(plan_batches(rows, p, batch_buckets(8), 1e9)) == 1
    free = plan_batches(rows, p, batch_buckets(8), 0)
    assert all(b.batch_size in batch_buckets(8) for b in free)
    assert {b.frames_bucket for b in free} == {p.bucket_for(r.num_frames) for r in rows}


@pytest.mark.parametrize("num_rows, want", [(70, [64, 6]), (64, [64]), (5, [4, 1]), (256, [256]), (120, [64, 32, 16, 8])])
def test_a_group_past_a_captured_size_is_split_not_padded(num_rows, want):
    """70 steady rows replay a 64-row graph and an 8-row one (64 * 25 + 8 * 25 + 2 launches) instead
    of padding to the 128-row graph (128 * 25 + 1 launch): the vocoder's work grows with padded rows."""
    policy = ChunkPolicy(2, 25)
    sizes = batch_buckets(256)
    captured = [(b, t) for b in sizes for t in policy.frame_buckets()]

    def covering(bs, t):
        return min(((b, f) for b, f in captured if b >= bs and f >= t), key=lambda s: s[0] * s[1], default=None)

    rows = [ReadyRow(f"r{i}", i, 25, True, False) for i in range(num_rows)]
    cache = {}
    batches = plan_batches(rows, policy, sizes, 64.0, covering, cache)
    assert [b.batch_size for b in batches] == want
    assert [r.request_id for b in batches for r in b.rows] == [r.request_id for r in rows]   # order kept
    assert cache == {(num_rows, 25): want}
    assert [b.batch_size for b in plan_batches(rows, policy, sizes, 64.0, covering, cache)] == want


@pytest.mark.parametrize("seed", range(4))
def test_random_interleavings_equal_offline(seed):
    rng = random.Random(seed)
    eng, clock = make_engine(max_slots=6)
    want, outs, seqs, active, pending = {}, {}, {}, set(), list(range(20))
    while pending or active:
        if pending and eng.num_active < 6 and rng.random() < 0.5:
            rid = f"req{pending.pop()}"
            n = rng.randint(1, 60)
            want[rid] = np.random.default_rng(rng.randint(0, 1 << 30)).integers(0, 2048, (n, 16))
            eng.open(rid)
            seqs[rid] = (0, 0)
            active.add(rid)
        for rid in list(active):
            seq, sent = seqs[rid]
            if rng.random() < 0.6:
                k = min(rng.randint(1, 5), len(want[rid]) - sent)
                final = sent + k == len(want[rid])
                eng.add_frames(rid, seq, want[rid][sent:sent + k], is_final=final)
                seqs[rid] = (seq + 1, sent + k)
                if final:
                    active.discard(rid)
        clock[0] += rng.random() * 0.1
        for o in eng.step():
            outs.setdefault(o.request_id, []).append(o)
    drain(eng, outs)
    assert eng.num_active == 0 and eng.slots.num_free == 6
    for rid, codes in want.items():
        chunks = outs[rid]
        assert [c.seq for c in chunks] == list(range(len(chunks)))
        assert chunks[-1].is_final and not any(c.is_final for c in chunks[:-1])
        got = np.concatenate([c.pcm for c in chunks])
        assert np.array_equal(got, offline(codes)), rid
        offsets = np.cumsum([0] + [len(c.pcm) for c in chunks[:-1]])
        assert [c.sample_offset for c in chunks] == list(offsets)


def test_context_frames_prime_but_are_not_emitted():
    eng, _ = make_engine()
    rng = np.random.default_rng(0)
    ctx, gen = rng.integers(0, 2048, (30, 16)), rng.integers(0, 2048, (7, 16))
    eng.open("a")
    eng.add_frames("a", 0, ctx, is_context=True)
    eng.add_frames("a", 1, gen, is_final=True)
    outs = {}
    drain(eng, outs)
    got = np.concatenate([o.pcm for o in outs["a"]])
    assert np.array_equal(got, offline(np.concatenate([ctx, gen]))[30 * SPF:])


def test_context_rows_are_refused_out_of_place_or_beyond_their_limits_and_nothing_changes():
    eng, _ = make_engine(max_context_frames=8)
    rows = np.random.default_rng(2).integers(0, 2048, (6, 16))
    eng.open("a")
    for num_context, code, problem in [(-1, "INVALID_ARGUMENT", "num_context_frames -1 not in [0, 6]"),
                                       (7, "INVALID_ARGUMENT", "num_context_frames 7 not in [0, 6]")]:
        with pytest.raises(EngineError, match=re.escape(problem)) as e:
            eng.add_frames("a", 0, rows, num_context_frames=num_context)
        assert e.value.code == code
    eng.add_frames("a", 0, rows, num_context_frames=4)   # 4 context rows, then 2 audio rows
    with pytest.raises(EngineError, match="context frames must come before audio frames") as e:
        eng.add_frames("a", 1, rows[:2], num_context_frames=1)
    assert e.value.code == "FAILED_PRECONDITION"
    stream = eng.streams["a"]
    assert (stream.next_seq, stream.num_context_pending, stream.num_pending) == (1, 4, 2)
    eng.add_frames("a", 1, rows[:3])   # plain audio rows still go on after the refusals
    assert (stream.next_seq, stream.num_pending) == (2, 5)
    eng.open("b")
    eng.add_frames("b", 0, rows, is_context=True)
    with pytest.raises(EngineError, match="more than 8 context frames") as e:
        eng.add_frames("b", 1, rows, is_context=True)   # 6 + 6 > 8
    assert e.value.code == "INVALID_ARGUMENT" and eng.streams["b"].num_context_pending == 6


def test_first_chunk_small_then_ramps():
    eng, _ = make_engine(chunk=ChunkPolicy(quick_first_max_streams=0))   # the plain ramp (quick chunk: above)
    eng.open("a")
    eng.add_frames("a", 0, np.ones((2, 16), np.int64))
    [o] = eng.step()
    assert len(o.pcm) == 2 * SPF and not o.is_final
    eng.add_frames("a", 1, np.ones((3, 16), np.int64))
    assert eng.step() == []            # 3 < next chunk size 4, no timeout yet


def test_a_final_chunk_says_when_the_talker_finished_and_the_server_times_the_tail():
    """The slot's tail after the talker is done: the final chunk carries when the talker's final
    frames came; the server's window times it to the chunk's send (GetStats tail_time)."""
    from vocoder_service.server.stats import ServerStats

    eng, clock = make_engine(chunk=ChunkPolicy(quick_first_max_streams=0))
    eng.open("a")
    eng.add_frames("a", 0, np.ones((2, 16), np.int64))
    [first] = eng.step()
    assert first.talker_done_s is None            # not final: nothing to time yet
    clock[0] = 1.0
    eng.add_frames("a", 1, np.ones((3, 16), np.int64), is_final=True)
    clock[0] = 1.5                                # the last frames waited 0.5 s for their decode
    outs = []
    drain(eng, {"a": outs})
    assert outs[-1].is_final and outs[-1].talker_done_s == 1.0
    assert all(o.talker_done_s is None for o in outs[:-1])
    stats = ServerStats()
    for o in [first] + outs:
        stats.record_sent(o, 1.6, 50)
    tail = stats.tail_time.summary()
    assert tail["count"] == 1 and tail["max_ms"] == pytest.approx(600.0)


def test_slow_talker_timeout_flushes_partial_chunk():
    eng, clock = make_engine(chunk=ChunkPolicy(quick_first_max_streams=0))
    eng.open("a")
    eng.add_frames("a", 0, np.ones((1, 16), np.int64))
    assert eng.step() == []
    clock[0] += 0.25
    [o] = eng.step()
    assert len(o.pcm) == SPF


def test_faults_are_isolated():
    eng, clock = make_engine(max_slots=2, talker_timeout_s=5.0)
    eng.open("good")
    eng.open("bad")
    with pytest.raises(EngineError) as e:
        eng.open("third")
    assert e.value.code == "RESOURCE_EXHAUSTED"
    with pytest.raises(EngineError) as e:
        eng.add_frames("nope", 0, np.zeros((1, 16), np.int64))
    assert e.value.code == "NOT_FOUND"
    for bad, msg in [(np.zeros((2, 15), np.int64), "frames must be"), (np.full((1, 16), 2048), "codes must lie"),
                     (np.full((1, 16), -1), "codes must lie"), (np.zeros((1, 16), np.float32), "integers")]:
        with pytest.raises(EngineError, match=msg):
            eng.add_frames("bad", 0, bad)
    codes = np.random.default_rng(1).integers(0, 2048, (9, 16))
    eng.add_frames("good", 0, codes[:4])
    eng.add_frames("good", 0, codes[:4])               # duplicate: dropped
    assert eng.stats["duplicates_dropped"] == 1
    with pytest.raises(EngineError) as e:
        eng.add_frames("bad", 3, codes)                # gap: request fails and is freed
    assert e.value.code == "DATA_LOSS" and "bad" not in eng.streams
    assert eng.abort("bad") is False                   # already gone: no-op
    eng.add_frames("good", 1, codes[4:], is_final=True)
    outs = {}
    drain(eng, outs)
    assert np.array_equal(np.concatenate([o.pcm for o in outs["good"]]), offline(codes))
    eng.open("silent")
    clock[0] += 6.0
    [err] = eng.expire()
    assert err.code == "UNAVAILABLE" and err.request_id == "silent" and eng.num_active == 0


def test_no_slot_leaks_after_thousands_of_requests():
    eng, _ = make_engine(max_slots=4)
    rng = np.random.default_rng(2)
    for i in range(3000):
        rid = f"r{i}"
        eng.open(rid)
        kind = i % 4
        if kind == 0:
            eng.add_frames(rid, 0, rng.integers(0, 2048, (3, 16)), is_final=True)
            drain(eng, {})
        elif kind == 1:
            eng.abort(rid, "client cancelled")
        elif kind == 2:
            with pytest.raises(EngineError):
                eng.add_frames(rid, 5, rng.integers(0, 2048, (1, 16)))
        else:
            eng.add_frames(rid, 0, np.zeros((0, 16), np.int64), is_final=True)
            drain(eng, {})
        assert eng.num_active == 0
        assert len(eng._opened_unreset) <= 4   # resets owed to slots opened without a decode since: bounded
    assert eng.slots.num_free == 4 and eng.slots.num_used == 0


class OrderRunner(FakeRunner):
    """FakeRunner that logs each reset and decode, in order."""

    def __init__(self, max_slots, fail_reset=False):
        super().__init__(max_slots)
        self.log = []
        self.fail_reset = fail_reset

    def reset(self, slots):
        self.log.append(("reset", sorted(slots)))
        if self.fail_reset:
            raise RuntimeError("device fault")
        super().reset(slots)

    def decode(self, codes, slots, lengths):
        self.log.append(("decode", sorted(int(s) for s in slots)))
        return super().decode(codes, slots, lengths)


def test_streams_opened_between_steps_share_one_reset_before_the_first_decode():
    # a reset per open waited on the device once per stream: a burst of arrivals held every
    # running stream's next chunk for the whole burst
    cfg = VocoderEngineConfig(max_slots=8, samples_per_frame=SPF, sample_rate_hz=int(SPF * 12.5))
    runner = OrderRunner(8)
    eng = VocoderEngine(runner, cfg, clock=lambda: 0.0)
    rng = np.random.default_rng(3)
    codes = {f"r{i}": rng.integers(0, 2048, (6, 16)) for i in range(6)}
    for rid in list(codes)[:5]:
        eng.open(rid)
    assert runner.log == []                        # nothing touches the device at open
    for rid in list(codes)[:5]:
        eng.add_frames(rid, 0, codes[rid], is_final=True)
    outs = {}
    for o in eng.step():
        outs.setdefault(o.request_id, []).append(o)
    assert runner.log[0] == ("reset", [0, 1, 2, 3, 4]) and [e[0] for e in runner.log[1:]] == ["decode"] * (len(runner.log) - 1)
    # a stream finished, its slot taken by a new one: that slot is reset again before it is decoded
    drain(eng, outs)
    runner.state[:] = 99.0                         # stale state a missing reset would leak into r5's audio
    eng.open("r5")
    eng.add_frames("r5", 0, codes["r5"], is_final=True)
    before = len(runner.log)
    drain(eng, outs)
    assert runner.log[before][0] == "reset" and eng.streams == {}
    for rid, c in codes.items():
        assert np.array_equal(np.concatenate([o.pcm for o in outs[rid]]), offline(c)), rid


def test_a_failed_reset_fails_only_the_new_streams():
    cfg = VocoderEngineConfig(max_slots=4, samples_per_frame=SPF, sample_rate_hz=int(SPF * 12.5))
    runner = OrderRunner(4)
    eng = VocoderEngine(runner, cfg, clock=lambda: 0.0)
    codes = np.random.default_rng(4).integers(0, 2048, (8, 16))
    eng.open("old")
    eng.add_frames("old", 0, codes[:4])
    outs = {}
    for o in eng.step():
        outs.setdefault(o.request_id, []).append(o)
    runner.fail_reset = True
    eng.open("new")
    eng.add_frames("new", 0, codes[:4], is_final=True)
    eng.add_frames("old", 1, codes[4:], is_final=True)
    sent = []
    for o in eng.step(on_outputs=sent.extend):
        outs.setdefault(o.request_id, []).append(o)
    [err] = outs["new"]
    assert err.code == "INTERNAL" and "reset failed" in err.message and err in sent
    runner.fail_reset = False
    drain(eng, outs)
    assert np.array_equal(np.concatenate([o.pcm for o in outs["old"]]), offline(codes))
    assert eng.num_active == 0 and eng.slots.num_free == 4
