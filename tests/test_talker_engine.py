"""The talker engine in-process (tiny CustomVoice checkpoint, CPU, no sockets).

A request's codes depend only on its own inputs and seed: alone, with batch mates arriving at
other times, padded to a bucket with scratch rows, or with its text arriving token by token.
"""
from __future__ import annotations

import numpy as np
import pytest

from talker_service.engine import FINISH_CONTEXT, FINISH_LENGTH
from test_talker_engine_support import SPEAKERS, Collector, add, make_engine, run_until_idle, text_ids
from test_vocoder_process_support import one_cpu_thread


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    with one_cpu_thread():
        yield


@pytest.fixture(scope="module")
def engine():
    return make_engine(max_slots=4)


def alone(engine, rid, ids, seed, **kw) -> np.ndarray:
    got = Collector()
    add(engine, rid, ids, seed, **kw)
    run_until_idle(engine, got)
    assert rid in got.final
    return got.codes(rid)


CASES = [  # (text length, seed, greedy, streaming text mode, speaker)
    (6, 11, False, True, "vivian"), (3, 12, True, True, "ryan"), (9, 13, False, False, "serena"),
    (4, 14, True, False, "eric"), (7, 15, False, True, "ryan"), (5, 16, False, True, "vivian"),
]


@pytest.mark.parametrize("pad", [False, True])
def test_staggered_batching_equals_each_request_alone(engine, pad):
    expected = {i: alone(engine, f"a{i}", text_ids(i, n), seed, greedy=greedy, streaming=streaming, speaker=spk)
                for i, (n, seed, greedy, streaming, spk) in enumerate(CASES)}
    assert sum(len(c) for c in expected.values()) > 20
    batched = make_engine(max_slots=4, pad_to_buckets=pad, batch_buckets=(2, 4))
    got = Collector()
    arrivals = {0: [0, 1], 2: [2], 3: [3, 4], 7: [5]}   # step -> cases arriving; 6 requests share 4 slots
    for tick in range(200):
        for i in arrivals.get(tick, []):
            n, seed, greedy, streaming, spk = CASES[i]
            add(batched, i, text_ids(i, n), seed, greedy=greedy, streaming=streaming, speaker=spk)
        if tick > max(arrivals) and not batched.has_work():
            break
        got.take(batched.step())
    for i, codes in expected.items():
        assert np.array_equal(got.codes(i), codes), f"request {i} differs when batched (pad={pad})"
    assert max(batched.stats.batch_size_histogram) >= 3
    batched.scheduler.check_invariants()


def test_parked_request_does_not_stall_others_and_token_by_token_equals_all_at_once(engine):
    ids = text_ids(40, 5)
    expected = alone(engine, "whole", ids, 7)
    expected_other = alone(engine, "other-alone", text_ids(41, 8), 8, max_new_tokens=30)
    got = Collector()
    feed = add(engine, "drip", ids[:1], 7, close=False)
    add(engine, "other", text_ids(41, 8), 8, max_new_tokens=30)
    pending, parked_steps = ids[1:], 0
    for tick in range(300):
        if not engine.has_work():
            break
        if tick % 4 == 3:   # one token every fourth step, then end of input
            if pending:
                feed.push([pending.pop(0)])
            elif not feed.is_closed:
                feed.close()
        before = len(got.frames.get("other", []))
        parked = engine.load()["num_requests_parked"]
        got.take(engine.step())
        if parked and len(got.frames.get("other", [])) > before:
            parked_steps += 1
    assert parked_steps > 0, "the other request never advanced while one was parked"
    assert np.array_equal(got.codes("drip"), expected)
    assert np.array_equal(got.codes("other"), expected_other)


def test_request_waiting_for_its_first_text_lets_others_prefill(engine):
    got = Collector()
    feed = add(engine, "silent", None, 1, close=False)
    add(engine, "talks", text_ids(2, 3), 2, max_new_tokens=5)
    for _ in range(10):
        got.take(engine.step())
    assert "talks" in got.final and "silent" not in got.frames
    assert engine.load()["num_requests_queued"] == 1
    feed.push(text_ids(3, 2))
    feed.close()
    run_until_idle(engine, got)
    assert "silent" in got.final


