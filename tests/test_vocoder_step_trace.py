"""The vocoder's step trace (--step-trace): one JSON line per step that says what it held."""
import json

import numpy as np

from benchmarks.step_trace_report import split_at_idle, summarize
from tests.test_vocoder_engine import make_engine
from vocoder_service.engine.chunk_policy import ChunkPolicy
from vocoder_service.engine.step_trace import StepTrace


def test_each_step_is_a_line_with_its_plan_batches_and_first_chunk_waits(tmp_path):
    path = tmp_path / "trace.jsonl"
    eng, clock = make_engine(chunk=ChunkPolicy(2, 25, quick_first_max_streams=0))
    eng.trace = StepTrace(str(path))
    eng.open("a")
    clock[0] = 0.010
    eng.add_frames("a", 0, np.ones((2, 16), np.int64))   # a first chunk: opened 10 ms after the stream
    clock[0] = 0.030
    eng.trace.note_receive(3, 4.5)
    first = eng.step()
    clock[0] = 0.050
    eng.add_frames("a", 1, np.ones((8, 16), np.int64), is_final=True)
    eng.trace.note_receive(1, 0.0)
    eng.step()
    eng.trace.close()
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [len(o.pcm) for o in first] == [8]
    assert len(lines) == 2
    one, two = lines
    assert one["recv"] == 3 and one["poll_ms"] == 4.5 and one["gap_ms"] is None
    assert one["b"] == [[1, 2, 1, one["b"][0][3]]]          # rows, frames, first-chunk rows, read back at
    assert one["firsts"] == [[30.0, 20.0, 20.0]]            # since open, oldest frame, newest frame
    assert one["rows"] == 1 and one["open"] == 1
    assert two["recv"] == 1 and two["gap_ms"] == 20.0       # 30 ms -> 50 ms, the first step took no clock time
    assert two["firsts"] == [] and two["b"][0][:3] == [1, 8, 0]
    # the first chunk (2 frames, 160 ms) started playback at 30 ms; the second left at 50 ms: in time
    assert one["late_chunks"] == [] and two["late_chunks"] == []

    report = summarize(lines)
    assert report["steps"] == 2 and report["first_chunks"] == 1
    assert report["first_wait_since_oldest_frame_ms"]["p50"] == 20.0
    # the gap before step two: 20 ms, none of it waiting in the poll
    assert report["busy_gap_ms"]["max"] == 20.0 and report["busy_gaps_over_50ms"] == 0
    slow = [dict(two, gap_ms=300.0, poll_ms=40.0)]        # a loop busy 260 ms between two steps
    assert summarize(lines + slow)["busy_gap_ms"]["max"] == 260.0
    assert summarize(lines + slow)["busy_gaps_over_50ms"] == 1


def test_the_report_cuts_a_trace_where_the_vocoder_sat_idle():
    steps = [{"gap_ms": g} for g in (None, 5.0, 2000.0, 3.0, 1500.0)]
    assert [len(p) for p in split_at_idle(steps, 1.0)] == [2, 2, 1]


def test_a_late_chunk_is_traced_with_its_lateness_cause_and_index(tmp_path):
    path = tmp_path / "trace.jsonl"
    eng, clock = make_engine(chunk=ChunkPolicy(2, 25, quick_first_max_streams=0))
    eng.trace = StepTrace(str(path))
    eng.open("a")
    eng.add_frames("a", 0, np.ones((2, 16), np.int64))
    eng.step()                                               # 160 ms of audio from t = 0
    clock[0] = 0.100
    eng.add_frames("a", 1, np.ones((2, 16), np.int64), is_final=True)
    clock[0] = 0.400                                         # the loop was away: 240 ms past the deadline
    eng.step()
    eng.trace.close()
    late = [json.loads(line)["late_chunks"] for line in path.read_text().splitlines()]
    assert late == [[], [[240.0, "queued", 2, 1]]]
    report = summarize([json.loads(line) for line in path.read_text().splitlines()])
    assert report["late_by_cause"] == {"queued": 1} and report["late_by_chunk_index"] == {1: 1}
    assert report["late_chunks"] == 1 and report["late_ms"]["max"] == 240.0
