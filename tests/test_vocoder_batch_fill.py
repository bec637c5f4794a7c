"""The padding of a step's captured graphs filled with audio (vocoder_service/engine/batch_fill.py),
and late chunks counted by where their time went (engine.late_cause), on a fake clock."""
from __future__ import annotations

import numpy as np

from service_common.playback import PlaybackClock
from vocoder_service.engine.batch_fill import fill_batches, padded_shape, spare_streams
from vocoder_service.engine.batcher import PlannedBatch, ReadyRow
from vocoder_service.engine.chunk_policy import ChunkPolicy
from vocoder_service.engine.config import VocoderEngineConfig
from vocoder_service.engine.engine import VocoderEngine, late_cause
from vocoder_service.engine.outputs import ChunkTiming
from vocoder_service.engine.stream_state import StreamState

SPF = 4
SAMPLE_RATE_HZ = 50          # 4 samples a frame: 80 ms frames, as the real codec's
BATCH_SIZES = [1, 2, 4, 8]


def stream(rid: str, slot: int, pending: int, deadline_s: float | None = None, ended: bool = False,
           context: int = 0) -> StreamState:
    s = StreamState(rid, slot, None, None, 0.0, 0.0)
    s.pending, s.num_pending = ([np.full((pending, 16), slot, np.int64)] if pending else []), pending
    s.oldest_pending_s = 0.0 if pending else None
    s.context, s.num_context_pending = ([np.zeros((context, 16), np.int64)] if context else []), context
    s.ended_at_s = 0.0 if ended else None
    if deadline_s is not None:
        s.playback = PlaybackClock(deadline_s=deadline_s)
    return s


def row(s: StreamState, n: int, emit: bool = True) -> ReadyRow:
    return ReadyRow(s.request_id, s.slot, n, emit, s.ended and n == s.num_pending)


def test_padded_rows_take_left_out_streams_and_short_rows_take_their_waiting_frames():
    a, b, c = stream("a", 0, 10, 1.0), stream("b", 1, 3, 1.1), stream("c", 2, 4, 1.2, context=3)
    far, near, ended = stream("far", 3, 30, 9.0), stream("near", 4, 2, 1.5), stream("end", 5, 5, 5.0, ended=True)
    streams = {s.request_id: s for s in (a, b, c, far, near, ended)}
    # a 3-row batch of frame bucket 8 replays the 4 x 8 graph: one free row, and rows shorter than 8
    batch = PlannedBatch(8, [row(a, 4), row(b, 3), ReadyRow("c", 2, 3, False, False)])
    spare = spare_streams(list(streams.values()), {"a", "b", "c"}, 0.0, min_first_frames=2)
    assert [s.request_id for s in spare] == ["near", "end", "far"]          # earliest deadline first
    added = fill_batches([batch], streams, spare, BATCH_SIZES)
    got = {r.request_id: (r.num_frames, r.is_final) for r in batch.rows}
    # a: 4 -> 8 of its 10 frames; b has only its 3; c primes a clone (context rows keep their size);
    # the free row goes to the most urgent stream left out, with all it has (2 frames, not final)
    assert got == {"a": (8, False), "b": (3, False), "c": (3, False), "near": (2, False)}
    assert added == 4 + 2
    # the padded shape did not grow: 4 rows of bucket 8
    assert padded_shape(batch, BATCH_SIZES, None) == (4, 8) and batch.frames_bucket == 8


def test_a_filled_row_that_takes_a_streams_last_frames_ends_it_and_graph_shapes_bound_the_fill():
    done = stream("done", 0, 5, 2.0, ended=True)
    one = stream("one", 1, 2, 1.0)
    streams = {"done": done, "one": one}
    batch = PlannedBatch(8, [row(one, 2)])
    # a runner whose captured graphs have 2 rows at bucket 8: one free row, the ended stream's whole tail
    fill_batches([batch], streams, [done], BATCH_SIZES, covering_shape=lambda bs, t: (2, 8))
    assert [(r.request_id, r.num_frames, r.is_final) for r in batch.rows] == [("one", 2, False), ("done", 5, True)]
    # a batch of bucket 2 whose calls replay a 2 x 4 graph (its own shape's was slow): rows take up to 4
    # frames, and the batch's bucket grows to its longest row, still within that graph
    a, b = stream("a", 3, 6, 1.0), stream("b", 4, 3, 1.1)
    short = PlannedBatch(2, [row(a, 2), row(b, 2)])
    added = fill_batches([short], {"a": a, "b": b}, [], BATCH_SIZES, covering_shape=lambda bs, t: (2, 4))
    assert [(r.num_frames, r.is_final) for r in short.rows] == [(4, False), (3, False)] and added == 3
    assert short.frames_bucket == 4
    # no free row when the batch fills its graph; a stream that has not started waits for a whole first chunk
    new = stream("new", 2, 1)
    assert spare_streams([new], set(), 0.0, min_first_frames=2) == []
    assert spare_streams([stream("new", 2, 2)], set(), 0.0, min_first_frames=2)[0].request_id == "new"