def test_max_context_ends_with_context_reason_and_long_prompt_fails(engine):
    small = make_engine(max_slots=2, max_seq_len=24)
    got = Collector()
    add(small, "fits", text_ids(5, 2), 5, greedy=True, max_new_tokens=100, min_new_tokens=100)   # no EOS
    add(small, "too-long", text_ids(6, 30), 6, streaming=False)
    run_until_idle(small, got)
    assert got.final["fits"].finish_reason == FINISH_CONTEXT
    # the last frame was decoded at position 23, the slot's last
    assert got.final["fits"].num_prompt_tokens + len(got.codes("fits")) - 1 == 24
    error = got.errors["too-long"]
    assert error.code == "OUT_OF_RANGE" and "does not fit the context of 24" in error.message
    small.scheduler.check_invariants()
    assert len(small.scheduler.free_slots) == 2


def test_no_slot_or_cache_leak_after_thousands_of_requests():
    engine = make_engine(max_slots=8, max_seq_len=64, max_queued=4)
    got, rng, live = Collector(), np.random.default_rng(0), []
    num_requests = 1000
    for i in range(num_requests):
        add(engine, i, text_ids(i, int(rng.integers(1, 4))), i, speaker=SPEAKERS[i % 4],
            max_new_tokens=int(rng.integers(1, 5)))
        live.append(i)
        if i % 7 == 3:
            engine.abort(live[-2])
        if i % 11 == 5 and engine.fail(live[-3], "UNAVAILABLE", "vocoder lost") is not None:
            got.errors[live[-3]] = None
        while engine.scheduler.num_live >= 12:
            got.take(engine.step())
    run_until_idle(engine, got)
    engine.scheduler.check_invariants()
    assert len(engine.scheduler.free_slots) == 8 and engine.scheduler.num_live == 0
    s = engine.stats
    assert s.num_started == num_requests
    assert s.num_finished + s.num_aborted + s.num_failed == num_requests
    assert len(got.final) == s.num_finished and s.num_aborted > 100
    assert all(out.finish_reason in ("eos", FINISH_LENGTH) for out in got.final.values())


def test_text_budget_ends_a_runaway_request_and_a_streamed_text_grows_it():
    """The tiny checkpoint never samples EOS: without the budget each would run to max_new_tokens."""
    from service_common.frame_budget import text_budget_frames
    from talker_service.engine import FINISH_BUDGET

    budget_engine = make_engine(max_slots=2, max_seq_len=256)
    got = Collector()
    drip_ids = text_ids(50, 12)
    feed = add(budget_engine, "drip", drip_ids[:1], 3, close=False, max_new_tokens=2000)
    add(budget_engine, "short", text_ids(51, 2), 4, max_new_tokens=2000)
    pending = drip_ids[1:]
    for tick in range(400):
        if not budget_engine.has_work():
            break
        if tick % 2 == 1:   # one token every other step, then end of input
            if pending:
                feed.push([pending.pop(0)])
            elif not feed.is_closed:
                feed.close()
        got.take(budget_engine.step())
    assert got.final["short"].finish_reason == FINISH_BUDGET
    assert len(got.codes("short")) == text_budget_frames(2)
    # the budget of the whole streamed text, not of the one token it started with
    assert got.final["drip"].finish_reason == FINISH_BUDGET
    assert len(got.codes("drip")) == text_budget_frames(12) > text_budget_frames(1)
    budget_engine.scheduler.check_invariants()


