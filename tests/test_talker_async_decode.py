"""The talker engine with async_decode: step N+1 is queued before step N's codes are read back.

The engine tests of test_talker_engine.py run again in this mode (same codes, same finish
reasons, no slot leak); the tests below check what is particular to it: the order of launches and
reads (one read per step, after the next launch), rows launched for a stream that has ended by the
time they are read (EOS, abort, frame limit) are dropped, and the slot such a row wrote to serves
its next owner as if fresh.
"""
from __future__ import annotations

import numpy as np
import pytest

import test_talker_engine_support as support
from talker_service.engine import FINISH_EOS, FINISH_LENGTH
from test_talker_engine import (  # noqa: F401 - rerun here with async_decode on
    _one_thread, engine, test_admit_names_who_starts_and_leaves_the_codes_as_step_alone_gives,
    test_max_context_ends_with_context_reason_and_long_prompt_fails,
    test_no_slot_or_cache_leak_after_thousands_of_requests,
    test_parked_request_does_not_stall_others_and_token_by_token_equals_all_at_once,
    test_request_waiting_for_its_first_text_lets_others_prefill, test_second_frame_time_shows_the_wait_for_the_second_text_token,
    test_staggered_batching_equals_each_request_alone, test_text_budget_ends_a_runaway_request_and_a_streamed_text_grows_it)
from test_talker_engine_support import Collector, add, make_engine, run_until_idle, text_ids


@pytest.fixture(scope="module", autouse=True)
def _async_decode():
    support.ENGINE_DEFAULTS["async_decode"] = True
    yield
    support.ENGINE_DEFAULTS.pop("async_decode")


class Spy:
    """Wraps runner.launch_decode: logs ("launch", k) and ("read", k) in order, and can turn the
    codes of chosen (request id, frame index) rows into EOS when they are read."""

    def __init__(self, engine, eos_at: dict | None = None) -> None:
        self.engine, self.eos_at, self.log = engine, eos_at or {}, []
        self.rows_by_request: dict = {}
        runner = engine.runner
        self.launch = runner.launch_decode
        runner.launch_decode = self.launch_decode

    def launch_decode(self, slots, positions, num_frames, text_ids):
        k = sum(1 for event, _ in self.log if event == "launch")
        self.log.append(("launch", k))
        owners = {r.slot: r.request_id for r in self.engine.scheduler.running.values()}
        rids = [owners[s] for s in slots]
        for rid, frame in zip(rids, num_frames):
            self.rows_by_request.setdefault(rid, []).append(frame)
        pending, spy = self.launch(slots, positions, num_frames, text_ids), self

        class Read:
            def wait(self, clock=None):
                spy.log.append(("read", k))
                codes = pending.wait(clock).copy()
                for i, (rid, frame) in enumerate(zip(rids, num_frames)):
                    if spy.eos_at.get(rid) == frame:
                        codes[i, 0] = spy.engine.vocab.ids.codec_eos
                return codes
        return Read()


def test_the_next_step_is_launched_before_the_previous_one_is_read():
    eng = make_engine(max_slots=2)
    assert eng.async_decode
    spy = Spy(eng)
    add(eng, "a", text_ids(1, 6), 1, max_new_tokens=8)
    add(eng, "b", text_ids(2, 6), 2, max_new_tokens=8)
    got = Collector()
    run_until_idle(eng, got)
    assert len(got.codes("a")) == len(got.codes("b")) == 7
    launches = [k for event, k in spy.log if event == "launch"]
    reads = [k for event, k in spy.log if event == "read"]
    assert reads == launches   # every launched step is read once, in order
    # launch 0, then (launch k+1, read k) ... : each read comes after the next step is queued
    for k in reads[:-1]:
        assert spy.log.index(("launch", k + 1)) < spy.log.index(("read", k))
    # frames 1..6 of each stream, each launched once: no row past the frame limit (max_new_tokens - 1)
    assert spy.rows_by_request == {"a": list(range(1, 7)), "b": list(range(1, 7))}