class CountingRunner:
    """Fake decoder: records each call's (rows, frames) and the frames each slot got."""
    codebook_size = 2048

    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []
        self.frames_by_slot: dict[int, int] = {}

    def reset(self, slots) -> None:
        pass

    def decode(self, codes, slots, lengths):
        self.calls.append(tuple(codes.shape[::2]))
        for slot, n in zip(slots.tolist(), lengths.tolist()):
            self.frames_by_slot[slot] = self.frames_by_slot.get(slot, 0) + n
        return np.zeros((codes.shape[0], codes.shape[2] * SPF), np.float32)


def engine_with(fill: bool, clock: list[float]) -> tuple[VocoderEngine, CountingRunner]:
    runner = CountingRunner()
    config = VocoderEngineConfig(max_slots=8, samples_per_frame=SPF, sample_rate_hz=SAMPLE_RATE_HZ,
                                 chunk=ChunkPolicy(2, 8, quick_first_max_streams=0), fill_padding=fill)
    return VocoderEngine(runner, config, clock=lambda: clock[0]), runner


def test_the_engine_fills_padding_without_launching_more_or_larger_graphs():
    results = {}
    for fill in (False, True):
        clock = [0.0]
        engine, runner = engine_with(fill, clock)
        for i in range(3):   # three streams with 6 frames each: their first chunks (2 frames) are ready
            engine.open(f"s{i}")
            engine.add_frames(f"s{i}", 0, np.ones((6, 16), np.int64))
        engine.step()
        results[fill] = (runner.calls, dict(runner.frames_by_slot), engine.deadline_stats["filled_row_frames"])
    (calls_off, frames_off, filled_off), (calls_on, frames_on, filled_on) = results[False], results[True]
    # the same launch either way (3 rows of the 2-frame bucket, padded to the 4-row size) ...
    assert calls_off == calls_on == [(3, 2)]
    # ... and with nothing left out to fill the free row, the same audio (the rows already hold 2 of 2)
    assert frames_off == frames_on == {0: 2, 1: 2, 2: 2} and filled_off == filled_on == 0
    # a fourth, running stream left out of the step (not due, waiting for a bigger chunk) takes the free row
    clock = [0.0]
    engine, runner = engine_with(True, clock)
    engine.open("run")
    engine.add_frames("run", 0, np.ones((2, 16), np.int64))
    engine.step()                                     # its first chunk: 160 ms of audio from t = 0
    engine.add_frames("run", 1, np.ones((1, 16), np.int64))   # 1 frame: short of its next chunk, not due
    for i in range(3):
        engine.open(f"s{i}")
        engine.add_frames(f"s{i}", 0, np.ones((2, 16), np.int64))
    engine.step()
    # still one launch of the 4 x 2 graph; "run" got its waiting frame in the free row
    assert runner.calls[-1] == (4, 2) and runner.frames_by_slot[engine.streams["run"].slot] == 3
    assert engine.deadline_stats["filled_row_frames"] == 1


def test_late_chunks_are_counted_by_where_their_time_went():
    timing = lambda oldest, start: ChunkTiming(oldest, oldest, start, 5.0, 1, True)  # noqa: E731
    assert late_cause(timing(1.2, 1.3), deadline_s=1.0) == "talker"    # the frame came after the deadline
    assert late_cause(timing(0.5, 1.1), deadline_s=1.0) == "queued"    # it waited past the deadline
    assert late_cause(timing(0.5, 0.9), deadline_s=1.0) == "decode"    # the decode ran past it
    # the engine: a stream whose next frame comes 100 ms after its listener ran out is the talker's
    clock = [0.0]
    engine, _ = engine_with(True, clock)
    engine.open("a")
    engine.add_frames("a", 0, np.ones((2, 16), np.int64))
    engine.step()                                     # 160 ms of audio from t = 0
    clock[0] = 0.26
    engine.add_frames("a", 1, np.ones((1, 16), np.int64), is_final=True)
    engine.step()
    stats = engine.deadline_stats
    assert stats["late_chunks"] == stats["late_talker"] == 1 and stats["late_queued"] == stats["late_decode"] == 0
    assert abs(stats["max_lateness_ms"] - 100.0) < 1e-6


def test_a_step_decodes_its_most_urgent_batch_first():
    # a stream 140 ms past its deadline (its 4-frame catch-up chunk in the 4-frame bucket) and three
    # first chunks that arrived after that deadline (2-frame bucket): with launches free in the cost
    # model nothing is padded or merged (2 + 1 first chunks, 1 late row), and the late stream's batch
    # goes first (its chunk leaves when that batch is read back), not last for its larger bucket
    clock = [0.0]
    runner = CountingRunner()
    config = VocoderEngineConfig(max_slots=8, samples_per_frame=SPF, sample_rate_hz=SAMPLE_RATE_HZ,
                                 chunk=ChunkPolicy(2, 8, quick_first_max_streams=0), launch_cost_row_frames=0.0)
    engine = VocoderEngine(runner, config, clock=lambda: clock[0])
    engine.open("late")
    engine.add_frames("late", 0, np.ones((2, 16), np.int64))
    engine.step()                                     # 160 ms of audio from t = 0
    clock[0] = 0.30
    engine.add_frames("late", 1, np.ones((10, 16), np.int64))
    for i in range(3):
        engine.open(f"new{i}")
        engine.add_frames(f"new{i}", 0, np.ones((2, 16), np.int64))
    outs = engine.step()
    assert runner.calls[1:] == [(1, 4), (2, 2), (1, 2)]
    assert [o.request_id for o in outs] == ["late", "new0", "new1", "new2"]