def test_admit_names_who_starts_and_leaves_the_codes_as_step_alone_gives(engine):
    """The server calls admit() before step() to prime clones' vocoders: same outputs, each
    request named once, when its slot is given (here 2 slots for 3 requests)."""
    expected = {i: alone(engine, f"s{i}", text_ids(i, 5), 40 + i) for i in range(3)}
    two = make_engine(max_slots=2)
    for i in range(3):
        add(two, i, text_ids(i, 5), 40 + i)
    got, admitted = Collector(), []
    for _ in range(200):
        if not two.has_work():
            break
        admitted.append(two.admit())
        got.take(two.step())
    assert admitted[0] == [0, 1] and sorted(sum(admitted, [])) == [0, 1, 2]
    assert 2 in next(a for a in admitted if a and a != [0, 1])   # named when a slot freed, not before
    for i, codes in expected.items():
        assert np.array_equal(got.codes(i), codes), f"request {i} differs with admit() before step()"


def test_first_frame_leaves_in_the_prefill_phase_before_the_running_streams_decode(engine):
    """The server sends prefill_phase()'s outputs before decode_phase() runs: a stream that arrives
    while others decode gets its first frame out one decode step sooner, with the same codes."""
    expected = {i: alone(engine, f"p{i}", text_ids(i, 6), 60 + i) for i in range(2)}
    phased = make_engine(max_slots=4)
    add(phased, 0, text_ids(0, 6), 60)
    got = Collector()
    got.take(phased.step())
    got.take(phased.step())                       # stream 0 is decoding
    add(phased, 1, text_ids(1, 6), 61)
    decoded_before = phased.stats.num_decode_steps
    first = phased.prefill_phase()
    assert phased.stats.num_decode_steps == decoded_before   # no decode step ran yet
    by_id = {out.request_id: out for out in first}
    assert list(by_id) == [1] and len(by_id[1].codes) == 1 and by_id[1].seq == 0
    got.take(first)
    rest = phased.decode_phase()
    assert phased.stats.num_decode_steps == decoded_before + 1 and 0 in {out.request_id for out in rest}
    got.take(rest)
    run_until_idle(phased, got)
    for i, codes in expected.items():
        assert np.array_equal(got.codes(i), codes), f"request {i} differs when stepped in two phases"
    phased.scheduler.check_invariants()


@pytest.mark.parametrize("graphs", ["off", "emulate"])
def test_each_decode_returns_codes_of_its_own(graphs):
    """The engine hands out a step's frames as row views of runner.decode's array, so that array must
    not be memory a later step writes again (a graph's static output read back as a view would be)."""
    runner = make_engine(max_slots=2, decode_graphs=graphs).runner
    first = runner.decode([0, 1], [3, 4], [1, 1], [300, 301])
    snapshot = first.copy()
    second = runner.decode([0, 1], [4, 5], [2, 2], [302, 303])
    assert not np.shares_memory(first, second)
    assert np.array_equal(first, snapshot)


def test_second_frame_time_shows_the_wait_for_the_second_text_token(engine):
    """Streamed text: frame 2's decode needs text token 2, so the summary's second_frame_ms holds the
    wait for it (the first audio chunk, two frames, waits with it)."""
    clock = [1000.0]
    engine.clock, real_clock = (lambda: clock[0]), engine.clock
    try:
        got = Collector()
        ids = text_ids(50, 4)
        feed = add(engine, "slow-text", ids[:1], 3, close=False, max_new_tokens=8)
        for _ in range(5):            # prefilled with token 1 (its first frame), then parked on token 2
            clock[0] += 0.010
            got.take(engine.step())
        assert len(got.frames["slow-text"]) == 1 and engine.load()["num_requests_parked"] == 1
        clock[0] += 0.500             # the second word is slow to come
        feed.push(ids[1:])
        feed.close()
        while len(got.frames["slow-text"]) < 2:
            clock[0] += 0.010
            got.take(engine.step())
        while engine.has_work():      # the rest of the stream, slowly: its end is far from frame 2
            clock[0] += 1.0
            got.take(engine.step())
        final = got.final["slow-text"]
        assert 0 < final.first_frame_ms < 60
        assert 500 <= final.second_frame_ms - final.first_frame_ms <= 600
        assert final.total_ms > final.second_frame_ms + 1000
    finally:
        engine.clock = real_clock