def test_a_decode_in_flight_is_read_even_when_every_stream_is_parked():
    eng = make_engine(max_slots=2)
    got = Collector()
    feed = add(eng, "drip", text_ids(3, 3), 3, close=False, max_new_tokens=20)
    in_flight_only = 0   # steps run only to read a decode launched before the stream parked
    for _ in range(8):   # its three text tokens, then it parks
        if not eng.has_runnable():
            break
        in_flight_only += eng._launched is not None and not any(
            r.feed.is_step_ready for r in eng.scheduler.running.values())
        got.take(eng.step())
    assert in_flight_only == 1
    assert not eng.has_runnable() and eng._launched is None and eng._to_read is None
    parked_frames = len(got.codes("drip"))
    assert parked_frames >= 2
    feed.push(text_ids(4, 3))
    feed.close()
    run_until_idle(eng, got)
    assert got.final["drip"].finish_reason
    sync = make_engine(max_slots=2, async_decode=False)
    expected = Collector()
    sync_feed = add(sync, "drip", text_ids(3, 3), 3, close=False, max_new_tokens=20)
    for _ in range(8):
        if not sync.has_runnable():
            break
        expected.take(sync.step())
    sync_feed.push(text_ids(4, 3))
    sync_feed.close()
    run_until_idle(sync, expected)
    assert np.array_equal(got.codes("drip"), expected.codes("drip"))


@pytest.mark.parametrize("graphs", ["off", "emulate"])
def test_eos_with_the_next_frame_in_flight_drops_that_row_and_the_slot_serves_the_next_stream(graphs):
    """The tiny checkpoint never samples EOS, so the spy turns frame 3 of "a" into EOS. Its frame 4
    is on the device by then: that row is dropped, "a" ends with 3 frames as without async, and "c",
    which gets a's slot while frame 4's row was written there, decodes as it does alone."""
    runs = {}
    for is_async in (False, True):
        eng = make_engine(max_slots=2, decode_graphs=graphs, async_decode=is_async)
        spy = Spy(eng, eos_at={"a": 3})
        got = Collector()
        add(eng, "a", text_ids(5, 6), 5)
        add(eng, "b", text_ids(6, 6), 6, max_new_tokens=12)
        add(eng, "c", text_ids(7, 6), 7)   # queued: both slots are taken
        run_until_idle(eng, got)
        eng.scheduler.check_invariants()
        runs[is_async] = (got, spy)
    got, spy = runs[True]
    assert got.final["a"].finish_reason == FINISH_EOS and len(got.codes("a")) == 3
    assert spy.rows_by_request["a"] == [1, 2, 3, 4]   # frame 4 was launched, never delivered
    assert got.final["b"].finish_reason == FINISH_LENGTH
    for rid in ("a", "b", "c"):
        assert np.array_equal(got.codes(rid), runs[False][0].codes(rid)), f"{rid} differs with async decode"
    alone = make_engine(max_slots=2, decode_graphs=graphs)
    expected = Collector()
    add(alone, "c", text_ids(7, 6), 7)
    run_until_idle(alone, expected)
    assert np.array_equal(got.codes("c"), expected.codes("c"))


def test_abort_with_a_frame_in_flight_sends_nothing_more_and_frees_the_slot():
    eng = make_engine(max_slots=1, max_queued=4)
    got = Collector()
    add(eng, "a", text_ids(8, 6), 8, max_new_tokens=30)
    for _ in range(3):
        got.take(eng.step())
    assert eng._launched is not None and eng.scheduler.running["a"].frames_in_flight == 1
    frames_before = len(got.codes("a"))
    assert eng.abort("a")
    add(eng, "b", text_ids(9, 6), 9)
    run_until_idle(eng, got)
    assert len(got.codes("a")) == frames_before and "a" not in got.final
    assert eng.scheduler.free_slots == [0] and not eng._all_launched
    alone = make_engine(max_slots=1)
    expected = Collector()
    add(alone, "b", text_ids(9, 6), 9)
    run_until_idle(alone, expected)
    assert np.array_equal(got.codes("b"), expected.codes("b"))


def test_prefill_phase_launches_the_decode_and_sends_first_frames_before_reading_it():
    """A stream that arrives while another decodes: its first frame comes out of prefill_phase,
    which has queued this step's decode (the newcomer's frame 1 included) but read nothing of it."""
    eng = make_engine(max_slots=4)
    add(eng, 0, text_ids(0, 6), 60)
    got = Collector()
    got.take(eng.step())
    got.take(eng.step())
    add(eng, 1, text_ids(1, 6), 61)
    launched_before = eng.stats.num_decode_steps
    first = eng.prefill_phase()
    assert eng.stats.num_decode_steps == launched_before + 1
    assert [out.request_id for out in first] == [1] and len(first[0].codes) == 1
    assert {r.request_id for r in eng._launched.requests} == {0, 1}
    got.take(first)
    got.take(eng.decode_phase())
    run_until_idle(eng, got)
    sync = make_engine(max_slots=4, async_decode=False)
    for rid in (0, 1):
        expected = Collector()
        add(sync, rid, text_ids(rid, 6), 60 + rid)
        run_until_idle(sync, expected)
        assert np.array_equal(got.codes(rid), expected.codes(rid))
