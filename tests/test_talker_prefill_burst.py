"""A burst of arrivals while streams are running: prefill chunks interleave with decode steps, so
the running streams get a frame every step and the gap between two of their decode steps stays
within (decode step) + (the prefill token budget), which the engine reports as max_decode_gap_ms.

Time is a fake clock the runner advances: DECODE_MS per decode step and PER_TOKEN_MS per padded
prefill position, so the bound is exact and the test does not depend on this machine's speed.
"""
from __future__ import annotations

import pytest

from talker_service.engine import TalkerEngine
from talker_service.engine.prefill_plan import CONTINUED, FRESH
from test_talker_engine_support import Collector, add, make_engine, text_ids
from test_vocoder_process_support import one_cpu_thread

DECODE_MS = 7.0
PER_TOKEN_MS = 0.05
NUM_RUNNING, NUM_BURST = 2, 6


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    with one_cpu_thread():
        yield


class TimedRunner:
    """Wraps the runner's two model calls (as the engine launches them): advances the fake clock
    and logs the call order."""

    def __init__(self, runner) -> None:
        self.runner, self.now_s, self.calls = runner, 0.0, []
        self._prefill, self._decode = runner.launch_prefill, runner.launch_decode
        runner.launch_prefill, runner.launch_decode = self.prefill, self.decode

    def clock(self) -> float:
        return self.now_s

    def prefill(self, chunks):
        shapes = self.runner.prefill_shapes
        padded = sum(shapes.cost([c.embeds.shape[0] for c in chunks if (c.start == 0) == (kind == FRESH)])
                     for kind in (FRESH, CONTINUED))
        self.calls.append(("prefill", padded))
        self.now_s += padded * PER_TOKEN_MS / 1e3
        return self._prefill(chunks)

    def decode(self, slots, *args):
        self.calls.append(("decode", len(slots)))
        self.now_s += DECODE_MS / 1e3
        return self._decode(slots, *args)


def burst(budget: int, chunk: int):
    runner = make_engine(max_slots=8, decode_graphs="emulate", prefill_chunk_tokens=chunk,
                         prefill_token_budget=budget).runner
    timed = TimedRunner(runner)
    engine = TalkerEngine(runner, clock=timed.clock)
    got = Collector()
    for i in range(NUM_RUNNING):                          # two streams, running before the burst
        add(engine, f"run{i}", text_ids(i, 30), 50 + i, max_new_tokens=80)
    for _ in range(3):
        got.take(engine.step())
    engine.stats.reset_windows()
    frames_before = {i: len(got.codes(f"run{i}")) for i in range(NUM_RUNNING)}
    for i in range(NUM_BURST):                            # long non-streaming prompts, all at once
        add(engine, f"new{i}", text_ids(10 + i, 60 + 5 * i), 70 + i, streaming=False, max_new_tokens=10)
    timed.calls.clear()
    num_steps = 0
    while any(not len(got.codes(f"new{i}")) for i in range(NUM_BURST)):
        got.take(engine.step())
        num_steps += 1
        assert num_steps < 100
    frames = {i: len(got.codes(f"run{i}")) - frames_before[i] for i in range(NUM_RUNNING)}
    return engine, timed.calls, frames, num_steps


def test_a_burst_is_prefilled_in_budgeted_chunks_between_decode_steps():
    budget, chunk = 64, 32
    engine, calls, frames, num_steps = burst(budget, chunk)
    prefills = [padded for kind, padded in calls if kind == "prefill"]
    assert len(prefills) >= 4, f"the burst should take several steps of prefill, got {calls}"
    assert max(prefills) <= budget
    for before, after in zip(calls, calls[1:]):           # never two prefills without a decode between
        assert not (before[0] == after[0] == "prefill"), calls
    # the running streams got a frame every step of the burst
    assert all(n == num_steps for n in frames.values()), (frames, num_steps)
    bound_ms = DECODE_MS + budget * PER_TOKEN_MS
    assert 0 < engine.stats.max_decode_gap_ms <= bound_ms + 1e-6
    assert engine.stats.decode_gap.summary()["count"] >= num_steps - 1
    assert engine.stats.num_prefill_chunks > NUM_BURST     # the long prompts took more than one chunk each


def test_without_a_tight_budget_the_burst_stalls_the_running_streams_longer():
    """The same burst with a budget that takes it whole: the bound above would not hold, so the
    test above can tell chunking from no chunking."""
    engine, calls, _, _ = burst(budget=1024, chunk=128)
    assert max(padded for kind, padded in calls if kind == "prefill") > 64
    assert engine.stats.max_decode_gap_ms > DECODE_MS + 64 * PER_TOKEN_MS
