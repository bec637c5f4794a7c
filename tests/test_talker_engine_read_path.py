"""The decode read-back's one-pass path (TalkerEngine._read_decode) against the per-frame path it
shortcuts (_read_frame -> _accept -> _collect for every row): same frames, seqs, finals and finish
reasons, with and without async decode, through EOS, text budgets, streamed text, aborts and slot
reuse. Also the decode-gap statistic, now kept from a per-request step number."""
from __future__ import annotations

import types

import numpy as np
import pytest

from talker_service.engine import FINISH_BUDGET, FINISH_EOS, TalkerEngine
from test_talker_engine_support import Collector, add, make_engine, text_ids
from test_vocoder_process_support import one_cpu_thread


@pytest.fixture(autouse=True)
def _one_thread():
    with one_cpu_thread():
        yield


def read_every_row_alone(engine: TalkerEngine, launched) -> list:
    """The per-frame path for every row: what _read_decode did before its one-pass branch."""
    codes = launched.codes.wait(engine.runner.wait_clock)
    for request, row in zip(launched.requests, codes):
        engine._read_frame(request, row)
    return []


def inject_eos(engine: TalkerEngine, eos_at: dict) -> None:
    """Codes of (request id, frame index) pairs in `eos_at` read back as the codec EOS."""
    launch = engine.runner.launch_decode
    eos = engine.vocab.ids.codec_eos

    def launch_decode(slots, positions, num_frames, text_ids_):
        owners = {r.slot: r.request_id for r in engine.scheduler.running.values()}
        rids = [owners[s] for s in slots]
        pending = launch(slots, positions, num_frames, text_ids_)

        class Read:
            def wait(self, clock=None):
                codes = pending.wait(clock).copy()
                for i, (rid, frame) in enumerate(zip(rids, num_frames)):
                    if eos_at.get(rid) == frame:
                        codes[i, 0] = eos
                return codes
        return Read()
    engine.runner.launch_decode = launch_decode


def workload(engine: TalkerEngine) -> Collector:
    """Six requests on four slots: whole texts, one streamed a token every other step, one that
    hits EOS mid-stream (its next frame may be in flight), one aborted, late arrivals reusing slots."""
    inject_eos(engine, {"eos": 5})
    got = Collector()
    add(engine, "whole", text_ids(1, 3), 11, max_new_tokens=20)
    drip_ids = text_ids(2, 6)
    feed = add(engine, "drip", drip_ids[:1], 12, close=False, max_new_tokens=400)
    add(engine, "eos", text_ids(3, 2), 13, max_new_tokens=30)
    add(engine, "abort", text_ids(4, 2), 14, max_new_tokens=30)
    pending = drip_ids[1:]
    for tick in range(300):
        if tick == 4:
            engine.abort("abort")
        if tick == 6:
            add(engine, "late", text_ids(5, 2), 15, max_new_tokens=9)
            add(engine, "short", text_ids(6, 1), 16, max_new_tokens=80, min_new_tokens=0)
        if tick % 2 == 1:
            if pending:
                feed.push([pending.pop(0)])
            elif not feed.is_closed:
                feed.close()
        got.take(engine.step())
        if tick > 6 and not engine.has_work():
            break
    engine.scheduler.check_invariants()
    return got


@pytest.mark.parametrize("async_decode", [False, True])
def test_the_one_pass_read_gives_what_reading_each_row_alone_gives(async_decode):
    fast = make_engine(max_slots=4, max_seq_len=256, async_decode=async_decode)
    slow = make_engine(max_slots=4, max_seq_len=256, async_decode=async_decode)
    slow._read_decode = types.MethodType(read_every_row_alone, slow)
    got, want = workload(fast), workload(slow)
    assert set(got.final) == set(want.final) == {"whole", "drip", "eos", "late", "short"}
    for rid, final in want.final.items():
        assert got.final[rid].finish_reason == final.finish_reason, rid
        assert got.next_seq[rid] == want.next_seq[rid], rid
        np.testing.assert_array_equal(got.codes(rid), want.codes(rid))
    assert got.final["eos"].finish_reason == FINISH_EOS and len(got.codes("eos")) == 5
    assert got.final["drip"].finish_reason == FINISH_BUDGET
    assert "abort" not in got.final and "abort" not in got.errors
    assert fast.stats.num_frames_generated == slow.stats.num_frames_generated


def test_usual_rows_leave_as_one_frame_views_of_the_step_read_back():
    engine = make_engine(max_slots=3, max_seq_len=256, async_decode=True)
    for i in range(3):
        add(engine, f"r{i}", text_ids(20 + i, 4), 30 + i, max_new_tokens=60)
    outs = []
    for _ in range(6):
        engine.prefill_phase()
        outs = engine.decode_phase()
    assert len(outs) == 3
    # views of one read-back array: a copy per row would have no base (then all bases would be None)
    base = outs[0].codes.base
    assert base is not None and all(out.codes.base is base for out in outs)
    assert all(out.codes.shape == (1, 16) and not out.is_final for out in outs)
    frames = {out.request_id: out.first_frame_index for out in outs}
    assert frames == {r.request_id: r.num_frames - 1 for r in engine.scheduler.running.values()}


def test_decode_gap_is_kept_only_between_steps_that_share_a_stream():
    now = [0.0]
    engine = make_engine(max_slots=2, max_seq_len=256)
    engine.clock = lambda: now[0]
    got = Collector()

    def run_alone(rid: str, seed: int) -> None:   # 4 frames: frame 0 from the prefill, 3 decode steps
        add(engine, rid, text_ids(seed, 2), seed, max_new_tokens=5, min_new_tokens=0)
        for _ in range(10):
            now[0] += 0.010
            got.take(engine.step())
            if not engine.has_work():
                break
        assert len(got.codes(rid)) == 4 and got.final[rid].finish_reason

    run_alone("a", 40)
    assert engine.stats.num_decode_steps == 3
    assert engine.stats.decode_gap.summary()["count"] == 2   # the first step has no previous one
    run_alone("b", 42)   # its first decode step shares no stream with a's last one: no gap for it
    assert engine.stats.num_decode_steps == 6
    gaps = engine.stats.decode_gap.summary()
    assert gaps["count"] == 4 and gaps["max_ms"] == pytest.approx(10.0)
